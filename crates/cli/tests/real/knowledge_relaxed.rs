//! Relaxed knowledge jobs on the real model are reproducible: two runs over the same
//! records and pools write the same texts and the same pool files, and a run killed with
//! SIGKILL and resumed (at another concurrency, the batch relaxed drafts are sized for
//! pinned with `--relaxed-batch`) writes what an uninterrupted one does.
//!
//! Regression: draft sizes followed measured forward times and records fed the pools as
//! they finished, and relaxed acceptance follows the drafts, so two relaxed runs over 108
//! records differed on 23 and a run killed 5 times and resumed differed on 61.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-relaxed-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Three groups of near-identical prompts (two warm-up records and eight targets each), so
/// that targets draft from what their group wrote, and more records than the lag.
fn write_records(dir: &Path) -> PathBuf {
    let mut lines = Vec::new();
    for (g, genre) in ["comedies", "westerns", "thrillers"].iter().enumerate() {
        for i in 0..10 {
            let role = if i < 2 { "warmup" } else { "target" };
            let prompt = format!(
                "Describe in two sentences the movie taste of viewer {g}-{i}, who loves {genre}."
            );
            lines.push(
                serde_json::json!({"id": format!("u{g}-{i}"), "kind": "user",
                    "group": format!("g{g}"), "role": role, "prompt": prompt, "max_tokens": 32})
                .to_string(),
            );
        }
    }
    let p = dir.join("records.jsonl");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn knowledge(input: &Path, output: &Path, pools: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_specdec"));
    c.args([
        "rec",
        "knowledge",
        "--verify",
        "relaxed",
        "--verify-top-k",
        "8",
    ])
    .args(["--verify-tau", "0", "--input"])
    .arg(input)
    .arg("--output")
    .arg(output)
    .arg("--pools")
    .arg(pools)
    // Relaxed texts depend on the batch their drafts are sized for, which follows
    // --concurrency unless pinned: pinned, every run below may use any concurrency.
    .args(["--relaxed-batch", "4"])
    .args(extra)
    .stdout(Stdio::null());
    c
}

/// What must not change between runs: each record's tokens and relaxed-token count.
fn outputs(path: &Path) -> BTreeMap<String, (Vec<u64>, u64)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut m = BTreeMap::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("a whole output line");
        let ids = v["token_ids"].as_array().unwrap();
        let ids = ids.iter().map(|x| x.as_u64().unwrap()).collect();
        let relaxed = v["relaxed_tokens"].as_u64().unwrap();
        let id = v["id"].as_str().unwrap().to_string();
        assert!(m.insert(id, (ids, relaxed)).is_none(), "an id twice in {l}");
    }
    m
}

/// Every file of a pools folder, by name.
fn pool_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn ok(mut c: Command) {
    let o = c.output().expect("the binary runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn relaxed_jobs_are_reproducible_and_a_killed_one_resumes_to_the_same_texts_and_pools() {
    let dir = temp_dir("repro");
    let input = write_records(&dir);
    let (a, b, c) = (
        dir.join("a.jsonl"),
        dir.join("b.jsonl"),
        dir.join("c.jsonl"),
    );
    let (pa, pb, pc) = (dir.join("pa"), dir.join("pb"), dir.join("pc"));
    ok(knowledge(&input, &a, &pa, &["--concurrency", "4"]));
    let want = outputs(&a);
    assert_eq!(want.len(), 30);
    let relaxed: u64 = want.values().map(|(_, r)| r).sum();
    assert!(
        relaxed > 0,
        "no token was relaxed: the test would not see a difference"
    );
    ok(knowledge(&input, &b, &pb, &["--concurrency", "4"]));
    assert_eq!(
        outputs(&b),
        want,
        "two runs over the same records and pools differ"
    );
    let pools = pool_files(&pa);
    assert!(pools.len() >= 6, "{:?}", pools.keys());
    assert!(
        pool_files(&pb) == pools,
        "the pools the two runs saved differ"
    );

    // Killed after its first records, then resumed at another concurrency.
    let mut child = knowledge(&input, &c, &pc, &["--concurrency", "2"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while std::fs::read_to_string(&c).map_or(0, |t| t.lines().count()) < 3 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the job ended before the kill"
        );
        assert!(t0.elapsed() < Duration::from_secs(300), "no output");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let written = std::fs::read(&c)
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    assert!(written < 30, "the kill came after the last record");
    ok(knowledge(
        &input,
        &c,
        &pc,
        &["--concurrency", "3", "--resume"],
    ));
    assert_eq!(
        outputs(&c),
        want,
        "a resumed relaxed run differs from an uninterrupted one"
    );
    assert!(pool_files(&pc) == pools, "the resumed run's pools differ");

    // Resuming a finished job feeds nothing twice (its marker lists what the pools hold).
    ok(knowledge(&input, &a, &pa, &["--resume"]));
    assert!(
        pool_files(&pa) == pools,
        "a resumed finished job fed its records again"
    );
    // Killed after its last record but before its pools were written: a resume writes them.
    std::fs::remove_dir_all(&pb).unwrap();
    std::fs::remove_file(dir.join("b.jsonl.pools-fed")).unwrap();
    ok(knowledge(&input, &b, &pb, &["--resume"]));
    assert!(
        pool_files(&pb) == pools,
        "the pools of a finished job were not written"
    );
    std::fs::remove_dir_all(dir).unwrap();
}
