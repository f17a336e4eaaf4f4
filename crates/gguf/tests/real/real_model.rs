//! The real SmolLM2 file, when present: `$SPECDEC_MODEL` or the model store's default path.

use std::path::PathBuf;

use specdec_gguf::{dequantize, GgmlType, GgufFile};

fn model_path() -> PathBuf {
    match std::env::var_os("SPECDEC_MODEL") {
        Some(p) => PathBuf::from(p),
        // Where the store caches it (honouring SPECDEC_HOME); not fetched from here.
        None => specdec_model_store::cached_path(&specdec_model_store::DEFAULT_MODEL)
            .unwrap_or_default(),
    }
}

#[test]
fn smollm2_q4_1_header_and_tensors() {
    let path = model_path();
    if !path.exists() {
        println!(
            "skipped: {} is absent (set SPECDEC_MODEL to the SmolLM2-135M Q4_1 file)",
            path.display()
        );
        return;
    }
    let f = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(f.tensors.len(), 272);
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.get_u64("llama.block_count").unwrap(), 30);

    let emb = f.tensor("token_embd.weight").expect("token_embd.weight");
    assert_eq!(emb.ty, GgmlType::Q8_0);
    assert_eq!(emb.dims, [576, 49152]);

    let q = f
        .tensor("blk.0.attn_q.weight")
        .expect("blk.0.attn_q.weight");
    assert_eq!(q.ty, GgmlType::Q4_1);
    let mut out = vec![0f32; q.elements() as usize];
    dequantize(q.ty, f.tensor_data(q), &mut out).unwrap();
    assert!(out.iter().all(|v| v.is_finite()));
    assert!(out.iter().any(|&v| v != 0.0), "all-zero weights");

    // Every tensor the runtime might convert dequantizes without error.
    for t in f.tensors.iter().filter(|t| t.ty.can_dequantize()) {
        let mut out = vec![0f32; t.elements() as usize];
        dequantize(t.ty, f.tensor_data(t), &mut out).unwrap_or_else(|e| panic!("{}: {e}", t.name));
    }
}
