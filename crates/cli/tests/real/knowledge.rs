//! `specdec rec knowledge` end to end on the real model: a job killed with SIGKILL and
//! resumed writes every record exactly once, with the texts of an uninterrupted run; Ctrl-C
//! finishes what is in flight, saves the pools and exits 130 while records are left; a
//! malformed line is reported with its number while the other records are written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Two groups, a warm-up record and two targets each.
const RECORDS: [(&str, &str, &str, &str); 6] = [
    ("user-1", "user", "g-a", "warmup"),
    ("user-2", "user", "g-a", "target"),
    ("user-3", "user", "g-a", "target"),
    ("item-1", "item", "g-b", "warmup"),
    ("item-2", "item", "g-b", "target"),
    ("item-3", "item", "g-b", "target"),
];

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-knowledge-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn record_line(id: &str, kind: &str, group: &str, role: &str) -> String {
    let prompt = match kind {
        "user" => {
            format!("Describe in two sentences the movie taste of viewer {id}, who loves comedies.")
        }
        _ => format!("Describe in two sentences the film catalogued as {id}, a family comedy."),
    };
    serde_json::json!({"id": id, "kind": kind, "group": group, "role": role,
        "prompt": prompt, "max_tokens": 24})
    .to_string()
}

fn write_records(dir: &Path, extra: &[&str]) -> PathBuf {
    let mut lines: Vec<String> = RECORDS
        .iter()
        .map(|(id, k, g, r)| record_line(id, k, g, r))
        .collect();
    lines.extend(extra.iter().map(|s| s.to_string()));
    let p = dir.join("records.jsonl");
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p
}

fn knowledge(input: &Path, output: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_specdec"));
    c.args(["rec", "knowledge", "--verify", "strict", "--input"])
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(extra);
    c
}

fn run(mut c: Command) -> Output {
    c.output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Each output line's id and text, in file order (every line must parse).
fn lines(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "torn output: {text}"
    );
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a whole output line");
            (
                v["id"].as_str().unwrap().to_string(),
                v["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits until `path` holds at least one whole line.
fn wait_for_a_line(child: &mut Child, path: &Path) {
    let t0 = Instant::now();
    loop {
        if std::fs::read(path).is_ok_and(|b| b.contains(&b'\n')) {
            return;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the job ended ({status}) before writing a line");
        }
        assert!(t0.elapsed() < Duration::from_secs(120), "no output line");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn(mut c: Command) -> Child {
    c.stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts")
}

fn assert_every_id_once(got: &[(String, String)]) -> HashMap<String, String> {
    let map: HashMap<String, String> = got.iter().cloned().collect();
    assert_eq!(map.len(), got.len(), "an id written twice: {got:?}");
    for (id, ..) in RECORDS {
        assert!(map.contains_key(id), "{id} missing: {got:?}");
    }
    assert_eq!(map.len(), RECORDS.len());
    map
}

#[test]
fn a_job_killed_and_resumed_writes_every_record_once_with_the_uninterrupted_texts() {
    let dir = temp_dir("kill");
    let input = write_records(&dir, &[]);
    let full = dir.join("full.jsonl");
    let o = run(knowledge(&input, &full, &["--concurrency", "2"]));
    assert!(o.status.success(), "{}", stderr(&o));
    let got = lines(&full);
    // Warm-up first (the default): both warm-up records finish before any target starts.
    let mut first: Vec<&str> = got[..2].iter().map(|(id, _)| id.as_str()).collect();
    first.sort();
    assert_eq!(first, ["item-1", "user-1"], "{got:?}");
    let want = assert_every_id_once(&got);

    let out = dir.join("killed.jsonl");
    let pools = dir.join("pools");
    let pools_arg = pools.to_str().unwrap();
    let mut child = spawn(knowledge(
        &input,
        &out,
        &["--concurrency", "1", "--pools", pools_arg],
    ));
    wait_for_a_line(&mut child, &out);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let before = lines(&out);
    assert!(
        before.len() < RECORDS.len(),
        "the kill came after the last record: {before:?}"
    );
    // A crash mid-write leaves half a line: the resumed run must cut it and redo its record.
    let missing = RECORDS
        .iter()
        .map(|r| r.0)
        .find(|id| before.iter().all(|(b, _)| b != id))
        .unwrap();
    let whole = std::fs::read_to_string(&full).unwrap();
    let line = whole
        .lines()
        .find(|l| l.contains(&format!("\"id\":\"{missing}\"")))
        .unwrap();
    let mut bytes = std::fs::read(&out).unwrap();
    bytes.extend_from_slice(&line.as_bytes()[..line.len() / 2]);
    std::fs::write(&out, bytes).unwrap();

    let o = run(knowledge(&input, &out, &["--pools", pools_arg]));
    assert_eq!(o.status.code(), Some(1), "no --resume: {}", stderr(&o));
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));
    let o = run(knowledge(&input, &out, &["--resume", "--pools", pools_arg]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("torn"), "{}", stderr(&o));
    let after = lines(&out);
    assert_eq!(&after[..before.len()], &before[..], "earlier lines kept");
    let got = assert_every_id_once(&after);
    assert_eq!(
        got, want,
        "strict greedy texts equal the uninterrupted run's"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Ctrl-C exited 0 with records left unstarted, so a script took the shard for done.
#[test]
#[allow(unsafe_code)] // libc::kill: std can only SIGKILL a child
fn ctrl_c_with_records_left_finishes_those_in_flight_saves_the_pools_and_exits_130() {
    let dir = temp_dir("sigint");
    let input = write_records(&dir, &[]);
    let out = dir.join("out.jsonl");
    let pools = dir.join("pools");
    let pools_arg = pools.to_str().unwrap();
    let mut child = spawn(knowledge(
        &input,
        &out,
        &["--concurrency", "2", "--pools", pools_arg],
    ));
    wait_for_a_line(&mut child, &out);
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stderr(&o).contains("not started"), "{}", stderr(&o));
    let got = lines(&out);
    assert!(!got.is_empty() && got.len() < RECORDS.len(), "{got:?}");
    let saved = std::fs::read_dir(&pools)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "trie")
        })
        .count();
    assert!(saved >= 1, "no pool saved in {}", pools.display());
    // What was not started runs on resume; nothing is written twice.
    let o = run(knowledge(&input, &out, &["--resume", "--pools", pools_arg]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_every_id_once(&lines(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

/// What a Kubernetes eviction sends: the same clean stop, but a non-zero status while
/// records are left, so the Job retries the index instead of counting it complete.
#[test]
#[allow(unsafe_code)] // libc::kill: std can only SIGKILL a child
fn sigterm_with_records_left_stops_cleanly_and_exits_143_for_a_retry() {
    let dir = temp_dir("sigterm");
    let input = write_records(&dir, &[]);
    let out = dir.join("out.jsonl");
    let mut child = spawn(knowledge(&input, &out, &["--concurrency", "2"]));
    wait_for_a_line(&mut child, &out);
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: kill(2) on our own child, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143), "{}", stderr(&o));
    let got = lines(&out);
    assert!(!got.is_empty() && got.len() < RECORDS.len(), "{got:?}");
    let o = run(knowledge(&input, &out, &["--resume"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_every_id_once(&lines(&out));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn malformed_lines_and_refused_records_are_reported_and_the_others_are_written() {
    let dir = temp_dir("malformed");
    let input = write_records(
        &dir,
        &[
            "{\"id\": \"broken\"",
            r#"{"id":"x","kind":"user","group":"bad/name","role":"target","prompt":"p"}"#,
            // Past the model's context: the engine refuses it.
            r#"{"id":"huge","kind":"user","group":"g-a","role":"target","prompt":"p","max_tokens":1000000}"#,
        ],
    );
    let out = dir.join("out.jsonl");
    let o = run(knowledge(
        &input,
        &out,
        &["--max-tokens", "4", "--warmup", "skip", "--draft", "none"],
    ));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("line 7"), "{err}");
    assert!(err.contains("line 8"), "{err}");
    assert!(err.contains("2 malformed"), "{err}");
    assert!(err.contains("record huge (line 9)"), "{err}");
    assert!(err.contains("1 failed"), "{err}");
    let got = lines(&out);
    let targets = RECORDS.iter().filter(|r| r.3 == "target").count();
    assert_eq!(got.len(), targets, "{got:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A `--max-tokens` near 2^64 wrapped `prompt + max_tokens` past the engine's context
/// check, and the records ran on (until the end of the context) instead of being refused.
#[test]
fn max_tokens_near_2_to_the_64_is_refused_before_any_record_runs() {
    let dir = temp_dir("max-tokens");
    let line = |id: &str| {
        serde_json::json!({"id": id, "kind": "user", "group": "g-a", "role": "target",
            "prompt": "Describe a viewer who loves comedies."})
        .to_string()
    };
    let input = dir.join("records.jsonl");
    std::fs::write(&input, format!("{}\n{}\n", line("user-1"), line("user-2"))).unwrap();
    let out = dir.join("out.jsonl");
    for max_tokens in [u64::MAX, u64::MAX - 40] {
        let mut child = spawn(knowledge(
            &input,
            &out,
            &["--max-tokens", &max_tokens.to_string()],
        ));
        // Before the fix the records ran to the end of the context: fail, don't wait.
        let t0 = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if t0.elapsed() > Duration::from_secs(120) {
                child.kill().unwrap();
                panic!("still running: --max-tokens {max_tokens} was not refused");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let o = child.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("context"), "{}", stderr(&o));
        assert!(lines(&out).is_empty(), "no record ran");
    }
    std::fs::remove_dir_all(dir).unwrap();
}
