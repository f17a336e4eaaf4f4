//! LASER's benchmark on the tiny synthetic model: every configuration at both
//! concurrencies, strict ones identical to plain decoding, and the batched phase present.
//! (No timing is asserted.)

use std::io::Write;

use specdec_bench::knowledge::{run, KnowledgeModel, KnowledgeOptions, Progress};
use specdec_engine::Relaxed;

#[test]
fn every_configuration_runs_and_strict_ones_equal_plain() {
    let dir = std::env::temp_dir().join(format!("specdec-knowledge-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let records = dir.join("items.jsonl");
    let mut f = std::fs::File::create(&records).unwrap();
    for (g, group) in ["items-drama", "items-comedy"].iter().enumerate() {
        for k in 0..4 {
            let role = if k < 2 { "warmup" } else { "target" };
            let line = serde_json::json!({
                "id": format!("item-{g}{k}"), "kind": "item", "group": group, "role": role,
                "prompt": format!("Describe movie number {k} of group {g} in two sentences."),
                "item_id": g * 10 + k,
            });
            writeln!(f, "{line}").unwrap();
        }
    }
    drop(f);
    let model = specdec_testkit::load_model(1);
    let tokenizer = specdec_testkit::tokenizer();
    let template = specdec_testkit::chat_template();
    let m = KnowledgeModel {
        model: &model,
        tokenizer: &tokenizer,
        template: &template,
    };
    let opts = KnowledgeOptions {
        pools: None,
        warmup: 2,
        groups: Vec::new(),
        targets: 2,
        concurrency: 2,
        rounds: 2,
        max_tokens: 12,
        budget: 8,
        relaxed: Relaxed::new(2, 0.1).unwrap(),
    };
    let mut warmups = 0;
    let mut progress = |p: Progress<'_>| {
        if let Progress::Warmup { members, .. } = p {
            warmups = members;
        }
    };
    let r = run(&m, &[records], &opts, &mut progress).unwrap();
    assert_eq!(warmups, 4, "two warm-up members of each group");
    assert_eq!(r.targets, 4);
    assert_eq!(
        r.summary.len(),
        10,
        "five configurations at concurrency 1 and 2"
    );
    for s in &r.summary {
        if s.concurrency > 1 {
            // The batched phase ran twice and every text was the same both times (the
            // relaxed one too: its drafts are sized on the prior cost shape, not timings).
            assert_eq!(s.rounds, Some(2), "{}", s.config);
            assert_eq!(s.records_differing_between_rounds, Some(0), "{}", s.config);
            let [lo, hi] = s.speedup_range.expect("a range over two rounds");
            assert!(lo <= s.speedup_vs_plain && s.speedup_vs_plain <= hi);
        } else {
            assert_eq!(s.rounds, None);
        }
        // Batched too, each forward is priced by its rows: plain against itself is 1.
        assert!(s.modeled_speedup_vs_plain > 0.0, "{}", s.config);
        if s.config == r.summary[0].config {
            assert_eq!(s.modeled_speedup_vs_plain, 1.0, "c={}", s.concurrency);
        }
        if s.verify == "strict" {
            assert_eq!(
                s.identical_to_plain, s.records,
                "{}: strict equals plain",
                s.config
            );
        }
    }
    assert_eq!(r.records.len(), 4 * 10);
    assert_eq!(r.batched_vs_plain_concurrency_1.len(), 5);
    std::fs::remove_dir_all(dir).unwrap();
}
