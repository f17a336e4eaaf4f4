//! Draft models derived from the real model: a self-draft of its first blocks loads as a
//! draft and runs, its predictions differ from the target's; a scrambled one runs with finite
//! logits; a draft with another vocabulary is refused with a clear error.

use crate::common;

use std::path::PathBuf;

use specdec_engine::beam::{DraftScoring, DRAFT_SCORING_KEY};
use specdec_engine::{load_draft, EngineError, ModelMeta};
use specdec_gguf::write::{encode_value, Builder};
use specdec_gguf::{truncate_blocks, GgufFile, Value};
use specdec_runtime::{Model, Node, SeqInput, Want};

fn target_path() -> PathBuf {
    specdec_model_store::resolve(None, true).expect("default model")
}

fn target_meta() -> ModelMeta {
    ModelMeta::open(&target_path()).unwrap()
}

/// `b` written to a file of its own for test `name`.
fn write(name: &str, b: &Builder) -> PathBuf {
    let path =
        std::env::temp_dir().join(format!("specdec-draft-{}-{name}.gguf", std::process::id()));
    b.write_to(&path).unwrap();
    path
}

fn self_draft(layers: usize, seed: Option<u64>) -> Builder {
    truncate_blocks(&GgufFile::open(target_path()).unwrap(), layers, seed).unwrap()
}

/// The logits after `tokens`.
fn last_logits(model: &Model, tokens: &[u32]) -> Vec<f32> {
    let mut seq = model.new_sequence();
    let out = model
        .forward(&mut [SeqInput {
            seq: &mut seq,
            nodes: &Node::chain(tokens),
            want: Want::Last,
        }])
        .unwrap();
    out[0].row(0).to_vec()
}

fn argmax(v: &[f32]) -> usize {
    (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap()
}

#[test]
fn a_four_block_self_draft_loads_and_runs() {
    let f = common::fixture();
    let meta = target_meta();
    let path = write("four", &self_draft(4, None));
    let draft = load_draft(&path, &meta, 2).unwrap();
    std::fs::remove_file(&path).unwrap();
    let cfg = &draft.meta.config;
    assert_eq!(cfg.n_layers, 4);
    assert_eq!(
        (cfg.vocab, cfg.hidden, cfg.context_length),
        (
            meta.config.vocab,
            meta.config.hidden,
            meta.config.context_length
        )
    );
    assert_eq!(
        draft.meta.tokenizer.vocab_size(),
        meta.tokenizer.vocab_size()
    );
    let prompt = common::chat(f, "What is the capital of France?");
    let ours = last_logits(&draft.model, &prompt);
    let theirs = last_logits(&f.model, &prompt);
    assert_eq!(ours.len(), theirs.len());
    assert!(ours.iter().all(|l| l.is_finite()));
    assert_ne!(
        ours, theirs,
        "four blocks of thirty predict exactly as all thirty"
    );
    assert_eq!(
        draft.draft_scoring,
        DraftScoring::Vocabulary,
        "no key: vocabulary"
    );
    // Deterministic: the same draft derived twice is the same file.
    assert_eq!(self_draft(4, None).build(), self_draft(4, None).build());
}

#[test]
fn a_self_draft_of_all_blocks_but_one_runs() {
    let f = common::fixture();
    let n = f.model.config().n_layers;
    let path = write("all-but-one", &self_draft(n - 1, None));
    let draft = load_draft(&path, &target_meta(), 2).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(draft.meta.config.n_layers, n - 1);
    let prompt = common::chat(f, "Name a colour.");
    let logits = last_logits(&draft.model, &prompt);
    assert!(logits.iter().all(|l| l.is_finite()));
    assert_ne!(logits, last_logits(&f.model, &prompt));
}

#[test]
fn a_scrambled_draft_runs_with_finite_logits() {
    let f = common::fixture();
    let path = write("scrambled", &self_draft(4, Some(1)));
    let draft = load_draft(&path, &target_meta(), 2).unwrap();
    std::fs::remove_file(&path).unwrap();
    let prompt = common::chat(f, "What is the capital of France?");
    let bad = last_logits(&draft.model, &prompt);
    assert!(bad.iter().all(|l| l.is_finite()));
    let good = last_logits(&f.model, &prompt);
    assert_ne!(
        argmax(&bad),
        argmax(&good),
        "a scrambled draft guessed right"
    );
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let mut b = self_draft(2, None);
    let tokens = b
        .raw_kv
        .iter_mut()
        .find(|r| r.key == "tokenizer.ggml.tokens")
        .unwrap();
    let src = GgufFile::open(target_path()).unwrap();
    let mut list = src.get_array("tokenizer.ggml.tokens").unwrap().to_vec();
    // Two ids swapped: every piece the merges name still exists, only the order differs.
    list.swap(17, 18);
    tokens.value = encode_value(&Value::Array(list));
    let path = write("other-vocab", &b);
    let meta = target_meta();
    let e = load_draft(&path, &meta, 2).err().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(e, EngineError::DraftVocabulary { .. }), "{e}");
    let msg = e.to_string();
    let size = format!("{} tokens", meta.tokenizer.vocab_size());
    for needle in ["different vocabulary", &size, "first difference at id 17"] {
        assert!(msg.contains(needle), "`{needle}` missing from: {msg}");
    }
}

#[test]
fn a_draft_declares_its_scoring_in_metadata() {
    let meta = target_meta();
    let marked =
        |value: &str| self_draft(1, None).kv(DRAFT_SCORING_KEY, Value::String(value.into()));
    let path = write("catalogue-scored", &marked("catalogue"));
    let draft = load_draft(&path, &meta, 1).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(draft.draft_scoring, DraftScoring::Catalogue);
    let path = write("badly-scored", &marked("catalog"));
    let e = load_draft(&path, &meta, 1).err().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(matches!(e, EngineError::DraftScoring { .. }), "{e}");
    assert!(e.to_string().contains("catalog"), "{e}");
}
