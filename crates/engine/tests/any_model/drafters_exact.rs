//! Every draft method through the tier's model gives exactly the plain output, greedy and
//! seeded sampling, on prompts that copy (references, code) and prompts that do not.

use crate::common;

use common::{chat, fixture};
use specdec_engine::{DraftMethod, DraftModel, Engine, GenerateRequest, Pool};

const DOC: &str = "The with statement simplifies exception handling by encapsulating common \
preparation and cleanup tasks. It calls the context manager's __enter__ method on entry and \
its __exit__ method on exit, even when the block raises an exception.";

const CODE: &str = "def add(a, b):\n    return a + b\n\n\ndef mean(values):\n    total = 0\n    \
for v in values:\n        total = total + v\n    return total / len(values)\n";

pub(crate) fn cases() -> Vec<(String, Vec<String>)> {
    vec![
        (
            format!("Documentation:\n{DOC}\n\nQuestion: What does the with statement do?"),
            vec![DOC.to_string()],
        ),
        (
            format!("Rewrite this Python code with type hints. Return only the code.\n\n{CODE}"),
            vec![CODE.to_string()],
        ),
        ("Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps over the lazy dog.".into(), vec![]),
        ("List the days of the week, one per line.".into(), vec![]),
        ("What is a hash map? Answer briefly.".into(), vec![]),
    ]
}

/// With the tier's model as its own draft for the `model` method (and in `auto`).
#[test]
fn every_draft_method_equals_plain_greedy_and_sampled() {
    every_method_equals_plain(fixture(), &cases(), 40, Some(common::self_draft()));
}

/// Every method against plain decoding; `draft` drafts for `model` and `auto` (without
/// one, `model` is skipped).
pub(crate) fn every_method_equals_plain(
    f: &common::Fixture,
    cases: &[(String, Vec<String>)],
    n: usize,
    draft: Option<&DraftModel>,
) {
    // Every run of a case shares its prompt: after plain's first run each prompt's cache is
    // reused (bit-exact, see `prefix_cache`), so the suite pays one prefill per case where
    // it paid one per run (on the 1.5B most of this test's time was prefill).
    let mut engine =
        Engine::new(&f.model, &f.tokenizer).with_prefix_cache(common::PREFIX_CACHE_BYTES);
    let pool = Pool::default();
    let samplings = common::greedy_and_seeded(3);
    for (prompt, refs) in cases {
        let prompt_tokens = chat(f, prompt);
        for sampling in &samplings {
            let mut req = GenerateRequest {
                sampling: sampling.clone(),
                ..GenerateRequest::new(prompt_tokens.clone(), n)
            };
            req.speculation.references = refs
                .iter()
                .map(|r| f.tokenizer.encode(r, false).unwrap())
                .collect();
            let plain = engine.generate(&req, &mut |_| true).unwrap();
            for m in DraftMethod::ALL.into_iter().skip(1) {
                if m == DraftMethod::Model && draft.is_none() {
                    continue;
                }
                let model = draft
                    .filter(|_| m.uses_model())
                    .map(|d| d.drafter(f.model.config().vocab, f.tokenizer.stop_ids(), true));
                let mut d = m.drafter(&pool, model);
                let out = engine
                    .generate_with(&req, d.as_deref_mut(), &mut |_| true)
                    .unwrap();
                assert_eq!(
                    out.token_ids,
                    plain.token_ids,
                    "{} differs on {prompt:?} (temperature {})",
                    m.name(),
                    sampling.temperature
                );
                assert_eq!(out.text, plain.text);
            }
        }
    }
}
