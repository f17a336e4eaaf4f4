//! Small knowledge files for `specdec rec quality`.

/// A file in a folder of the test's own: tests run in parallel, and one rewriting a file
/// another is reading would hand it a truncated file.
pub fn temp_file(test: &str, name: &str, text: &str) -> String {
    let dir =
        std::env::temp_dir().join(format!("specdec-rec-quality-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

pub fn line(id: &str, verify: &str, text: &str, tokens: &[u32], relaxed_tokens: usize) -> String {
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

pub fn files(test: &str) -> (String, String) {
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
