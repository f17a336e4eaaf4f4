//! Running the `specdec` binary and checking what it says.

use std::process::{Command, Output};

pub fn specdec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(args)
        .output()
        .expect("binary runs")
}

/// Runs specdec, which must succeed, and parses its standard output as JSON.
pub fn specdec_json(args: &[&str]) -> serde_json::Value {
    let o = specdec(args);
    assert!(o.status.success(), "{}", stderr(&o));
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// A failing command exits 1 with one clear error line and never a panic.
pub fn assert_clean_error(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("error:"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.to_lowercase().contains(&needle.to_lowercase()),
        "expected `{needle}` in: {err}"
    );
}
