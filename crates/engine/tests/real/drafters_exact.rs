//! Draft methods on real models: every method equals plain on Qwen2.5-Coder-1.5B (when
//! cached), and on the default model a copying prompt takes fewer forwards.

use crate::any_model::drafters_exact::{cases, every_method_equals_plain};
use crate::common;

use common::{chat, fixture};
use specdec_engine::{DraftMethod, Engine, GenerateRequest, Pool};

/// The same on Qwen2.5-Coder-1.5B (Q4_K and Q6_K in their own formats), whose answers copy
/// what they should: a document, code to rewrite, and an open question; its 0.5B drafts
/// for the `model` method and in `auto` (when cached).
#[test]
fn every_draft_method_equals_plain_on_qwen_1_5b() {
    let Some(f) = common::qwen_fixture() else {
        return;
    };
    let mut all = cases();
    let picked = vec![all.remove(0), all.remove(0), all.pop().unwrap()];
    every_method_equals_plain(f, &picked, 24, common::qwen_draft());
}

#[test]
fn copying_prompts_are_decoded_in_fewer_forwards() {
    let f = fixture();
    let mut engine = Engine::new(&f.model, &f.tokenizer);
    let (prompt, refs) = cases().remove(2);
    let mut req = GenerateRequest::new(chat(f, &prompt), 40);
    req.speculation.references = refs
        .iter()
        .map(|r| f.tokenizer.encode(r, false).unwrap())
        .collect();
    let plain = engine.generate(&req, &mut |_| true).unwrap();
    let mut d = DraftMethod::Auto.drafter(&Pool::default(), None);
    let spec = engine
        .generate_with(&req, d.as_deref_mut(), &mut |_| true)
        .unwrap();
    assert_eq!(spec.token_ids, plain.token_ids);
    assert!(
        spec.spec.accepted_tokens > 0 && spec.forward_passes < plain.forward_passes,
        "{} forwards vs {}",
        spec.forward_passes,
        plain.forward_passes
    );
}
