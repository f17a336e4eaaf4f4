//! The roofline on the tiny synthetic model: what it reports is complete and consistent
//! (no timing is asserted: only that every size has its floors and each floor is a floor).

use specdec_bench::roofline::{measure, roofline_plots, RooflineOptions};

#[test]
fn every_size_gets_both_floors_and_the_profile_accounts_for_the_forward() {
    let model = specdec_testkit::load_model(1);
    let tokenizer = specdec_testkit::tokenizer();
    let opts = RooflineOptions {
        repeats: 1,
        prefixes: vec![8, 16],
        buffer_mib: 64,
        profile_nodes: vec![1, 4],
    };
    let r = measure(&model, &tokenizer, &opts).unwrap();
    assert_eq!(r.rows.len(), 2 * 7, "n = 1, 2, 4, ..., 64 at each prefix");
    for row in &r.rows {
        assert!(row.ms > 0.0 && row.floor_ms > 0.0, "{row:?}");
        // The kernels' rate is below the instruction's peak: its floor is the higher one.
        assert!(row.kernel_floor_ms >= row.floor_ms * 0.999, "{row:?}");
        assert!(
            row.floor_ratio_to_one >= 0.999,
            "a larger forward has no lower floor"
        );
        assert!(matches!(row.bound, "memory" | "compute"));
    }
    assert_eq!(r.profiles.len(), 4);
    for p in &r.profiles {
        let claimed: f64 = p.phases.iter().map(|x| x.ms).sum();
        assert!((claimed + p.other_ms - p.forward_ms).abs() < 1e-6, "{p:?}");
        assert!(
            p.phases.iter().any(|x| x.floor_ms.is_some()),
            "matrix phases have floors"
        );
    }
    let plots = roofline_plots(&r);
    assert_eq!(plots.len(), 2, "one plot per prefix");
    assert!(plots
        .iter()
        .all(|p| p.series.iter().all(|s| s.points.len() == 7)));
    let json = serde_json::to_value(&r).unwrap();
    for key in [
        "threads",
        "isa",
        "read_gb_per_s",
        "int8_gmacs_per_s",
        "kernel_gmacs_per_s",
        "rows",
        "profiles",
    ] {
        assert!(
            json.get(key).is_some(),
            "`bench roofline --json` keeps `{key}`"
        );
    }
}
