//! Generative recommendation on real users with the real model: jump-forward and strict
//! speculative beam search return plain constrained beam search's list, items and scores
//! bit for bit, with a self-draft and with a scrambled (meaningless) draft; relaxed search
//! says it is relaxed.

use crate::common;

use std::path::PathBuf;
use std::sync::OnceLock;

use specdec_engine::beam::{BeamOptions, BeamRunner, BeamVerify};
use specdec_engine::{load_draft, Loaded, Target};
use specdec_gguf::GgufFile;
use specdec_rec::recommend::{self, ItemCatalogue, Target as Held};
use specdec_rec::split::Split;

fn model_path() -> Option<PathBuf> {
    let path: PathBuf = match std::env::var_os("SPECDEC_MODEL") {
        Some(p) => p.into(),
        None => specdec_model_store::cached_path(&specdec_model_store::DEFAULT_MODEL).ok()?,
    };
    path.is_file().then_some(path)
}

fn target() -> Option<&'static Loaded> {
    static T: OnceLock<Option<Loaded>> = OnceLock::new();
    T.get_or_init(|| Some(Loaded::open(&model_path()?, 2).expect("the model loads")))
        .as_ref()
}

/// A draft derived from the target's first `layers` blocks (scrambled with `seed`).
fn draft(layers: usize, scramble: Option<u64>) -> Loaded {
    let t = target().expect("checked by the caller");
    let src = GgufFile::open(&t.path).unwrap();
    let d = specdec_gguf::truncate_blocks(&src, layers, scramble).unwrap();
    let path = std::env::temp_dir().join(format!(
        "specdec-rec-draft-{layers}-{scramble:?}-{}.gguf",
        std::process::id()
    ));
    d.write_to(&path).unwrap();
    let loaded = load_draft(&path, &t.meta, 2).unwrap();
    let _ = std::fs::remove_file(&path);
    loaded
}

#[test]
fn strict_speculation_and_jump_forward_equal_plain_beam_search_on_real_users() {
    let (Some(data), Some(t)) = (common::movielens(), target()) else {
        return;
    };
    let cat = ItemCatalogue::from_dataset(data, &t.meta.tokenizer).unwrap();
    let split = Split::leave_last_out(data);
    let cases: Vec<_> = recommend::eval_cases(data, &split, Held::Test)
        .into_iter()
        .take(3)
        .collect();
    let prompts: Vec<Vec<u32>> = cases
        .iter()
        .map(|c| t.meta.tokenizer.encode(&c.prompt, false).unwrap())
        .collect();
    let self_draft = draft(4, None);
    let scrambled = draft(2, Some(7));
    let k = 5;
    let mut plain_runner = BeamRunner::new(&t.model, None).unwrap();
    let plain = plain_runner
        .run(cat.trie(), &prompts, &BeamOptions::plain(k))
        .unwrap();
    let jf = plain_runner
        .run(cat.trie(), &prompts, &BeamOptions::jump_forward(k))
        .unwrap();
    for (p, j) in plain.iter().zip(&jf) {
        assert_eq!(p.items.len(), k);
        assert_eq!(p.items, j.items, "jump-forward");
        assert!(j.stats.decode_forwards() < p.stats.decode_forwards());
    }
    for (name, d) in [("self-draft", &self_draft), ("scrambled", &scrambled)] {
        let mut runner = BeamRunner::new(&t.model, Some(&d.model as &dyn Target)).unwrap();
        let mut opts = BeamOptions::speculative(k, BeamVerify::Strict);
        opts.draft.as_mut().unwrap().adaptive = false;
        // One search at a time and all together: the same lists.
        let together = runner.run(cat.trie(), &prompts, &opts).unwrap();
        for ((p, s), prompt) in plain.iter().zip(&together).zip(&prompts) {
            assert_eq!(p.items, s.items, "{name}, batched");
            let alone = runner
                .run(cat.trie(), std::slice::from_ref(prompt), &opts)
                .unwrap();
            assert_eq!(p.items, alone[0].items, "{name}, alone");
            assert!(!s.stats.relaxed);
            eprintln!(
                "{name}: forwards {} (plain {}), accepted steps per round {:.2}",
                s.stats.decode_forwards(),
                p.stats.decode_forwards(),
                s.stats.accepted_per_round()
            );
        }
    }
    let mut runner = BeamRunner::new(&t.model, Some(&self_draft.model as &dyn Target)).unwrap();
    let relaxed = runner
        .run(
            cat.trie(),
            &prompts[..1],
            &BeamOptions::speculative(k, BeamVerify::Relaxed { seed: 3 }),
        )
        .unwrap();
    assert!(relaxed[0].stats.relaxed);
    assert_eq!(relaxed[0].items.len(), k);
}
