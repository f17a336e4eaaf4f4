//! `specdec rec recommend` end to end on the real model with a small catalogue file: K
//! titles from the catalogue, best first; speculative search (a self-draft) returns plain's
//! list; relaxed search says so; bad input is a clean error.

use std::process::{Command, Output};

use serde_json::Value;

const TITLES: &str = "Toy Story (1995)\nGoldenEye (1995)\nFour Rooms (1995)\nGet Shorty (1995)\n\
Copycat (1995)\nTwelve Monkeys (1995)\nBabe (1995)\nDead Man Walking (1995)\nRichard III (1995)\n\
Seven (Se7en) (1995)\nUsual Suspects, The (1995)\nBraveheart (1995)\nTaxi Driver (1976)\n\
Apollo 13 (1995)\nBatman Forever (1995)\nStar Wars (1977)\nStar Trek: Generations (1994)\n\
Stargate (1994)\nBatman (1989)\nBatman Returns (1992)\nToy Story (1995)\n";

fn specdec(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_specdec"))
        .args(args)
        .output()
        .expect("binary runs")
}

fn catalogue() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-cli-recommend-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("titles.txt");
    std::fs::write(&p, TITLES).unwrap();
    p
}

fn recommend(extra: &[&str]) -> Value {
    let cat = catalogue();
    let mut args = vec![
        "rec",
        "recommend",
        "--catalogue",
        cat.to_str().unwrap(),
        "--history",
        "Toy Story (1995); Babe (1995); Apollo 13 (1995)",
        "-k",
        "4",
        "--json",
    ];
    args.extend_from_slice(extra);
    let o = specdec(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("JSON")
}

fn items(v: &Value) -> Vec<(String, f64)> {
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["title"].as_str().unwrap().to_string(),
                i["score"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn recommends_k_catalogue_titles_and_speculation_returns_plains_list() {
    let plain = recommend(&["--mode", "plain"]);
    let list = items(&plain);
    assert_eq!(list.len(), 4);
    for w in list.windows(2) {
        assert!(w[0].1 >= w[1].1, "best first: {list:?}");
    }
    for (t, _) in &list {
        assert!(
            TITLES.lines().any(|l| l == t),
            "{t} is not in the catalogue"
        );
    }
    assert_eq!(items(&recommend(&["--mode", "jump-forward"])), list);
    let spec = recommend(&["--self-draft", "2", "--fixed"]);
    assert_eq!(items(&spec), list);
    assert_eq!(spec["speculation"]["relaxed"], false);
    let relaxed = recommend(&["--self-draft", "2", "--verify", "relaxed", "--seed", "5"]);
    assert_eq!(relaxed["speculation"]["relaxed"], true);
    assert_eq!(items(&relaxed).len(), 4);
}

#[test]
fn an_empty_history_or_unknown_titles_still_recommend() {
    let cat = catalogue();
    let c = cat.to_str().unwrap();
    let o = specdec(&["rec", "recommend", "--catalogue", c, "-k", "2", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(items(&v).len(), 2);
    // An unknown title stays in the prompt as free text, with a warning.
    let history = "A Film Nobody Made (2031); Babe (1995)";
    let o = specdec(&[
        "rec",
        "recommend",
        "--catalogue",
        c,
        "-k",
        "2",
        "--json",
        "--history",
        history,
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not in the catalogue"));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(items(&v).len(), 2);
}

#[test]
fn bad_requests_are_clean_errors() {
    let cat = catalogue();
    let c = cat.to_str().unwrap();
    for (args, needle) in [
        (vec!["-k", "0"], "at least 1"),
        (vec!["--mode", "speculative"], "--self-draft"),
        (vec!["--self-draft", "30"], "cannot keep 30"),
    ] {
        let mut a = vec!["rec", "recommend", "--catalogue", c];
        a.extend(args);
        let o = specdec(&a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.contains(needle), "expected `{needle}` in: {err}");
    }
    let o = specdec(&["rec", "recommend", "--catalogue", "/nonexistent/titles.txt"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/nonexistent/titles.txt"));
}
