//! Corrupt model metadata on the real default model: a real file with one hyper-parameter
//! changed fails to load with an error naming the key (the synthetic headers' checks are in
//! the offline tier's `corrupt_metadata`).

use specdec_gguf::{GgufFile, Value};
use specdec_runtime::{Executor, Model};

/// The default model with one metadata entry changed must fail to load with an error, as a
/// `generate` or `serve` would see it, instead of aborting on a huge allocation.
#[test]
fn real_model_with_corrupt_metadata_fails_to_load() {
    let path = specdec_model_store::resolve(None, true).unwrap();
    let clean = GgufFile::open(&path).unwrap();
    let arch = clean.get_str("general.architecture").unwrap().to_string();
    drop(clean);
    for (k, v) in [
        ("block_count", Value::U32(0xFFFF_FFFF)),
        ("block_count", Value::U32(0)),
        ("context_length", Value::U64(1 << 40)),
        ("rope.freq_base", Value::F32(f32::NAN)),
        ("attention.layer_norm_rms_epsilon", Value::F32(-1.0)),
    ] {
        let key = format!("{arch}.{k}");
        let mut f = GgufFile::open(&path).unwrap();
        f.metadata.insert(key.clone(), v.clone());
        let e = Model::from_gguf(&f, Executor::new(1))
            .err()
            .unwrap_or_else(|| panic!("{key} = {v:?} loaded"))
            .to_string();
        assert!(e.contains(&key), "{key} = {v:?}: {e}");
    }
}
