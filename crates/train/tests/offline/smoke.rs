//! CI-sized: a tiny draft over the real vocabulary size trains on synthetic teacher data,
//! its loss falls, and its export loads in the runtime with candle's logits; teacher data
//! from a deterministic fake target is the same twice.

use rand::{Rng, SeedableRng};
use specdec_engine::beam::Catalogue;
use specdec_gguf::GgufFile;
use specdec_runtime::FakeTarget;
use specdec_train::teacher::{self, Position};
use specdec_train::{
    load_checkpoint, runtime_logits, save_checkpoint, to_gguf, Draft, DraftConfig, Objective,
    TeacherCase, TeacherKey, TeacherUser, TrainOptions, Trainer,
};

/// SmolLM2's vocabulary size: tokens must be the target's.
const VOCAB: usize = 49152;

fn tiny() -> DraftConfig {
    DraftConfig {
        n_layers: 1,
        hidden: 32,
        n_heads: 2,
        n_kv_heads: 1,
        ffn: 64,
        vocab: VOCAB,
        context_length: 128,
        rope_base: 10000.0,
        rms_eps: 1e-5,
    }
}

/// `n` users with 3 beams of 3 tokens each over a small token range, a position per beam
/// token with 4 allowed tokens and a target distribution favouring the beam's own token.
fn synthetic_users(n: usize, seed: u64) -> Vec<TeacherUser> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n)
        .map(|u| {
            let prompt: Vec<u32> = (0..12).map(|_| rng.gen_range(100..2000)).collect();
            let beams: Vec<Vec<u32>> = (0..3)
                .map(|_| (0..3).map(|_| rng.gen_range(2000..2100)).collect())
                .collect();
            let mut positions = Vec::new();
            for (b, beam) in beams.iter().enumerate() {
                for (depth, &tok) in beam.iter().enumerate() {
                    let mut allowed = vec![(tok, -0.3f32)];
                    for i in 0..3 {
                        allowed.push((tok + 1 + i, -2.0 - i as f32));
                    }
                    allowed.sort_by_key(|a| a.0);
                    positions.push(Position {
                        beam: b,
                        depth,
                        allowed,
                    });
                }
            }
            // The truth is beam 0, with beam 0's choices.
            let truth_choices = positions
                .iter()
                .filter(|p| p.beam == 0)
                .map(|p| (p.depth, p.allowed.iter().map(|a| a.0).collect()))
                .collect();
            TeacherUser {
                user: u as u32,
                prompt,
                truth: beams[0].clone(),
                truth_choices,
                scores: vec![-1.0, -2.0, -3.0],
                beams,
                positions,
            }
        })
        .collect()
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("specdec-train-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_tiny_draft_learns_and_exports_what_it_computes() {
    let users = synthetic_users(2, 1);
    let refs: Vec<&TeacherUser> = users.iter().collect();
    for objective in [
        Objective::AtSpeedS { k: 2 },
        Objective::AtSpeedR,
        Objective::Kd,
        Objective::Ce,
    ] {
        let mut opts = TrainOptions::new(objective, 0.5);
        opts.learning_rate = 1e-2;
        let mut trainer = Trainer::new(Draft::new(tiny(), 7, None).unwrap(), opts).unwrap();
        let losses: Vec<f64> = (0..20)
            .map(|_| trainer.step(&refs).unwrap().total)
            .collect();
        let (first, last) = (losses[0], losses[losses.len() - 1]);
        assert!(last < 0.7 * first, "{objective:?}: {losses:?}");
    }
    let mut trainer = Trainer::new(
        Draft::new(tiny(), 7, None).unwrap(),
        TrainOptions::new(Objective::AtSpeedS { k: 2 }, 0.5),
    )
    .unwrap();
    for _ in 0..3 {
        trainer.step(&refs).unwrap();
    }
    let file =
        GgufFile::from_bytes(to_gguf(&trainer.draft, "smoke", None).unwrap().build()).unwrap();
    // Trained over the catalogue's children: the engine must score it that way.
    let declared = file.get_str(specdec_engine::beam::DRAFT_SCORING_KEY);
    assert_eq!(declared.ok(), Some("catalogue"));
    let tokens: Vec<u32> = users[0]
        .prompt
        .iter()
        .chain(&users[0].beams[0])
        .copied()
        .collect();
    let got = runtime_logits(&file, &tokens).unwrap();
    let want = trainer
        .draft
        .logits(&tokens)
        .unwrap()
        .to_vec2::<f32>()
        .unwrap();
    let e = specdec_train::logits_relative_error(&got, &want);
    assert!(
        e < specdec_train::EXPORT_TOLERANCE,
        "runtime vs candle: {e}"
    );
}

#[test]
fn training_is_seeded_and_a_resumed_run_equals_an_uninterrupted_one() {
    let users = synthetic_users(3, 2);
    let refs: Vec<&TeacherUser> = users.iter().collect();
    let fresh = || {
        Trainer::new(
            Draft::new(tiny(), 5, None).unwrap(),
            TrainOptions::new(Objective::AtSpeedR, 0.7),
        )
        .unwrap()
    };
    let steps = |t: &mut Trainer, n: usize| -> Vec<f64> {
        (0..n).map(|_| t.step(&refs).unwrap().total).collect()
    };
    let mut a = fresh();
    let la = steps(&mut a, 6);
    assert_eq!(la, steps(&mut fresh(), 6));
    assert_eq!(a.epoch_order(10, 1), a.epoch_order(10, 1));
    assert_ne!(a.epoch_order(10, 1), a.epoch_order(10, 2));
    // Stop after 3 steps, checkpoint (twice: generations replace each other), resume.
    let dir = temp("ckpt");
    let base = dir.join("d.ckpt");
    let mut b = fresh();
    let mut lb = steps(&mut b, 2);
    save_checkpoint(&base, &b, 0, 2).unwrap();
    lb.extend(steps(&mut b, 1));
    save_checkpoint(&base, &b, 0, 3).unwrap();
    drop(b);
    let (mut resumed, meta) = load_checkpoint(&base).unwrap();
    assert_eq!(
        (meta.epochs_done, meta.steps_done, meta.optimizer_steps),
        (0, 3, 3)
    );
    lb.extend(steps(&mut resumed, 3));
    assert_eq!(la, lb, "a resumed run trains as the uninterrupted one");
    let toks = &users[0].prompt;
    assert_eq!(
        resumed
            .draft
            .logits(toks)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap(),
        a.draft.logits(toks).unwrap().to_vec2::<f32>().unwrap()
    );
    // Only the newest generation's files remain.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "d.ckpt.g1.adam.safetensors",
            "d.ckpt.g1.params.safetensors",
            "d.ckpt.json"
        ]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn teacher_data_is_deterministic_and_follows_the_trie() {
    let target = FakeTarget::new(64, 256);
    let cat = Catalogue::new(vec![
        vec![10, 11, 1],
        vec![10, 12, 1],
        vec![13, 1],
        vec![14, 15, 16, 1],
        vec![20, 1],
    ])
    .unwrap();
    let cases: Vec<TeacherCase> = (0..2)
        .map(|u| TeacherCase {
            user: u,
            prompt: vec![3 + u, 4, 5],
            truth: vec![13, 1],
        })
        .collect();
    let key = TeacherKey {
        model: "fake".into(),
        k: 3,
        users: "2".into(),
        format: teacher::FORMAT,
    };
    let a = teacher::generate(&target, &cat, &cases, key.clone(), |_| {}).unwrap();
    let b = teacher::generate(&target, &cat, &cases, key.clone(), |_| {}).unwrap();
    assert_eq!(a, b);
    for u in &a.users {
        assert_eq!(u.beams.len(), 3);
        // The root's allowed tokens are the catalogue's first tokens, once per user.
        let roots: Vec<&Position> = u.positions.iter().filter(|p| p.depth == 0).collect();
        assert_eq!(roots.len(), 1);
        let first: Vec<u32> = roots[0].allowed.iter().map(|a| a.0).collect();
        assert_eq!(first, [10, 13, 14, 20]);
        // Log-probabilities over the whole vocabulary: the allowed mass is below 1.
        let mass: f32 = roots[0].allowed.iter().map(|a| a.1.exp()).sum();
        assert!(mass > 0.0 && mass < 1.0, "{mass}");
        // The truth (13, end) has a choice at the root only.
        assert_eq!(u.truth_choices, [(0, vec![10, 13, 14, 20])]);
    }
    let dir = temp("teacher");
    let path = dir.join("t.json");
    a.save(&path).unwrap();
    assert_eq!(
        specdec_train::TeacherData::load_if(&path, &key).unwrap(),
        Some(a)
    );
    let other = TeacherKey { k: 4, ..key };
    assert_eq!(
        specdec_train::TeacherData::load_if(&path, &other).unwrap(),
        None
    );
    std::fs::remove_dir_all(dir).unwrap();
}
