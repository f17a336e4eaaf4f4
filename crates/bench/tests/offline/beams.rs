//! AtSpeed's benchmark on the tiny synthetic model, the model itself as a perfect draft:
//! every mode runs for every user, the exact ones return plain's lists, and the report is
//! written with its plots. (No timing is asserted.)

use specdec_bench::beams::{evaluate, report, BeamArm, BeamDraft, BeamMode, BeamSetup};
use specdec_engine::beam::{BeamOptions, BeamVerify, DraftScoring};
use specdec_rec::recommend::users::EvalCase;
use specdec_rec::recommend::ItemCatalogue;

#[test]
fn every_mode_runs_exact_ones_return_plains_lists_and_the_report_has_its_plots() {
    let model = specdec_testkit::load_model(1);
    let tokenizer = specdec_testkit::tokenizer();
    let titles: Vec<String> = [
        "Alpha (1990)",
        "Beta (1991)",
        "Gamma (1992)",
        "Delta (1993)",
        "Echo (1994)",
    ]
    .map(String::from)
    .to_vec();
    let catalogue = ItemCatalogue::from_titles(titles, &tokenizer).unwrap();
    let cases: Vec<EvalCase> = (0..3)
        .map(|u| EvalCase {
            user: u,
            target_item: u + 1,
            prompt: format!("User {u} watched Alpha (1990) and Beta (1991). Next:"),
        })
        .collect();
    let setup = BeamSetup {
        target: &model,
        tokenizer: &tokenizer,
        catalogue: &catalogue,
        drafts: vec![BeamDraft {
            name: "self".into(),
            model: &model,
            scoring: DraftScoring::default(),
        }],
    };
    let arm = |mode, draft, options| BeamArm {
        mode,
        draft,
        options,
    };
    let arms = [
        arm(BeamMode::Plain, None, BeamOptions::plain(3)),
        arm(BeamMode::JumpForward, None, BeamOptions::jump_forward(3)),
        arm(
            BeamMode::Strict,
            Some(0),
            BeamOptions::speculative(3, BeamVerify::Strict),
        ),
        arm(
            BeamMode::Relaxed,
            Some(0),
            BeamOptions::speculative(3, BeamVerify::Relaxed { seed: 7 }),
        ),
    ];
    let mut done = 0;
    let eval = evaluate(&setup, &cases, &arms, &mut |d| done = d).unwrap();
    assert_eq!(done, 3);
    assert_eq!(eval.modes.len(), 4);
    assert!(!eval.exact_differs(), "{:?}", eval.modes);
    for row in &eval.modes {
        assert_eq!(row.users, 3);
        assert_eq!(row.per_user_forwards.len(), 3);
        assert_eq!(row.per_user_speedup.len(), 3);
    }
    assert_eq!(eval.modes[3].label(), "relaxed [self] (relaxed)");
    // A perfect draft: the strict search takes fewer target forwards than plain's.
    assert!(
        eval.modes[2].forwards_per_request < eval.modes[0].forwards_per_request,
        "{:?}",
        eval.modes
    );
    assert_eq!(eval.plans.len(), 2);
    // Plain first, always; a speculative arm needs its draft.
    assert!(evaluate(&setup, &cases, &arms[1..], &mut |_| {}).is_err());
    let no_draft = [
        arms[0].clone(),
        arm(BeamMode::Strict, None, arms[2].options.clone()),
    ];
    assert!(evaluate(&setup, &cases, &no_draft, &mut |_| {}).is_err());

    let dir = std::env::temp_dir().join(format!("specdec-beams-report-{}", std::process::id()));
    let index = report(&eval, vec!["test".into()]).write(&dir).unwrap();
    let md = std::fs::read_to_string(index).unwrap();
    assert!(
        md.contains("forwards.svg") && md.contains("speedups.svg"),
        "{md}"
    );
    assert!(md.contains("strict [self]"), "{md}");
    assert!(dir.join("forwards.svg").exists() && dir.join("speedups.svg").exists());
    let _ = std::fs::remove_dir_all(&dir);
}
