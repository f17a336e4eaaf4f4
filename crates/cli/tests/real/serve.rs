//! `specdec serve` over a real socket: the official `openai` Python client runs its checks
//! (scripts/openai_e2e.py), then Ctrl-C shuts the server down cleanly and saves the trie.
//!
//! The Python client comes from `$SPECDEC_PYTHON` (default `python3`). Where it lacks the
//! `openai` package the client checks are skipped with a note, unless
//! `SPECDEC_REQUIRE_E2E=1` (set by CI), which makes that a failure.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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

fn temp_trie(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-serve-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trie = dir.join("trie.bin");
    let _ = std::fs::remove_file(&trie);
    trie
}

/// Opens a completion stream that runs far longer than any test waits, and returns once
/// its first event has arrived.
fn long_stream(url: &str) -> TcpStream {
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let body = serde_json::json!({"model": "smol", "prompt": "Count: 1, 2, 3, 4, 5, 6,",
        "max_tokens": 6000, "temperature": 0, "stream": true, "speculation": {"method": "none"}})
    .to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("data:") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the stream ended before its first event");
        seen.extend_from_slice(&buf[..n]);
    }
    s
}

fn signal(server: &Serve, sig: &str) {
    let pid = server.0.id().to_string();
    assert!(Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap()
        .success());
}

/// Waits for the process to exit, up to `limit`.
fn wait_at_most(server: &mut Serve, limit: Duration) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            return status;
        }
        assert!(
            t0.elapsed() < limit,
            "the server still runs {limit:?} after the signal"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn sigterm_during_a_long_stream_cancels_it_after_the_grace_and_saves_the_trie() {
    let trie = temp_trie("term");
    let (mut server, url) = start(&["--trie", trie.to_str().unwrap(), "--shutdown-grace", "2"]);
    let mut stream = long_stream(&url);
    let t0 = Instant::now();
    signal(&server, "-TERM");
    // The grace, the engine's last step and the save, with room for a loaded machine.
    let status = wait_at_most(&mut server, Duration::from_secs(20));
    assert!(status.success(), "{status}");
    assert!(
        t0.elapsed() >= Duration::from_secs(2),
        "the request was not given its grace"
    );
    assert!(trie.exists(), "the trie was not saved");
    // The client heard the end of its stream.
    let mut rest = String::new();
    let _ = stream.read_to_string(&mut rest);
    assert!(rest.contains("[DONE]"), "{rest}");
    assert!(rest.contains("\"finish_reason\":\"cancelled\""), "{rest}");
}

#[test]
fn a_second_signal_exits_at_once_with_code_130() {
    let trie = temp_trie("twice");
    let (mut server, url) = start(&["--trie", trie.to_str().unwrap(), "--shutdown-grace", "600"]);
    let _stream = long_stream(&url);
    signal(&server, "-TERM");
    std::thread::sleep(Duration::from_millis(500));
    signal(&server, "-INT");
    let status = wait_at_most(&mut server, Duration::from_secs(10));
    assert_eq!(status.code(), Some(130), "{status}");
}

/// Runs `specdec serve ARGS` until it exits (after SIGTERM once it serves, when
/// `serves`), and returns its log.
fn log_of(args: &[&str], serves: bool) -> String {
    let log = std::env::temp_dir().join(format!(
        "specdec-serve-{}-{}.log",
        std::process::id(),
        args.len()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(["serve", "--port", "0"])
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    if serves {
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("http://"), "{line}");
        let mut server = Serve(child);
        signal(&server, "-TERM");
        assert!(wait_at_most(&mut server, Duration::from_secs(20)).success());
    } else {
        assert_eq!(child.wait().unwrap().code(), Some(1));
    }
    std::fs::read_to_string(&log).unwrap()
}

#[test]
fn start_up_settings_refusals_and_shutdown_phases_are_logged() {
    let trie = temp_trie("log");
    let log = log_of(
        &["--trie", trie.to_str().unwrap(), "--budget", "100000"],
        true,
    );
    for want in [
        "INFO",
        "starting: model",
        "trie /tmp",
        "concurrent requests",
        "serving",
        "WARN",
        "--budget 100000 is above the limit",
        "SIGTERM: shutting down",
        "shutdown: taking no new connections",
        "saved drafting state",
        "shutdown: done",
    ] {
        assert!(log.contains(want), "no `{want}` in the log:\n{log}");
    }
    let log = log_of(&["--max-concurrent", "0"], false);
    assert!(
        log.contains("ERROR") && log.contains("--max-concurrent"),
        "{log}"
    );
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

#[test]
fn serve_with_a_catalogue_file_answers_v1_recommend() {
    let dir = std::env::temp_dir().join(format!("specdec-serve-rec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let titles = dir.join("titles.txt");
    std::fs::write(
        &titles,
        "Toy Story (1995)\nBabe (1995)\nFargo (1996)\nApollo 13 (1995)\nStar Wars (1977)\n",
    )
    .unwrap();
    let (_server, url) = start(&["--catalogue", titles.to_str().unwrap()]);
    let addr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_string();
    let body = r#"{"history": ["Toy Story (1995)"], "k": 3}"#;
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/recommend HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains(r#""object":"recommendation""#), "{reply}");
    let json = reply.split("\r\n\r\n").nth(1).unwrap();
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 3, "{v}");
    let _ = std::fs::remove_dir_all(&dir);
}
