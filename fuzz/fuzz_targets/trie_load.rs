//! Feeds arbitrary bytes to the trie loader, from memory and from a file: an error or a
//! trie, never a panic; an accepted trie is valid (it saves and reloads to itself, and
//! merging and vocabulary checks work on it).
//!
//! Run (nightly): `cargo fuzz run trie_load` from the repository root. The same properties
//! run on stable as the proptests in crates/drafters/tests/offline/lookahead_files.rs.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use specdec_drafters::Trie;

/// One file per fuzzing process, rewritten for every input.
fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("specdec-fuzz-trie-{}.trie", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let mem = Trie::from_bytes(data);
    let path = scratch();
    let file = std::fs::write(path, data).ok().map(|()| Trie::load(path));
    if let Some(file) = &file {
        assert_eq!(mem.is_ok(), file.is_ok(), "memory and file loads disagree");
    }
    let Ok(mut t) = mem else {
        return;
    };
    let bytes = t.to_bytes();
    let back = Trie::from_bytes(&bytes).expect("a loaded trie saves to a loadable file");
    assert!(back == t, "round trip changed the trie");
    let _ = t.check_vocab(1 << 16);
    let copy = t.clone();
    t.merge_max(&copy);
    assert!(t == copy, "merging a trie with itself changed it");
});
