//! Files of drafting state (tries, history indexes): atomic saves under a lock, and reads
//! that refuse anything but a regular file of the expected kind.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::DraftError;
use crate::hash::fnv1a64;

/// The frame every state file shares: `magic` (8 bytes), `version` u32, a reserved u32
/// (0), the kind's own header fields up to `header` bytes, the body, and the FNV-1a
/// checksum (u64) of every byte before it; all little-endian.
pub(crate) struct Frame {
    pub magic: [u8; 8],
    pub version: u32,
    pub header: usize,
}

const TRAILER: usize = 8;

impl Frame {
    /// A file image holding magic, version and the reserved field; the caller appends
    /// its header fields and body, then [`Frame::seal`]s it.
    pub fn start(&self, body_bytes: usize) -> Vec<u8> {
        let mut b = Vec::with_capacity(self.header + body_bytes + TRAILER);
        b.extend_from_slice(&self.magic);
        b.extend_from_slice(&self.version.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b
    }

    /// Appends the checksum.
    pub fn seal(b: &mut Vec<u8>) {
        let sum = fnv1a64(b);
        b.extend_from_slice(&sum.to_le_bytes());
    }

    /// Checks the frame of image `b` and returns it without its checksum (header fields
    /// at their offsets, the body from `header`). `body_len(b)` reads from the header how
    /// many body bytes the file must hold (`None`: more than can be). In order: the magic
    /// (a prefix of it is a truncated file), the length for a header, the version, the
    /// exact length, the checksum, the reserved field.
    pub fn open<'a>(
        &self,
        b: &'a [u8],
        body_len: impl FnOnce(&[u8]) -> Option<u64>,
    ) -> Result<&'a [u8], DraftError> {
        let found = b.len() as u64;
        let short = DraftError::Truncated {
            expected: (self.header + TRAILER) as u64,
            found,
        };
        if b.len() < self.magic.len() {
            return Err(if self.magic.starts_with(b) {
                short
            } else {
                DraftError::BadMagic
            });
        }
        if b[..8] != self.magic {
            return Err(DraftError::BadMagic);
        }
        if b.len() < self.header + TRAILER {
            return Err(short);
        }
        let version = u32_at(b, 8);
        if version != self.version {
            return Err(DraftError::UnsupportedVersion {
                found: version,
                expected: self.version,
            });
        }
        let expected = body_len(b)
            .and_then(|n| n.checked_add((self.header + TRAILER) as u64))
            .unwrap_or(u64::MAX);
        if expected != found {
            return Err(DraftError::Truncated { expected, found });
        }
        let end = b.len() - TRAILER;
        let (stored, computed) = (u64_at(b, end), fnv1a64(&b[..end]));
        if stored != computed {
            return Err(DraftError::Checksum { stored, computed });
        }
        if u32_at(b, 12) != 0 {
            return Err(DraftError::Malformed(
                "reserved header field is not zero".into(),
            ));
        }
        Ok(&b[..end])
    }
}

pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// An error if `max_token` (a loaded state's largest token id) is outside a vocabulary of
/// `vocab` ids: the state was learned on another model.
pub(crate) fn check_vocab(max_token: Option<u32>, vocab: usize) -> Result<(), DraftError> {
    match max_token {
        Some(token) if token as usize >= vocab => {
            Err(DraftError::TokenOutOfVocabulary { token, vocab })
        }
        _ => Ok(()),
    }
}

/// Writes `bytes` to `path` atomically and durably ([`specdec_fs`]). The caller holds the
/// file's [`FileLock`], so savers share one temporary name (`.NAME.tmp`) and a save
/// interrupted by a kill leaves at most that one file.
pub(crate) fn write_locked(path: &Path, bytes: &[u8]) -> Result<(), DraftError> {
    let fs_err = |e: specdec_fs::Error| DraftError::Io {
        path: e.path,
        source: e.source,
    };
    let mut file = specdec_fs::AtomicFile::create_serialized(path).map_err(fs_err)?;
    file.write_all(bytes).map_err(io_err(file.temp_path()))?;
    file.commit().map_err(fs_err)
}

/// Writes `bytes` to `path` atomically and durably (a temporary file, fsynced, renamed
/// into place, the folder fsynced) under the file's lock: a crash leaves the old file or
/// the new one, never a torn one.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DraftError> {
    let _lock = FileLock::exclusive(path)?;
    write_locked(path, bytes)
}

/// The bytes of the regular file at `path`, which must start with `magic`. Anything but a
/// regular file (a directory, a FIFO that would block forever, a device) is refused before
/// it is opened, and a foreign file is refused before it is read whole.
pub(crate) fn read_file(path: &Path, magic: &[u8]) -> Result<Vec<u8>, DraftError> {
    let io = |source| DraftError::Io {
        path: path.into(),
        source,
    };
    let meta = fs::metadata(path).map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(DraftError::NotAFile {
            path: path.into(),
            what: file_kind(&meta.file_type()),
        });
    }
    let mut f = File::open(path).map_err(io)?;
    let mut bytes = Vec::with_capacity(magic.len());
    (&mut f)
        .take(magic.len() as u64)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if !magic.starts_with(&bytes) {
        return Err(DraftError::BadMagic);
    }
    f.read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// What a non-regular file is, for messages (the model store has the same words for
/// model files; neither crate depends on the other).
fn file_kind(t: &fs::FileType) -> &'static str {
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

fn io_err(p: &Path) -> impl FnOnce(std::io::Error) -> DraftError {
    let p: PathBuf = p.into();
    move |source| DraftError::Io { path: p, source }
}

/// `path` with its file name `NAME` turned into `{before}NAME{after}`.
fn sibling(path: &Path, before: &str, after: &str) -> PathBuf {
    let mut name = std::ffi::OsString::from(before);
    name.push(path.file_name().unwrap_or_default());
    name.push(after);
    path.with_file_name(name)
}

/// An exclusive `flock` on `NAME.lock` beside a state file, held until dropped. The lock
/// file is left in place: removing it would let two savers lock different files.
pub(crate) struct FileLock {
    _file: File,
}

impl FileLock {
    /// Opens (creating it if needed) `NAME.lock` beside `path` and blocks until it holds
    /// the exclusive lock, retrying when a signal interrupts the wait.
    // libc::flock is an FFI call, hence unsafe; `File::lock` (std 1.89) would do the same
    // without it.
    #[allow(unsafe_code)]
    pub(crate) fn exclusive(path: &Path) -> Result<FileLock, DraftError> {
        use std::os::fd::AsRawFd;
        let lock = sibling(path, "", ".lock");
        let f = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock)
            .map_err(io_err(&lock))?;
        loop {
            // SAFETY: flock on a descriptor this function owns; no memory is involved.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(FileLock { _file: f });
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(DraftError::Io {
                    path: lock,
                    source: e,
                });
            }
        }
    }
}
