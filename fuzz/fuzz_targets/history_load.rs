//! Feeds arbitrary bytes to the history-index loader: an error or an index, never a panic;
//! an accepted index saves and reloads to itself, and matching on it works.
//!
//! Run (nightly): `cargo fuzz run history_load` from the repository root. The same
//! properties run on stable as the proptests in crates/drafters/tests/offline/suffix_decoding.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use specdec_drafters::{HistoryConfig, HistoryIndex};

fuzz_target!(|data: &[u8]| {
    let Ok(h) = HistoryIndex::from_bytes(data, HistoryConfig::default()) else {
        return;
    };
    let back = HistoryIndex::from_bytes(&h.to_bytes(), HistoryConfig::default())
        .expect("a loaded index saves to a loadable file");
    assert!(back == h, "round trip changed the index");
    let _ = h.check_vocab(1 << 16);
    let probe: Vec<u32> = data.iter().map(|&b| u32::from(b)).take(64).collect();
    let _ = h.longest_match(&probe);
});
