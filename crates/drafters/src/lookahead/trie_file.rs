//! Persistence of a [`Trie`]'s counts (the shared output pool; prompt counts are
//! per-request and never saved).
//!
//! Format, version 1, little-endian:
//! ```text
//! magic    8 bytes  "specdTRI"
//! version  u32      1
//! reserved u32      0
//! count    u64      nodes, root excluded
//! nodes    count × (parent u32, token u32, count u32), parents first; parent 0 = root,
//!          node i (1-based) is the i-th record
//! checksum u64      FNV-1a of every byte before it
//! ```
//! Loading checks the magic, version, exact length, checksum and then the trie invariants
//! (parents first, no duplicate edges, counts positive and not above the parent's), so a
//! corrupt or foreign file is an error, never a panic or a silently wrong pool.

use std::fs;
use std::path::Path;
use std::time::SystemTime;

use crate::error::DraftError;
use crate::file_io::{
    check_vocab, read_file, u32_at, u64_at, write_atomic, write_locked, FileLock, Frame,
};
use crate::lookahead::trie::{Trie, TrieConfig};

const MAGIC: [u8; 8] = *b"specdTRI";
const FRAME: Frame = Frame {
    magic: MAGIC,
    version: 1,
    header: HEADER,
};
const HEADER: usize = 24;
const RECORD: usize = 12;

impl Trie {
    /// The file image of this trie (see the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.len();
        let mut b = FRAME.start(n * RECORD);
        b.extend_from_slice(&(n as u64).to_le_bytes());
        // Breadth-first renumbering so parents precede children.
        let mut file_id = vec![0u32; self.nodes.len()];
        let mut queue = std::collections::VecDeque::from([Trie::ROOT]);
        let mut next = 1u32;
        while let Some(p) = queue.pop_front() {
            for &c in self.children(p) {
                file_id[c as usize] = next;
                next += 1;
                b.extend_from_slice(&file_id[p as usize].to_le_bytes());
                b.extend_from_slice(&self.node_token(c).to_le_bytes());
                b.extend_from_slice(&self.node_count(c).to_le_bytes());
                queue.push_back(c);
            }
        }
        Frame::seal(&mut b);
        b
    }

    /// Parses a file image, with the default [`TrieConfig`].
    pub fn from_bytes(b: &[u8]) -> Result<Trie, DraftError> {
        let b = FRAME.open(b, |b| u64_at(b, 16).checked_mul(RECORD as u64))?;
        let n = u64_at(b, 16);
        if n >= u32::MAX as u64 {
            return Err(DraftError::Malformed(format!("{n} nodes: too many")));
        }
        let parts: Vec<(u32, u32, u32)> = b[HEADER..]
            .chunks_exact(RECORD)
            .map(|r| (u32_at(r, 0), u32_at(r, 4), u32_at(r, 8)))
            .collect();
        Trie::from_parts(TrieConfig::default(), &parts).map_err(DraftError::Malformed)
    }

    /// Checks every token id against a vocabulary of `vocab` ids, so a trie learned on
    /// another model is refused when loaded rather than failing every request drafting
    /// from it.
    pub fn check_vocab(&self, vocab: usize) -> Result<(), DraftError> {
        check_vocab(self.max_token(), vocab)
    }

    /// Writes the trie atomically: a temporary file in the same directory, fsync, rename
    /// over `path`, fsync of the directory. A crash leaves the old file or the new one.
    /// Savers of one file take an exclusive lock on its `.lock` sibling, so they
    /// serialize, and share one temporary name (`.NAME.tmp`), so a save interrupted by a
    /// kill leaves at most that one file, which the next save overwrites.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), DraftError> {
        write_atomic(path.as_ref(), &self.to_bytes())
    }

    /// Saves to a file other processes may save to as well. `last` is the stamp of the
    /// file as this trie last read or wrote it (`None`: never). Under the file's lock, if
    /// the file on disk is not that one (another process saved since), its paths are
    /// merged into this trie first ([`Trie::merge_max`]), so neither side's learning is
    /// lost; a file on disk that does not load is replaced. Returns the stamp of the file
    /// written, to pass to the next save.
    pub fn save_shared(
        &mut self,
        path: impl AsRef<Path>,
        last: Option<FileStamp>,
    ) -> Result<FileStamp, DraftError> {
        let path = path.as_ref();
        let _lock = FileLock::exclusive(path)?;
        let now = FileStamp::of(path);
        if now.is_some() && now != last {
            if let Ok(disk) = Trie::load(path) {
                self.merge_max(&disk);
            }
        }
        write_locked(path, &self.to_bytes())?;
        FileStamp::of(path).ok_or_else(|| DraftError::Io {
            path: path.into(),
            source: std::io::Error::other("saved file vanished"),
        })
    }

    /// Reads a trie written by [`Trie::save`], with the default [`TrieConfig`]. Anything
    /// but a regular file (a directory, a FIFO that would block forever, a device) is
    /// refused before it is opened.
    pub fn load(path: impl AsRef<Path>) -> Result<Trie, DraftError> {
        Trie::from_bytes(&read_file(path.as_ref(), &MAGIC)?)
    }

    /// [`Trie::load`] then [`Trie::check_vocab`].
    pub fn load_for_vocab(path: impl AsRef<Path>, vocab: usize) -> Result<Trie, DraftError> {
        let t = Trie::load(path)?;
        t.check_vocab(vocab)?;
        Ok(t)
    }
}

/// Which version of a file is on disk: device, inode, length and modification time. A save
/// renames a new file into place, so every save gives a new stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileStamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: Option<SystemTime>,
}

impl FileStamp {
    /// The stamp of the file at `path`, `None` if there is none.
    pub fn of(path: impl AsRef<Path>) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt;
        let m = fs::metadata(path).ok()?;
        Some(FileStamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: m.modified().ok(),
        })
    }
}
