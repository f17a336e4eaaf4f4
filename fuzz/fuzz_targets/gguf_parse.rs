//! Feeds arbitrary bytes to the GGUF parser and dequantizes whatever it accepts.
//!
//! Run (nightly): `cargo fuzz run gguf_parse` from the repository root. The same properties
//! run on stable as the proptests in crates/gguf/tests/offline/robustness.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use specdec_gguf::{dequantize, GgufFile};

/// Larger tensors cannot come from a fuzz input anyway (their bytes must be present); the cap
/// keeps a logic error from turning into an out-of-memory report.
const MAX_ELEMENTS: u64 = 1 << 22;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = GgufFile::from_bytes(data.to_vec()) else {
        return;
    };
    let mut out = Vec::new();
    for t in &file.tensors {
        let n = t.elements();
        if !t.ty.can_dequantize() || n > MAX_ELEMENTS {
            continue;
        }
        out.clear();
        out.resize(n as usize, 0f32);
        // The parser checked shape against size, so a failure here is a bug worth reporting.
        dequantize(t.ty, file.tensor_data(t), &mut out).expect("accepted tensor dequantizes");
    }
});
