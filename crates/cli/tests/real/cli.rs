//! The `specdec` binary end to end: output formats and clear errors on bad input.

use crate::common::cli::{assert_clean_error, specdec, specdec_json, stderr, temp_file};

#[test]
fn generate_json_reports_text_and_statistics() {
    let v = specdec_json(&[
        "generate",
        "--chat",
        "--prompt",
        "What is the capital of France? Answer in one sentence.",
        "--max-tokens",
        "24",
        "--json",
    ]);
    for key in [
        "text",
        "token_ids",
        "prompt_tokens",
        "completion_tokens",
        "forward_passes",
        "elapsed_ms",
        "tokens_per_second",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert!(v["text"].as_str().unwrap().contains("Paris"), "{v}");
    assert_eq!(
        v["token_ids"].as_array().unwrap().len() as u64,
        v["completion_tokens"].as_u64().unwrap()
    );
}

#[test]
fn generate_streams_text_to_stdout() {
    let o = specdec(&[
        "generate",
        "--prompt",
        "The alphabet starts with A, B, C,",
        "--max-tokens",
        "8",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!o.stdout.is_empty());
}

#[test]
fn model_info_describes_the_default_model() {
    let o = specdec(&["model", "info"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    for needle in ["Llama", "8192", "49152", "Q4_1", "chat template:   yes"] {
        assert!(out.contains(needle), "missing {needle} in {out}");
    }
}

#[test]
fn draft_self_writes_a_truncated_model() {
    let out = temp_file("self-draft-2.gguf", b"");
    let o = specdec(&[
        "draft",
        "self",
        "--layers",
        "2",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("2 layers") && said.contains("bytes"),
        "{said}"
    );
    let o = specdec(&["model", "info", "--model", out.to_str().unwrap()]);
    let info = String::from_utf8_lossy(&o.stdout);
    assert!(info.contains("layers:          2 "), "{info}");
    assert!(info.contains("49152"), "{info}");
    std::fs::remove_file(&out).unwrap();

    let o = specdec(&[
        "draft",
        "self",
        "--layers",
        "0",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "cannot keep 0 of the model's 30 blocks");
    assert!(!out.exists(), "a refused draft left a file");
}

#[test]
fn bad_model_files_are_clear_errors() {
    let missing = specdec(&[
        "generate",
        "--prompt",
        "hi",
        "--model",
        "/nonexistent/model.gguf",
    ]);
    assert_clean_error(&missing, "does not exist");

    let text = temp_file("notes.gguf", b"this is a text file, not a model\n");
    let o = specdec(&[
        "generate",
        "--prompt",
        "hi",
        "--model",
        text.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "not a GGUF file");

    let real = specdec_model_store::resolve(None, true).unwrap();
    let head = std::fs::read(&real).unwrap()[..100_000].to_vec();
    let truncated = temp_file("truncated.gguf", &head);
    let o = specdec(&["model", "info", "--model", truncated.to_str().unwrap()]);
    assert_clean_error(&o, "truncated");

    let random: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let noise = temp_file("noise.gguf", &random);
    let o = specdec(&[
        "generate",
        "--prompt",
        "hi",
        "--model",
        noise.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "GGUF");
}

#[test]
fn bad_prompts_are_clear_errors() {
    let o = specdec(&["generate", "--prompt", "", "--max-tokens", "4"]);
    assert_clean_error(&o, "empty");
    let long = "word ".repeat(9000);
    let o = specdec(&["generate", "--prompt", &long, "--max-tokens", "4"]);
    assert_clean_error(&o, "context");
}

/// `prompt + max_tokens` wrapped for a `--max-tokens` near 2^64, passed the context check
/// and generated on.
#[test]
fn max_tokens_near_2_to_the_64_is_a_context_error_not_a_wrap() {
    for max_tokens in [u64::MAX, u64::MAX - 1] {
        let o = specdec(&[
            "generate",
            "--prompt",
            "Hi",
            "--max-tokens",
            &max_tokens.to_string(),
        ]);
        assert_clean_error(&o, "context");
    }
}

#[test]
fn bench_verify_cost_prints_the_curve_as_json() {
    let v = specdec_json(&["bench", "verify-cost", "--json", "--repeats", "1"]);
    let rows = v["rows"].as_array().unwrap();
    let ns: Vec<u64> = rows.iter().map(|r| r["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [1, 2, 4, 8, 16, 32, 64]);
    assert_eq!(rows[0]["ratio"].as_f64(), Some(1.0));
}

#[test]
fn bench_roofline_prints_floors_kernel_rates_and_a_profile_as_json() {
    let args = [
        "bench",
        "roofline",
        "--json",
        "--repeats",
        "1",
        "--prefix",
        "100",
        "--buffer-mib",
        "64",
        "--profile",
        "1",
    ];
    let v = specdec_json(&args);
    let positive = |x: &serde_json::Value| x.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    for format in ["Q4_0", "Q4_1", "Q8_0"] {
        assert!(positive(&v["kernel_gmacs_per_s"][format]), "{format}: {v}");
    }
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 7);
    for r in rows {
        for key in [
            "ms",
            "floor_ms",
            "fraction",
            "kernel_floor_ms",
            "kernel_fraction",
        ] {
            assert!(positive(&r[key]), "{key}: {r}");
        }
    }
    let phases = v["profiles"][0]["phases"].as_array().unwrap();
    let head = phases.iter().find(|p| p["phase"] == "head matmul").unwrap();
    assert!(positive(&head["kernel_floor_ms"]), "{head}");
}

#[test]
fn bench_replay_reproduces_a_recorded_run_and_writes_a_report() {
    let wl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/workloads/sample.jsonl"
    );
    let dir = std::env::temp_dir().join(format!("specdec-replay-{}", std::process::id()));
    let real_report = dir.join("real");
    let o = specdec(&[
        "bench",
        "--workload",
        wl,
        "--draft",
        "none,suffix",
        "--json",
        "--report",
        real_report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let index = std::fs::read_to_string(real_report.join("index.md")).unwrap();
    for plot in ["speedup.svg", "acceptance.svg", "cost_curve.svg"] {
        assert!(index.contains(plot), "{index}");
        let svg = std::fs::read_to_string(real_report.join(plot)).unwrap();
        assert!(svg.starts_with("<svg"), "{plot}");
    }
    let run = temp_file("run.json", &o.stdout);
    let replay_report = dir.join("replay");
    let v = specdec_json(&[
        "bench",
        "replay",
        "--run",
        run.to_str().unwrap(),
        "--workload",
        wl,
        "--draft",
        "none,suffix",
        "--json",
        "--report",
        replay_report.to_str().unwrap(),
    ]);
    // Every record replays to the recorded output (the command fails otherwise), and the
    // real run's figures for the same method stand beside the replay's.
    let suffix = &v["summary"][1];
    assert_eq!(suffix["replay"]["method"], "suffix", "{v}");
    assert_eq!(suffix["replay"]["records"], 3, "{v}");
    let error = suffix["mean_accepted_length_error"].as_f64().unwrap();
    assert!(error.abs() < 0.25, "replay far from the real run: {v}");
    assert!(replay_report.join("acceptance.svg").exists());

    // A recording of another workload is refused with a clear error.
    let other = temp_file(
        "other.jsonl",
        b"{\"id\": \"zz\", \"prompt\": \"hi\", \"max_tokens\": 4, \"chat\": true}\n",
    );
    let o = specdec(&[
        "bench",
        "replay",
        "--run",
        run.to_str().unwrap(),
        "--workload",
        other.to_str().unwrap(),
    ]);
    assert_clean_error(&o, "no record");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn bench_verify_cost_refuses_a_prefix_past_the_context() {
    let o = specdec(&["bench", "verify-cost", "--prefix", "100000"]);
    assert_clean_error(&o, "context");
}

#[test]
fn bench_workload_reports_records_and_summary() {
    let wl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/workloads/sample.jsonl"
    );
    let o = specdec(&["bench", "--workload", wl, "--draft", "none,auto", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let records = v["records"].as_array().unwrap();
    assert_eq!(records.len(), 6, "3 records x 2 methods");
    assert!(
        records.iter().all(|r| r["identical_to_plain"] == true),
        "{v}"
    );
    let ceiling = v["perfect_drafter_ceiling"].as_f64().unwrap();
    assert!(ceiling >= 1.0, "{v}");
    let (none, auto) = (&v["summary"][0], &v["summary"][1]);
    assert_eq!(none["method"], "none");
    assert_eq!(auto["method"], "auto");
    assert_eq!(auto["records"], 3);
    assert_eq!(auto["identical_records"], 3);
    for key in [
        "speedup_vs_none",
        "mean_accepted_length",
        "tokens_per_second",
    ] {
        assert!(auto[key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }

    let ceiling = v["copy_oracle_ceiling"].as_f64().unwrap();
    assert!(ceiling >= 1.0, "{v}");

    // Several concurrencies: one run each, and throughput against concurrency, in the
    // JSON and in the report (a plot, and each run's report beside it).
    let dir = std::env::temp_dir().join(format!("specdec-sweep-{}", std::process::id()));
    let o = specdec(&[
        "bench",
        "--workload",
        wl,
        "--draft",
        "none,auto",
        "--concurrency",
        "1,3",
        "--json",
        "--report",
        dir.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{v}");
    assert_eq!(
        (
            runs[0]["concurrency"].as_u64(),
            runs[1]["concurrency"].as_u64()
        ),
        (Some(1), Some(3))
    );
    let rows = v["throughput"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "2 concurrencies x 2 methods: {v}");
    assert_eq!(rows[0]["vs_lowest_concurrency"].as_f64(), Some(1.0), "{v}");
    assert!(rows
        .iter()
        .all(|r| r["aggregate_tokens_per_second"].as_f64().unwrap() > 0.0));
    // Every record's prompt is read in some step: prefill has a share, never all of it.
    assert!(rows.iter().all(|r| {
        let share = r["prefill_share"].as_f64().unwrap();
        share > 0.0 && share < 1.0
    }));
    // Batches priced by their forwards' rows: plain against itself is 1.
    assert!(rows.iter().all(|r| {
        let modeled = r["modeled_vs_none"].as_f64().unwrap();
        modeled > 0.0 && (r["method"] != "none" || modeled == 1.0)
    }));
    assert!(dir.join("throughput.svg").exists());
    assert!(dir.join("concurrency-3").join("index.md").exists());
    std::fs::remove_dir_all(dir).ok();

    let bad = temp_file("bad.jsonl", b"{\"id\": \"x\", \"promt\": \"typo\"}\n");
    let o = specdec(&["bench", "--workload", bad.to_str().unwrap()]);
    assert_clean_error(&o, "line 1: unknown field `promt`");
}

#[test]
fn bench_forced_outputs_are_the_answers_and_say_so() {
    let wl = temp_file(
        "forced.jsonl",
        br#"{"id":"f1","prompt":"Name a colour.","references":["The sky is blue and the grass is green."],"max_tokens":40,"chat":true,"answer":"The sky is blue and the grass is green."}
{"id":"f2","prompt":"Count to five.","max_tokens":6,"chat":true,"answer":"One, two, three, four, five."}
"#,
    );
    let args = [
        "bench",
        "--workload",
        wl.to_str().unwrap(),
        "--draft",
        "none,reference",
    ];
    let o = specdec(&[&args[..], &["--forced", "answer", "--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["forced"], "answer");
    let records = v["records"].as_array().unwrap();
    assert!(records.iter().all(|r| r["forced"] == true), "{v}");
    assert!(v["summary"]
        .as_array()
        .unwrap()
        .iter()
        .all(|s| s["forced"] == true));
    // Every method emits the same forced tokens; f2 stops at its max_tokens.
    assert_eq!(records[0]["token_ids"], records[1]["token_ids"]);
    assert_eq!(records[2]["completion_tokens"], 6);
    // The answer is in the reference: reference drafting copies it (how much a step
    // verifies follows the measured costs; that copies are accepted does not).
    assert!(records[1]["accepted_tokens"].as_u64().unwrap() > 0, "{v}");
    assert!(
        records[1]["mean_accepted_length"].as_f64().unwrap() > 1.0,
        "{v}"
    );

    let o = specdec(&[&args[..], &["--forced", "answer"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.lines().filter(|l| l.ends_with("forced")).count() == 2,
        "{table}"
    );

    let plain = temp_file(
        "unforced.jsonl",
        br#"{"id":"no-answer","prompt":"Hi there.","max_tokens":4,"chat":true}"#,
    );
    let o = specdec(&[
        "bench",
        "--workload",
        plain.to_str().unwrap(),
        "--forced",
        "answer",
    ]);
    assert_clean_error(&o, "record no-answer has no `answer` field");
    let o = specdec(&[
        "bench",
        "--workload",
        plain.to_str().unwrap(),
        "--forced",
        "prompt",
    ]);
    assert!(!o.status.success());
}

#[test]
fn bench_repeats_and_classes_report_medians_floors_and_class_tables() {
    let wl = temp_file(
        "classes.jsonl",
        br#"{"id":"a","prompt":"Say hello.","max_tokens":8,"chat":true,"class":"first"}
{"id":"a#repeat","prompt":"Say hello.","max_tokens":8,"chat":true,"class":"repeat"}
"#,
    );
    let v = specdec_json(&[
        "bench",
        "--workload",
        wl.to_str().unwrap(),
        "--draft",
        "none,trie",
        "--repeats",
        "2",
        "--json",
    ]);
    assert_eq!(v["repeats"], 2);
    for r in v["records"].as_array().unwrap() {
        assert_eq!(r["repeats"], 2);
        let range = r["tokens_per_second_range"].as_array().unwrap();
        let tps = r["tokens_per_second"].as_f64().unwrap();
        assert!(range[0].as_f64().unwrap() <= tps && tps <= range[1].as_f64().unwrap());
    }
    for class in ["first", "repeat"] {
        let rows = v["classes"][class].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{v}");
        assert_eq!(rows[1]["records"], 1);
        assert!(rows[1]["aggregate_tokens_per_second"].is_null());
    }
    let trie = &v["summary"][1];
    assert!(trie["min_record_speedup"].as_f64().unwrap() > 0.0);
    assert!(trie["records_below_0_95"].as_u64().unwrap() <= 2);
}

#[test]
fn generate_reports_its_verification_rule_and_relaxed_tokens() {
    let prompt = "Repeat this list twice: red, green, blue, yellow, purple, orange.";
    let args = [
        "generate",
        "--chat",
        "--prompt",
        prompt,
        "--max-tokens",
        "24",
        "--json",
    ];
    let o = specdec(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&v["verify"], &v["relaxed"]),
        (&"strict".into(), &false.into())
    );
    assert_eq!(v["relaxed_tokens"], 0);

    let v = specdec_json(&[&args[..], &["--verify", "relaxed", "--verify-top-k", "3"]].concat());
    assert_eq!(
        (&v["verify"], &v["relaxed"]),
        (&"relaxed".into(), &true.into())
    );
    assert!(v["relaxed_tokens"].as_u64().unwrap() <= v["accepted_tokens"].as_u64().unwrap());
}

#[test]
fn bench_relaxed_reports_the_rule_and_relaxed_tokens() {
    let wl = temp_file(
        "relaxed.jsonl",
        br#"{"id":"r1","prompt":"Repeat twice: one two three four five six seven.","max_tokens":24,"chat":true}"#,
    );
    let args = [
        "bench",
        "--workload",
        wl.to_str().unwrap(),
        "--draft",
        "none,prompt",
        "--verify",
        "relaxed",
    ];
    let o = specdec(&[&args[..], &["--json"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["verify"], "relaxed");
    let none = &v["summary"][0];
    assert_eq!(
        (&none["method"], &none["relaxed_tokens"]),
        (&"none".into(), &0.into())
    );
    assert!(v["records"][1]["relaxed_tokens"].is_u64(), "{v}");
    let o = specdec(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(
        table.contains("verify: relaxed (top-2, tau 0.1)"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.ends_with("relaxed")), "{table}");
}
