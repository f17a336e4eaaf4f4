//! `specdec serve` over a real socket: the official `openai` Python client runs its checks
//! (scripts/openai_e2e.py), then Ctrl-C shuts the server down cleanly and saves the trie.
//!
//! The Python client comes from `$SPECDEC_PYTHON` (default `python3`). Where it lacks the
//! `openai` package the client checks are skipped with a note, unless
//! `SPECDEC_REQUIRE_E2E=1` (set by CI), which makes that a failure.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
    }
}

/// Starts the server on a free port; returns it and its base URL.
fn start(extra: &[&str]) -> (Serve, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(["serve", "--port", "0", "--served-model-name", "smol"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("binary runs");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    (Serve(child), url)
}

fn python() -> String {
    std::env::var("SPECDEC_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn has_openai(py: &str) -> bool {
    Command::new(py)
        .args(["-c", "import openai"])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_official_openai_client_works_against_specdec_serve() {
    let py = python();
    if !has_openai(&py) {
        assert!(
            std::env::var("SPECDEC_REQUIRE_E2E").is_err(),
            "SPECDEC_REQUIRE_E2E is set but {py} cannot import openai"
        );
        eprintln!(
            "skipped: {py} has no `openai` package (pip install openai, or set SPECDEC_PYTHON)"
        );
        return;
    }
    let (_server, url) = start(&["--api-key", "sk-e2e"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/openai_e2e.py");
    let out = Command::new(&py)
        .arg(script)
        .args([&url, "sk-e2e", "smol"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("all checks passed"), "{text}");
}

#[test]
fn ctrl_c_stops_the_server_and_saves_the_trie() {
    let dir = std::env::temp_dir().join(format!("specdec-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trie = dir.join("trie.bin");
    let _ = std::fs::remove_file(&trie);
    let (mut server, _url) = start(&["--trie", trie.to_str().unwrap()]);
    // SIGINT, as a user's Ctrl-C.
    let pid = server.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    let status = server.0.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(trie.exists(), "the trie was not saved");

    std::fs::write(&trie, b"not a trie").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(["serve", "--port", "0", "--trie", trie.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("trie") && !err.contains("panicked"), "{err}");
}

#[test]
fn an_empty_api_key_or_a_control_character_in_the_model_name_stops_start_up() {
    // Before: `--api-key ""` served without auth; a newline in the name injected
    // `/metrics` lines.
    for args in [
        &["--api-key", ""][..],
        &["--served-model-name", "smol\nvllm:fake_total 1"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_specdec"))
            .args(["serve", "--port", "0"])
            .args(args)
            .env_remove("SPECDEC_API_KEY")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
