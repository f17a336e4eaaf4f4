//! The `specdec` binary's refusals that come before any model is loaded.

use crate::common::cli::{assert_clean_error, specdec, temp_file};

#[test]
fn relaxed_verification_refuses_sampling_bad_values_and_forced_output() {
    let gen = ["generate", "--prompt", "Hi", "--verify", "relaxed"];
    assert_clean_error(
        &specdec(&[&gen[..], &["--temperature", "0.7"]].concat()),
        "greedy only",
    );
    assert_clean_error(
        &specdec(&[&gen[..], &["--verify-tau", "1"]].concat()),
        "tau must be in [0, 1)",
    );
    assert_clean_error(
        &specdec(&[&gen[..], &["--verify-top-k", "0"]].concat()),
        "top_k must be in 1..=64",
    );
    let wl = temp_file(
        "relaxed-forced.jsonl",
        br#"{"id":"a","prompt":"Hi.","max_tokens":4,"chat":true,"answer":"Hello."}"#,
    );
    let o = specdec(&[
        "bench",
        "--workload",
        wl.to_str().unwrap(),
        "--forced",
        "answer",
        "--verify",
        "relaxed",
    ]);
    assert_clean_error(&o, "cannot be combined");
}
