//! `specdec rec quality` end to end on small knowledge files.

use crate::common::cli::specdec;
use crate::common::quality::{files, line, temp_file};

#[test]
fn quality_json_compares_texts_overall_and_per_kind() {
    let (s, r) = files("json");
    let o = specdec(&["rec", "quality", "--strict", &s, "--relaxed", &r, "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = &v["text"];
    assert_eq!(text["overall"]["pairs"], 2);
    assert_eq!(text["overall"]["identical_text_rate"], 0.5);
    assert_eq!(text["items"]["identical_tokens_rate"], 1.0);
    assert_eq!(text["users"]["normalised_edit_distance"]["mean"], 0.25);
    assert_eq!(text["users"]["first_divergence"]["median"], 3.0);
    assert_eq!(text["pairs"].as_array().unwrap().len(), 2);
    assert!(v["downstream"].is_null());
}

#[test]
fn quality_prints_a_table_by_default() {
    let (s, r) = files("table");
    let o = specdec(&["rec", "quality", "--strict", &s, "--relaxed", &r]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for row in ["all", "users", "items", "ROUGE-L"] {
        assert!(out.contains(row), "{out}");
    }
}

#[test]
fn a_bad_knowledge_line_is_reported_with_its_file_and_number() {
    let (s, _) = files("bad");
    let bad = temp_file(
        "bad-line",
        "bad.jsonl",
        &format!("{}\nnot json\n", line("item-7", "relaxed", "x", &[1], 0)),
    );
    let o = specdec(&["rec", "quality", "--strict", &s, "--relaxed", &bad]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("bad.jsonl: line 2:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
