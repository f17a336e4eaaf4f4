//! The quality checks through the crate's public API, from knowledge files on disk.

use std::path::PathBuf;

use specdec_rec::movielens::{Dataset, Item, Rating, User};
use specdec_rec::quality::{self, CtrConfig, Knowledge};
use specdec_rec::RecError;

fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-rec-quality-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

fn line(kind: &str, id: u32, verify: &str, text: &str, tokens: &[u32]) -> String {
    format!(
        r#"{{"id":"{kind}-{id}","kind":"{kind}","group":"g","role":"warmup","{kind}_id":{id},"text":"{text}","token_ids":{tokens:?},"finish_reason":"length","verify":"{verify}","relaxed_tokens":0,"completion_tokens":{},"forward_passes":1,"mean_accepted_length":1.0,"elapsed_ms":0.5}}"#,
        tokens.len()
    )
}

#[test]
fn knowledge_files_compare_by_id_whatever_their_order() {
    let strict = temp_file(
        "strict.jsonl",
        &[
            line("user", 1, "strict", "likes westerns", &[1, 2]),
            line("item", 2, "strict", "a western", &[3]),
        ]
        .join("\n"),
    );
    let relaxed = temp_file(
        "relaxed.jsonl",
        &[
            line("item", 2, "relaxed", "a western", &[3]),
            line("user", 1, "relaxed", "likes westerns", &[1, 2]),
        ]
        .join("\n"),
    );
    let s = quality::read_knowledge(&strict).unwrap();
    let r = quality::read_knowledge(&relaxed).unwrap();
    let c = quality::compare(&s, &r).unwrap();
    assert_eq!(c.overall.pairs, 2);
    assert_eq!(c.overall.identical_tokens_rate, 1.0);
    assert_eq!(c.overall.rouge_l.min, 1.0);
    assert_eq!(c.overall.first_divergence.count, 0);
    let k = Knowledge::from_outputs(&r).unwrap();
    assert_eq!(
        (k.users[&1].as_str(), k.items[&2].as_str()),
        ("likes westerns", "a western")
    );
}

#[test]
fn a_missing_knowledge_file_is_an_error_naming_it() {
    let err = quality::read_knowledge(std::path::Path::new("/nonexistent/k.jsonl")).unwrap_err();
    assert!(matches!(err, RecError::Io { .. }));
    assert!(err.to_string().contains("/nonexistent/k.jsonl"), "{err}");
}

/// Four users, six movies, every user rating every movie; two pairs per user held out.
fn tiny() -> (Dataset, Vec<Rating>, Vec<Rating>) {
    let users = (1..=4)
        .map(|id| User {
            id,
            age: 15 + 10 * id,
            gender: if id % 2 == 0 { "F".into() } else { "M".into() },
            occupation: "other".into(),
            zip_code: "12345".into(),
        })
        .collect();
    let items = (1..=6)
        .map(|id| Item {
            id,
            title: format!("Film {id}"),
            year: None,
            genres: vec![if id % 2 == 0 { "Comedy" } else { "Horror" }.into()],
        })
        .collect();
    let (mut train, mut heldout) = (Vec::new(), Vec::new());
    for u in 1..=4u32 {
        for i in 1..=6u32 {
            let r = Rating {
                user: u,
                item: i,
                rating: ((u + i) % 5 + 1) as u8,
                timestamp: u64::from(i),
            };
            if i > 4 {
                heldout.push(r)
            } else {
                train.push(r)
            }
        }
    }
    (
        Dataset {
            users,
            items,
            ratings: vec![],
        },
        train,
        heldout,
    )
}

#[test]
fn the_downstream_report_runs_three_ways_on_the_same_split() {
    let (ds, train, heldout) = tiny();
    let strict = quality::parse_knowledge(
        &[
            line("user", 1, "strict", "a fan of horror", &[1]),
            line("item", 5, "strict", "horror", &[2]),
        ]
        .join("\n"),
        std::path::Path::new("strict"),
    )
    .unwrap();
    let relaxed = quality::parse_knowledge(
        &line("user", 1, "relaxed", "a fan of comedy", &[1]),
        std::path::Path::new("relaxed"),
    )
    .unwrap();
    let config = CtrConfig {
        text_buckets: 8,
        ..CtrConfig::default()
    };
    let r = quality::downstream_with(&config, &ds, &train, &heldout, &strict, &relaxed).unwrap();
    for m in [&r.none, &r.strict, &r.relaxed] {
        assert_eq!((m.train_rows, m.heldout_rows), (16, 8));
        assert!(
            (0.0..=1.0).contains(&m.auc) && m.log_loss.is_finite(),
            "{m:?}"
        );
    }
    assert_eq!((r.strict.users_with_text, r.strict.items_with_text), (1, 1));
    assert_eq!(
        (r.relaxed.users_with_text, r.relaxed.items_with_text),
        (1, 0)
    );
    assert_eq!(r.strict.features, r.none.features + 2 * 8 + 1);
    assert_eq!(r.relaxed_minus_strict_auc, r.relaxed.auc - r.strict.auc);
}
