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

use std::fs::{self, File};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::DraftError;
use crate::hash::fnv1a64;
use crate::trie::{Trie, TrieConfig};

const MAGIC: [u8; 8] = *b"specdTRI";
const VERSION: u32 = 1;
const HEADER: usize = 24;
const RECORD: usize = 12;
const TRAILER: usize = 8;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl Trie {
    /// The file image of this trie (see the module docs).
    pub fn to_bytes(&self) -> Vec<u8> {
        let n = self.len();
        let mut b = Vec::with_capacity(HEADER + n * RECORD + TRAILER);
        b.extend_from_slice(&MAGIC);
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
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
        let sum = fnv1a64(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        b
    }

    /// Parses a file image, with the default [`TrieConfig`].
    pub fn from_bytes(b: &[u8]) -> Result<Trie, DraftError> {
        let found = b.len() as u64;
        if b.len() < MAGIC.len() {
            return Err(if MAGIC.starts_with(b) {
                DraftError::Truncated {
                    expected: (HEADER + TRAILER) as u64,
                    found,
                }
            } else {
                DraftError::BadMagic
            });
        }
        if b[..8] != MAGIC {
            return Err(DraftError::BadMagic);
        }
        if b.len() < HEADER + TRAILER {
            return Err(DraftError::Truncated {
                expected: (HEADER + TRAILER) as u64,
                found,
            });
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(DraftError::UnsupportedVersion {
                found: version,
                expected: VERSION,
            });
        }
        let n = u64_at(b, 16);
        let expected = n
            .checked_mul(RECORD as u64)
            .and_then(|x| x.checked_add((HEADER + TRAILER) as u64))
            .unwrap_or(u64::MAX);
        if expected != found {
            return Err(DraftError::Truncated { expected, found });
        }
        let body = b.len() - TRAILER;
        let stored = u64_at(b, body);
        let computed = fnv1a64(&b[..body]);
        if stored != computed {
            return Err(DraftError::Checksum { stored, computed });
        }
        if u32_at(b, 12) != 0 {
            return Err(DraftError::Malformed(
                "reserved header field is not zero".into(),
            ));
        }
        if n >= u32::MAX as u64 {
            return Err(DraftError::Malformed(format!("{n} nodes: too many")));
        }
        let parts: Vec<(u32, u32, u32)> = b[HEADER..body]
            .chunks_exact(RECORD)
            .map(|r| (u32_at(r, 0), u32_at(r, 4), u32_at(r, 8)))
            .collect();
        Trie::from_parts(TrieConfig::default(), &parts).map_err(DraftError::Malformed)
    }

    /// Writes the trie atomically: a temporary file in the same directory, fsync, rename
    /// over `path`, fsync of the directory. A crash leaves the old file or the new one.
    pub fn save(&self, path: impl AsRef<Path>) -> Result<(), DraftError> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let path = path.as_ref();
        let io = |p: &Path| {
            let p: PathBuf = p.into();
            move |source| DraftError::Io { path: p, source }
        };
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = path.with_file_name(name);
        let result = (|| {
            let mut f = File::create(&tmp).map_err(io(&tmp))?;
            f.write_all(&self.to_bytes()).map_err(io(&tmp))?;
            f.sync_all().map_err(io(&tmp))?;
            fs::rename(&tmp, path).map_err(io(path))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
            return result;
        }
        // Persist the rename itself; not every platform lets a directory be opened.
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
        if let Ok(d) = File::open(dir.unwrap_or(Path::new("."))) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Reads a trie written by [`Trie::save`], with the default [`TrieConfig`].
    pub fn load(path: impl AsRef<Path>) -> Result<Trie, DraftError> {
        let path = path.as_ref();
        let io = |source| DraftError::Io {
            path: path.into(),
            source,
        };
        // Look at the magic before reading a possibly large foreign file whole.
        let mut f = File::open(path).map_err(io)?;
        let mut head = Vec::with_capacity(MAGIC.len());
        (&mut f)
            .take(MAGIC.len() as u64)
            .read_to_end(&mut head)
            .map_err(io)?;
        if !MAGIC.starts_with(&head) {
            return Err(DraftError::BadMagic);
        }
        f.read_to_end(&mut head).map_err(io)?;
        Trie::from_bytes(&head)
    }
}
