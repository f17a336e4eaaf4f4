//! Constrained beam search on the real model: jump-forward and strict speculation (the
//! target as its own draft, and a partial draft: the target with other favourites is not
//! available, so the second draft is the target itself searched with fewer beams) return
//! plain beam search's list, items and scores bit for bit.

use crate::common;

use specdec_engine::beam::{
    BeamOptions, BeamRunner, BeamVerify, Catalogue, DraftScoring, DRAFT_SCORING_KEY,
};

const TITLES: &[&str] = &[
    "Toy Story (1995)",
    "GoldenEye (1995)",
    "Four Rooms (1995)",
    "Get Shorty (1995)",
    "Copycat (1995)",
    "Twelve Monkeys (1995)",
    "Babe (1995)",
    "Dead Man Walking (1995)",
    "Richard III (1995)",
    "Seven (Se7en) (1995)",
    "Usual Suspects, The (1995)",
    "Mighty Aphrodite (1995)",
    "Postino, Il (1994)",
    "Mr. Holland's Opus (1995)",
    "French Twist (Gazon maudit) (1995)",
    "From Dusk Till Dawn (1996)",
    "White Balloon, The (1995)",
    "Antonia's Line (1995)",
    "Angels and Insects (1995)",
    "Muppet Treasure Island (1996)",
    "Braveheart (1995)",
    "Taxi Driver (1976)",
    "Rumble in the Bronx (1995)",
    "Birdcage, The (1996)",
    "Brothers McMullen, The (1995)",
    "Bad Boys (1995)",
    "Apollo 13 (1995)",
    "Batman Forever (1995)",
    "Belle de jour (1967)",
    "Crimson Tide (1995)",
    "Crumb (1994)",
    "Desperado (1995)",
    "Doom Generation, The (1995)",
    "Free Willy 2: The Adventure Home (1995)",
    "Mad Love (1995)",
    "Nadja (1994)",
    "Net, The (1995)",
    "Strange Days (1995)",
    "To Wong Foo, Thanks for Everything! Julie Newmar (1995)",
    "Star Wars (1977)",
    "Star Trek: First Contact (1996)",
    "Star Trek: Generations (1994)",
    "Star Trek III: The Search for Spock (1984)",
    "Stargate (1994)",
    "Batman (1989)",
    "Batman Returns (1992)",
    "Batman & Robin (1997)",
    "Toy Story 2 (1999)",
];

fn catalogue(f: &common::Fixture) -> Catalogue {
    let end = f.tokenizer.encode("\n", false).unwrap();
    assert_eq!(end.len(), 1);
    Catalogue::new(
        TITLES
            .iter()
            .map(|t| {
                let mut s = f.tokenizer.encode(&format!(" {t}"), false).unwrap();
                s.push(end[0]);
                s
            })
            .collect(),
    )
    .unwrap()
}

fn prompt(f: &common::Fixture, history: &[&str]) -> Vec<u32> {
    let mut text = String::from("Movies a user watched, oldest first:\n");
    for (i, h) in history.iter().enumerate() {
        text.push_str(&format!("{}. {h}\n", i + 1));
    }
    text.push_str(&format!("{}.", history.len() + 1));
    f.tokenizer.encode(&text, false).unwrap()
}

#[test]
fn strict_speculative_and_jump_forward_equal_plain_on_the_real_model() {
    let f = common::fixture();
    let cat = catalogue(f);
    let prompts = vec![
        prompt(f, &["Toy Story (1995)", "Babe (1995)", "Apollo 13 (1995)"]),
        prompt(
            f,
            &[
                "Seven (Se7en) (1995)",
                "Usual Suspects, The (1995)",
                "Taxi Driver (1976)",
                "Crimson Tide (1995)",
            ],
        ),
    ];
    let mut runner = BeamRunner::new(&f.model, Some(&f.model)).unwrap().frozen();
    for k in [3, 10] {
        let plain = runner.run(&cat, &prompts, &BeamOptions::plain(k)).unwrap();
        let jf = runner
            .run(&cat, &prompts, &BeamOptions::jump_forward(k))
            .unwrap();
        let mut opts = BeamOptions::speculative(k, BeamVerify::Strict);
        opts.draft.as_mut().unwrap().adaptive = false;
        let spec = runner.run(&cat, &prompts, &opts).unwrap();
        for ((p, j), s) in plain.iter().zip(&jf).zip(&spec) {
            assert_eq!(p.items.len(), k);
            assert_eq!(p.items, j.items, "jump-forward, k {k}");
            assert_eq!(p.items, s.items, "speculative, k {k}");
            eprintln!(
                "k {k}: forwards plain {} jf {} spec {} (accepted/round {:.2}); top: {:?}",
                p.stats.decode_forwards(),
                j.stats.decode_forwards(),
                s.stats.decode_forwards(),
                s.stats.accepted_per_round(),
                f.tokenizer.decode(&p.items[0].tokens, true)
            );
            assert!(j.stats.decode_forwards() < p.stats.decode_forwards());
            assert!(s.stats.decode_forwards() < p.stats.decode_forwards());
        }
    }
}

/// A catalogue-scored draft (a 4-block self-draft marked so in its file): its forwards
/// compute only the trie children's logits, and strict search still returns plain's list
/// bit for bit; relaxed runs and says so.
#[test]
fn a_catalogue_scored_draft_keeps_strict_search_exact_on_the_real_model() {
    let f = common::fixture();
    let cat = catalogue(f);
    let target = specdec_model_store::resolve(None, true).expect("default model");
    let draft_file =
        specdec_gguf::truncate_blocks(&specdec_gguf::GgufFile::open(&target).unwrap(), 4, None)
            .unwrap()
            .kv(
                DRAFT_SCORING_KEY,
                specdec_gguf::Value::String("catalogue".into()),
            );
    let path = std::env::temp_dir().join(format!(
        "specdec-beam-catalogue-draft-{}.gguf",
        std::process::id()
    ));
    draft_file.write_to(&path).unwrap();
    let meta = specdec_engine::ModelMeta::open(&target).unwrap();
    let draft = specdec_engine::load_draft(&path, &meta, 2).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(draft.draft_scoring, DraftScoring::Catalogue);
    let prompts = vec![
        prompt(f, &["Star Wars (1977)", "Stargate (1994)"]),
        prompt(f, &["Babe (1995)", "Toy Story (1995)", "Batman (1989)"]),
    ];
    let mut runner = BeamRunner::new(&f.model, Some(&draft.model))
        .unwrap()
        .with_draft_scoring(draft.draft_scoring)
        .frozen();
    let k = 5;
    let plain = runner.run(&cat, &prompts, &BeamOptions::plain(k)).unwrap();
    let mut opts = BeamOptions::speculative(k, BeamVerify::Strict);
    opts.draft.as_mut().unwrap().adaptive = false;
    let spec = runner.run(&cat, &prompts, &opts).unwrap();
    for (p, s) in plain.iter().zip(&spec) {
        assert_eq!(p.items, s.items, "catalogue-scored strict");
        assert!(s.stats.draft_forwards > 1 && !s.stats.relaxed);
    }
    let relaxed = BeamOptions::speculative(k, BeamVerify::Relaxed { seed: 3 });
    let out = runner.run(&cat, &prompts, &relaxed).unwrap();
    for o in &out {
        assert!(o.stats.relaxed);
        assert_eq!(o.items.len(), k);
        assert!(o.items.iter().all(|r| r.score.is_finite()));
    }
}

/// A recommendation run by the scheduler beside a chat (its rows in the chat's forwards,
/// its prompt read in chunks) returns the list the runner returns alone, in every mode,
/// and the chat writes what it writes alone.
#[test]
fn a_search_scheduled_beside_a_chat_returns_the_runners_list_on_the_real_model() {
    use specdec_engine::budget::CostModel;
    use specdec_engine::{Engine, GenerateRequest, Outcome, Scheduler};

    let f = common::fixture();
    let cat = std::sync::Arc::new(catalogue(f));
    let history = prompt(
        f,
        &[
            "Seven (Se7en) (1995)",
            "Usual Suspects, The (1995)",
            "Taxi Driver (1976)",
        ],
    );
    let chat = GenerateRequest::new(common::chat(f, "Tell me about your favourite film."), 48);
    let chat_alone = Engine::new(&f.model, &f.tokenizer)
        .generate(&chat, &mut |_| true)
        .unwrap()
        .token_ids;
    for opts in [
        BeamOptions::plain(6),
        BeamOptions::jump_forward(6),
        BeamOptions::speculative(6, BeamVerify::Strict),
        BeamOptions::speculative(6, BeamVerify::Relaxed { seed: 4 }),
    ] {
        let alone = BeamRunner::new(&f.model, Some(&f.model))
            .unwrap()
            .frozen()
            .run(&cat, std::slice::from_ref(&history), &opts)
            .unwrap();
        let runner = BeamRunner::new(&f.model, Some(&f.model)).unwrap().frozen();
        let engine = Engine::new(&f.model, &f.tokenizer).with_cost_model(CostModel::frozen());
        let mut sched = Scheduler::new(engine, 4).with_beams(runner);
        sched
            .admit(chat.clone(), Box::new(|_: &str| true), (), None)
            .unwrap();
        sched
            .admit_search(cat.clone(), vec![history.clone()], opts.clone(), (), None)
            .unwrap();
        let (mut text, mut ranked) = (None, None);
        for fin in sched.drain(&mut |_, _| {}) {
            match fin.outcome {
                Outcome::Done(out) => text = Some(out.token_ids),
                Outcome::Ranked(outs) => ranked = Some(outs),
                other => panic!("{other:?}"),
            }
        }
        let ranked = ranked.expect("the search ended");
        assert_eq!(ranked[0].items, alone[0].items, "{opts:?}");
        assert_eq!(text.as_ref(), Some(&chat_alone), "{opts:?}");
    }
}
