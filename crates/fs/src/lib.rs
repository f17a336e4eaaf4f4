//! The one way specdec persists a file: atomically and durably.
//!
//! Every save writes a temporary file in the target's directory, fsyncs it, renames it over
//! the target and fsyncs the directory, so a crash or a kill leaves the old file or the new
//! one, never a torn one, and a save that returned `Ok` survives a power cut. A save that
//! fails removes its temporary file. Missing directories above the target are created (and
//! their entries made durable); a path with no file name, or a parent that is not a
//! directory, is refused with an [`Error`] naming the step and the path.
//!
//! [`write_atomic`] writes bytes, [`write_atomic_with`] streams through a closure, and
//! [`AtomicFile`] is the guard both use, for callers that check what they wrote before it
//! is installed (a download's hash, say): dropping it uncommitted installs nothing.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The step of a save that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The target path has no file name (`/`, `..`, empty).
    Name,
    /// Creating a missing directory above the target.
    CreateDir,
    /// Creating the temporary file.
    CreateTemp,
    /// Writing the temporary file (the caller's closure included).
    Write,
    /// Fsyncing the temporary file.
    SyncFile,
    /// Renaming the temporary file over the target.
    Rename,
    /// Fsyncing a directory whose entries changed.
    SyncDir,
}

impl Step {
    /// What failed, as the start of a message (`"cannot write"`), in the words the crates'
    /// own `io(what, path)` errors use.
    pub fn what(self) -> &'static str {
        match self {
            Step::Name => "cannot name a file for",
            Step::CreateDir => "cannot create directory",
            Step::CreateTemp => "cannot create",
            Step::Write => "cannot write",
            Step::SyncFile => "cannot sync",
            Step::Rename => "cannot rename into",
            Step::SyncDir => "cannot sync directory",
        }
    }
}

/// A failed save: the step, the path it acted on (the temporary file for
/// [`Step::CreateTemp`], [`Step::Write`] and [`Step::SyncFile`], the directory for
/// [`Step::CreateDir`] and [`Step::SyncDir`], else the target) and the system's error.
#[derive(Debug, thiserror::Error)]
#[error("{} {}: {source}", step.what(), path.display())]
pub struct Error {
    /// The step that failed.
    pub step: Step,
    /// The file or directory the step acted on.
    pub path: PathBuf,
    /// The system's error.
    #[source]
    pub source: io::Error,
}

impl Error {
    fn at(step: Step, path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
        move |source| Error {
            step,
            path: path.to_path_buf(),
            source,
        }
    }
}

impl From<Error> for io::Error {
    /// Keeps the system error's kind; the message names the step and the path.
    fn from(e: Error) -> io::Error {
        io::Error::new(e.source.kind(), e)
    }
}

/// Writes `bytes` to `path` atomically and durably (see the crate's documentation).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Writes `path` atomically and durably from what `write` puts in the buffered temporary
/// file; an error from `write` (a [`Step::Write`] error) installs nothing. Returns what
/// `write` returned.
pub fn write_atomic_with<T>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<T>,
) -> Result<T, Error> {
    let mut file = AtomicFile::create(path)?;
    let value = write(file.writer()).map_err(Error::at(Step::Write, &file.temp))?;
    file.commit()?;
    Ok(value)
}

/// A file being written beside its target, installed by [`AtomicFile::commit`]; dropped
/// without a commit, it removes its temporary file and leaves the target as it was.
pub struct AtomicFile {
    target: PathBuf,
    temp: PathBuf,
    writer: Option<BufWriter<File>>,
    installed: bool,
}

impl AtomicFile {
    /// Starts a save of `path` in a fresh temporary file, `.NAME.tmp-PID-N`, that no other
    /// save (of this process or another) shares.
    pub fn create(path: &Path) -> Result<AtomicFile, Error> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (dir, name) = split(path)?;
        ensure_dir(dir)?;
        loop {
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let temp = sibling(dir, &name, &format!(".tmp-{}-{n}", std::process::id()));
            match OpenOptions::new().write(true).create_new(true).open(&temp) {
                Ok(file) => return Ok(AtomicFile::new(path, temp, file)),
                // A leftover of a killed process that had our pid: take the next name.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(Error::at(Step::CreateTemp, &temp)(e)),
            }
        }
    }

    /// Starts a save of `path` whose writers the caller serializes (it holds a lock on
    /// `path` until the commit): the temporary file has a fixed name, `.NAME.tmp`, so a
    /// save killed midway leaves that one file, which the next save truncates and reuses.
    pub fn create_serialized(path: &Path) -> Result<AtomicFile, Error> {
        let (dir, name) = split(path)?;
        ensure_dir(dir)?;
        let temp = sibling(dir, &name, ".tmp");
        let file = File::create(&temp).map_err(Error::at(Step::CreateTemp, &temp))?;
        Ok(AtomicFile::new(path, temp, file))
    }

    fn new(target: &Path, temp: PathBuf, file: File) -> AtomicFile {
        AtomicFile {
            target: target.to_path_buf(),
            temp,
            writer: Some(BufWriter::new(file)),
            installed: false,
        }
    }

    /// The buffered temporary file.
    pub fn writer(&mut self) -> &mut BufWriter<File> {
        self.writer
            .as_mut()
            .expect("an uncommitted file has its writer")
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.target
    }

    /// The temporary file's path (gone once committed or dropped).
    pub fn temp_path(&self) -> &Path {
        &self.temp
    }

    /// Flushes and fsyncs the temporary file, renames it over the target and fsyncs the
    /// directory. On an error before the rename the temporary file is removed and the
    /// target is as it was; a [`Step::SyncDir`] error comes after the rename (the new file
    /// is in place, its durability unknown).
    pub fn commit(mut self) -> Result<(), Error> {
        let writer = self.writer.take().expect("committed once");
        let file = writer
            .into_inner()
            .map_err(|e| Error::at(Step::Write, &self.temp)(e.into_error()))?;
        file.sync_all()
            .map_err(Error::at(Step::SyncFile, &self.temp))?;
        drop(file);
        fs::rename(&self.temp, &self.target).map_err(Error::at(Step::Rename, &self.target))?;
        self.installed = true;
        sync_dir(parent(&self.target))
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.writer().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.writer().write_all(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.writer().flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        drop(self.writer.take());
        if !self.installed {
            let _ = fs::remove_file(&self.temp);
        }
    }
}

/// Fsyncs directory `dir`, making the creation, removal or renaming of its entries
/// durable. File systems that cannot sync a directory (or open one) are let be: the error
/// is returned only for a failure of the sync itself.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    let Ok(d) = File::open(dir) else {
        return Ok(());
    };
    match d.sync_all() {
        Err(e)
            if !matches!(
                e.kind(),
                io::ErrorKind::InvalidInput | io::ErrorKind::Unsupported
            ) =>
        {
            Err(Error::at(Step::SyncDir, dir)(e))
        }
        _ => Ok(()),
    }
}

/// The directory holding `path` (`.` for a bare file name).
pub fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `path`'s directory and file name, or a [`Step::Name`] error.
fn split(path: &Path) -> Result<(&Path, OsString), Error> {
    match path.file_name() {
        Some(name) => Ok((parent(path), name.to_os_string())),
        None => Err(Error::at(Step::Name, path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        ))),
    }
}

/// `dir/.NAME{suffix}`.
fn sibling(dir: &Path, name: &OsString, suffix: &str) -> PathBuf {
    let mut s = OsString::from(".");
    s.push(name);
    s.push(suffix);
    dir.join(s)
}

/// Creates `dir` and any missing directory above it, syncing the parent of each one
/// created; an existing directory costs one `stat`.
fn ensure_dir(dir: &Path) -> Result<(), Error> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && fs::symlink_metadata(d).is_err() {
        missing.push(d);
        d = match d.parent() {
            Some(p) => p,
            None => break,
        };
    }
    fs::create_dir_all(dir).map_err(Error::at(Step::CreateDir, dir))?;
    for created in missing.iter().rev() {
        sync_dir(parent(created))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh empty directory for one test.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("specdec-fs-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn content_is_replaced_whole_and_no_temporary_is_left() {
        let dir = scratch("replace");
        let path = dir.join("a.json");
        write_atomic(&path, b"first").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"first");
        write_atomic(&path, b"second, longer").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second, longer");
        let n = write_atomic_with(&path, |w| {
            w.write_all(b"3")?;
            w.write_all(b"rd")?;
            Ok(3)
        })
        .unwrap();
        assert_eq!(n, 3);
        assert_eq!(fs::read(&path).unwrap(), b"3rd");
        assert_eq!(names(&dir), ["a.json"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_failed_write_removes_its_temporary_and_keeps_the_old_file() {
        let dir = scratch("fail");
        let path = dir.join("a.txt");
        write_atomic(&path, b"old").unwrap();
        let e = write_atomic_with(&path, |w| {
            w.write_all(b"half of the n")?;
            w.flush()?;
            Err::<(), _>(io::Error::other("the caller gave up"))
        })
        .unwrap_err();
        assert_eq!(e.step, Step::Write);
        assert!(e.to_string().contains("the caller gave up"), "{e}");
        assert!(e.to_string().starts_with("cannot write"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(names(&dir), ["a.txt"]);
        // A guard dropped uncommitted installs nothing either.
        let mut f = AtomicFile::create(&path).unwrap();
        f.write_all(b"never installed").unwrap();
        let temp = f.temp_path().to_path_buf();
        assert!(temp.exists());
        drop(f);
        assert!(!temp.exists());
        assert_eq!(fs::read(&path).unwrap(), b"old");
        // A rename that cannot happen (the target is a non-empty directory).
        let busy = dir.join("busy");
        fs::create_dir_all(busy.join("x")).unwrap();
        let e = write_atomic(&busy, b"x").unwrap_err();
        assert_eq!(e.step, Step::Rename, "{e}");
        assert_eq!(e.path, busy);
        assert_eq!(names(&dir), ["a.txt", "busy"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn missing_directories_are_created_and_a_file_in_the_way_is_refused() {
        let dir = scratch("dirs");
        let path = dir.join("x").join("y").join("z.bin");
        write_atomic(&path, b"deep").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"deep");
        let blocker = dir.join("plain");
        fs::write(&blocker, b"a file").unwrap();
        let e = write_atomic(&blocker.join("child"), b"x").unwrap_err();
        assert_eq!(e.step, Step::CreateDir, "{e}");
        assert_eq!(e.path, blocker);
        assert!(e.to_string().starts_with("cannot create directory"), "{e}");
        for bad in ["", "/", "a/.."] {
            let e = write_atomic(Path::new(bad), b"x").unwrap_err();
            assert_eq!(e.step, Step::Name, "{bad}: {e}");
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn temporaries_are_unique_unless_the_writers_are_serialized() {
        let dir = scratch("temps");
        let path = dir.join("t");
        let a = AtomicFile::create(&path).unwrap();
        let b = AtomicFile::create(&path).unwrap();
        assert_ne!(a.temp_path(), b.temp_path());
        assert_eq!(a.temp_path().parent(), Some(dir.as_path()));
        drop((a, b));
        // A leftover of a killed serialized save is truncated and reused.
        fs::write(dir.join(".t.tmp"), b"a leftover, longer than the save").unwrap();
        let mut s = AtomicFile::create_serialized(&path).unwrap();
        assert_eq!(s.temp_path(), dir.join(".t.tmp"));
        s.write_all(b"new").unwrap();
        s.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(names(&dir), ["t"]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn errors_convert_to_io_errors_keeping_kind_and_message() {
        let e = write_atomic(Path::new("/"), b"x").unwrap_err();
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::InvalidInput);
        assert!(io.to_string().contains("names no file"), "{io}");
    }

    #[test]
    fn a_bare_name_lives_in_the_current_directory() {
        assert_eq!(parent(Path::new("f")), Path::new("."));
        assert_eq!(parent(Path::new("d/f")), Path::new("d"));
        sync_dir(Path::new(".")).unwrap();
    }
}
