//! `specdec rec quality` end to end on small knowledge files.

use std::process::{Command, Output};

fn specdec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// A file in a folder of the test's own: tests run in parallel, and one rewriting a file
/// another is reading would hand it a truncated file.
fn temp_file(test: &str, name: &str, text: &str) -> String {
    let dir =
        std::env::temp_dir().join(format!("specdec-rec-quality-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn line(id: &str, verify: &str, text: &str, tokens: &[u32], relaxed_tokens: usize) -> String {
    let (kind, key) = if id.starts_with("user") {
        ("user", "user_id")
    } else {
        ("item", "item_id")
    };
    let num: u32 = id.rsplit('-').next().unwrap().parse().unwrap();
    serde_json::json!({
        "id": id, "kind": kind, "group": "g0", "role": "target", key: num, "text": text,
        "token_ids": tokens, "finish_reason": "stop", "verify": verify,
        "relaxed_tokens": relaxed_tokens, "completion_tokens": tokens.len(),
        "forward_passes": 3, "mean_accepted_length": 2.0, "elapsed_ms": 1.0
    })
    .to_string()
}

fn files(test: &str) -> (String, String) {
    let strict = [
        line("user-1", "strict", "loves dark thrillers", &[1, 2, 3, 4], 0),
        line("item-7", "strict", "a quiet drama", &[5, 6, 7], 0),
    ];
    let relaxed = [
        line("item-7", "relaxed", "a quiet drama", &[5, 6, 7], 0),
        line("user-1", "relaxed", "loves dark comedies", &[1, 2, 3, 9], 1),
    ];
    (
        temp_file(test, "strict.jsonl", &(strict.join("\n") + "\n")),
        temp_file(test, "relaxed.jsonl", &(relaxed.join("\n") + "\n")),
    )
}

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

/// The downstream check on the real MovieLens split (fetched into the cache like every
/// dataset), with a tiny knowledge sample and few text buckets to keep it quick.
#[test]
fn downstream_reports_auc_and_log_loss_without_knowledge_with_strict_and_with_relaxed() {
    let (s, r) = files("downstream");
    let o = specdec(&[
        "rec",
        "quality",
        "--strict",
        &s,
        "--relaxed",
        &r,
        "--downstream",
        "--text-buckets",
        "8",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &v["downstream"];
    for run in ["none", "strict", "relaxed"] {
        let auc = d[run]["auc"].as_f64().unwrap();
        let loss = d[run]["log_loss"].as_f64().unwrap();
        // Ids and profile fields alone predict ratings >= 4 better than chance.
        assert!(auc > 0.6 && auc < 1.0, "{run}: AUC {auc}");
        assert!(loss > 0.0 && loss < 0.75, "{run}: log loss {loss}");
        // 943 users' validation and test interactions.
        assert_eq!(d[run]["heldout_rows"], 1886, "{run}");
    }
    assert_eq!(d["none"]["users_with_text"], 0);
    assert_eq!(d["strict"]["users_with_text"], 1);
    assert_eq!(d["relaxed"]["items_with_text"], 1);
}
