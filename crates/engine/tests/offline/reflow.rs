//! Wrapped prose is drafted as a model quotes it: a reference wrapped at a fixed width
//! (as the Python FAQ's sections are) serves an answer that quotes it as running prose
//! about as well as the same reference unwrapped. Before, every wrapped line ended the
//! copy (on the 1.5B, FAQ answers quoting a section verbatim were drafted three tokens at
//! a time).

use specdec_engine::budget::CostModel;
use specdec_engine::{DraftMethod, Engine, Forced, SamplingParams};

use specdec_runtime::FakeTarget;

use crate::fake::{request, tokenizer, VOCAB};

const WRAPPED: &str = "Python is an interpreted, interactive, object-oriented programming \
language.  It\nincorporates modules, exceptions, dynamic typing, very high level dynamic \
data\ntypes, and classes.  It supports multiple programming paradigms beyond\n\
object-oriented programming, such as procedural and functional programming.\n\
Python combines remarkable power with very clear syntax. It has interfaces to\n\
many system calls and libraries, as well as to various window systems, and is\n\
extensible in C or C++.";

#[test]
fn a_wrapped_reference_is_copied_as_running_prose() {
    let tok = tokenizer();
    let unwrapped = WRAPPED.replace(".  ", ". ").replace('\n', " ");
    let answer = tok.encode(&unwrapped, false).unwrap();
    let prompt = tok.encode("Question: what is Python?\n", false).unwrap();
    // Room for the byte-level answer (a space is three bytes of `▁`).
    let t = FakeTarget::new(VOCAB, 4096);
    let steps = |reference: &str| {
        // A fresh engine each time: nothing learned from the other run.
        let mut engine = Engine::new(&t, tok).with_cost_model(CostModel::frozen());
        let refs = vec![tok.encode(reference, false).unwrap()];
        let req = request(&prompt, &refs, &SamplingParams::default(), answer.len())
            .speculate(DraftMethod::Reference);
        let expected = [prompt.clone(), answer.clone()].concat();
        let out = engine
            .generate_forced(&req, Forced::replay(expected), &mut |_| true)
            .unwrap();
        assert_eq!(out.token_ids, answer);
        out.spec.steps
    };
    let (wrapped, unwrapped) = (steps(WRAPPED), steps(&unwrapped));
    // Without the unwrapped copy: 62 steps against 29.
    assert!(
        wrapped <= unwrapped + unwrapped / 4,
        "wrapped reference: {wrapped} steps, unwrapped: {unwrapped}"
    );
    assert!(
        wrapped * 4 < answer.len(),
        "{wrapped} steps for {} tokens",
        answer.len()
    );
}
