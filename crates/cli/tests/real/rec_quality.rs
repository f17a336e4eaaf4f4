//! `specdec rec quality --downstream` end to end on the real MovieLens split.

use crate::common::cli::specdec;
use crate::common::quality::files;

/// The downstream check on the real MovieLens split (fetched into the cache like every
/// dataset), with a tiny knowledge sample and few text buckets to keep it quick.
#[test]
fn downstream_reports_auc_and_log_loss_without_knowledge_with_strict_and_with_relaxed() {
    let (s, r) = files("downstream");
    let o = specdec(&[
        "rec",
        "quality",
        "--strict",
        &s,
        "--relaxed",
        &r,
        "--downstream",
        "--text-buckets",
        "8",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let d = &v["downstream"];
    for run in ["none", "strict", "relaxed"] {
        let auc = d[run]["auc"].as_f64().unwrap();
        let loss = d[run]["log_loss"].as_f64().unwrap();
        // Ids and profile fields alone predict ratings >= 4 better than chance.
        assert!(auc > 0.6 && auc < 1.0, "{run}: AUC {auc}");
        assert!(loss > 0.0 && loss < 0.75, "{run}: log loss {loss}");
        // 943 users' validation and test interactions.
        assert_eq!(d[run]["heldout_rows"], 1886, "{run}");
    }
    assert_eq!(d["none"]["users_with_text"], 0);
    assert_eq!(d["strict"]["users_with_text"], 1);
    assert_eq!(d["relaxed"]["items_with_text"], 1);
}
