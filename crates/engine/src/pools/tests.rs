use super::*;

#[test]
fn pool_names_are_safe_file_names() {
    for ok in ["a", "group-7", "users.cluster_12", &"x".repeat(64)] {
        assert!(PoolName::parse(ok).is_ok(), "{ok}");
    }
    for bad in ["", ".hidden", "a/b", "..", "a b", "é", &"x".repeat(65)] {
        assert!(PoolName::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn pools_load_lazily_and_save_only_when_dirty() {
    let dir = std::env::temp_dir().join(format!("specdec-pools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = PoolName::parse("g1").unwrap();
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
    assert!(pools.save_dirty().is_empty());
    let t = pools.trie(Some(&name)).unwrap();
    t.lock().unwrap().insert(&[1, 2, 3, 4]);
    assert!(pools.save_dirty().is_empty(), "not marked dirty yet");
    pools.mark_dirty(Some(&name));
    let saved = pools.save_dirty();
    assert_eq!(saved.len(), 1);
    assert!(saved[0].1.is_ok());
    assert!(pools.save_dirty().is_empty(), "clean after saving");
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
    let t2 = again.trie(Some(&name)).unwrap();
    assert_eq!(*t2.lock().unwrap(), *t.lock().unwrap());
    let other = again.trie(Some(&PoolName::parse("g2").unwrap())).unwrap();
    assert_ne!(
        *other.lock().unwrap(),
        *t.lock().unwrap(),
        "pools are separate"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn pool_file_with_out_of_vocabulary_token_ids_is_refused_when_loaded() {
    let dir = std::env::temp_dir().join(format!("specdec-pools-oov-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut t = Trie::default();
    t.insert(&[1, 2, 60_000]);
    t.save(dir.join("g.trie")).unwrap();
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
    pools.set_vocab(49_152);
    let e = pools
        .trie(Some(&PoolName::parse("g").unwrap()))
        .err()
        .unwrap();
    assert!(e.to_string().contains("60000"), "{e}");
    // The global trie, as `--trie` loads it.
    let e = load_trie(Some(&dir.join("g.trie")), 49_152).unwrap_err();
    assert!(
        matches!(e, DraftError::TokenOutOfVocabulary { token: 60_000, .. }),
        "{e}"
    );
    assert!(load_trie(Some(&dir.join("g.trie")), 60_001).is_ok());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn two_servers_sharing_one_trie_file_keep_both_learnings() {
    let dir = std::env::temp_dir().join(format!("specdec-pools-two-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("global.trie");
    let open = || {
        let trie = read_trie(Some(&file), 1000).unwrap();
        Pools::new(
            Pool::new(trie, HistoryIndex::default()),
            Some(file.clone()),
            None,
        )
    };
    let (mut a, mut b) = (open(), open());
    for i in 0..100u32 {
        a.global().trie.lock().unwrap().insert(&[i, i + 1]);
        b.global().trie.lock().unwrap().insert(&[i + 500, i + 1]);
        a.mark_dirty(None);
        b.mark_dirty(None);
        assert!(a.save_dirty()[0].1.is_ok());
        assert!(b.save_dirty()[0].1.is_ok());
    }
    let disk = Trie::load(&file).unwrap();
    for i in 0..100u32 {
        assert!(disk.count(&[i, i + 1]) >= 1, "a's path {i} lost");
        assert!(disk.count(&[i + 500, i + 1]) >= 1, "b's path {i} lost");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_history_file_never_is_its_trie_file() {
    for (trie, history) in [
        ("g.trie", "g.history"),
        ("/x/trie.bin", "/x/trie.history"),
        ("state", "state.history"),
        ("odd.history", "odd.history.history"),
    ] {
        assert_eq!(history_file(Path::new(trie)), Path::new(history));
    }
}

#[test]
fn a_pool_saves_and_loads_its_history_beside_its_trie() {
    let dir = std::env::temp_dir().join(format!("specdec-pools-hist-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let name = PoolName::parse("g").unwrap();
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
    let pool = pools.pool(Some(&name)).unwrap();
    pool.history
        .lock()
        .unwrap()
        .add_request(&[1, 2, 3], &[4, 5, 6]);
    pools.mark_dirty(Some(&name));
    assert!(pools.save_dirty().iter().all(|(_, r)| r.is_ok()));
    assert!(dir.join("g.history").is_file());
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
    let back = again.pool(Some(&name)).unwrap();
    assert_eq!(*back.history.lock().unwrap(), *pool.history.lock().unwrap());
    let other = again.pool(Some(&PoolName::parse("h").unwrap())).unwrap();
    assert!(
        other.history.lock().unwrap().is_empty(),
        "pools are separate"
    );
    // A damaged history file is an error naming the pool, not an empty pool.
    std::fs::write(dir.join("g.history"), b"specdHIS garbage").unwrap();
    let mut third = Pools::new(Pool::default(), None, Some(dir.clone()));
    let e = third.pool(Some(&name)).unwrap_err();
    assert!(e.to_string().contains('g'), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("specdec-pools-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn tenant(id: &str) -> CacheScope {
    CacheScope::Tenant(Tenant::new(id))
}

fn name(s: &str) -> PoolName {
    PoolName::parse(s).unwrap()
}

/// Regression (tenant leak): every client drafted from (and fed) the one default pool.
#[test]
fn tenants_have_their_own_pools_and_the_operator_names_the_shared_ones() {
    let dir = temp_dir("tenants");
    let mut pools =
        Pools::new(Pool::default(), None, Some(dir.clone())).with_shared([name("docs")]);
    let a = pools.pool_in(&tenant("a"), None).unwrap();
    a.trie.lock().unwrap().insert(&[1, 2, 3]);
    pools.mark_dirty_in(&tenant("a"), None);
    for (scope, pool) in [
        (tenant("b"), None),
        (CacheScope::Shared, None),
        (CacheScope::Private, None),
        (tenant("b"), Some(name("g"))),
        (tenant("a"), Some(name("g"))),
    ] {
        let p = pools.pool_in(&scope, pool.as_ref()).unwrap();
        assert!(p.trie.lock().unwrap().is_empty(), "{scope:?} {pool:?}");
    }
    assert_eq!(
        pools
            .pool_in(&tenant("a"), None)
            .unwrap()
            .trie
            .lock()
            .unwrap()
            .count(&[1, 2]),
        1
    );
    // A shared pool is one pool, whoever names it.
    let docs = pools.pool_in(&tenant("a"), Some(&name("docs"))).unwrap();
    docs.trie.lock().unwrap().insert(&[7, 8]);
    for scope in [tenant("b"), CacheScope::Shared, CacheScope::Private] {
        let p = pools.pool_in(&scope, Some(&name("docs"))).unwrap();
        assert_eq!(p.trie.lock().unwrap().count(&[7, 8]), 1, "{scope:?}");
    }
    // A private request gets a fresh pool each time, which nothing keeps.
    let p = pools.pool_in(&CacheScope::Private, None).unwrap();
    p.trie.lock().unwrap().insert(&[5, 6]);
    let q = pools.pool_in(&CacheScope::Private, None).unwrap();
    assert!(q.trie.lock().unwrap().is_empty());
    // Saved under a digest of the tenant, never the identity, and read back.
    assert!(pools.save_dirty().iter().all(|(_, r)| r.is_ok()));
    let folder = dir.join(TENANTS_DIR).join(tenant_folder(&Tenant::new("a")));
    assert!(folder.join("@default.trie").is_file());
    assert!(!format!("{}", folder.display()).ends_with("/a"));
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
    let back = again.pool_in(&tenant("a"), None).unwrap();
    assert_eq!(back.trie.lock().unwrap().count(&[1, 2]), 1);
    assert!(again
        .pool_in(&tenant("b"), None)
        .unwrap()
        .trie
        .lock()
        .unwrap()
        .is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression (unbounded pools): any client could create named pools without limit, each
/// kept loaded for good and saved (4 files) at every periodic save.
#[test]
fn named_pools_beyond_the_limit_are_refused_counting_saved_ones() {
    let dir = temp_dir("limit");
    let limits = PoolLimits {
        max_named: 3,
        ..PoolLimits::UNBOUNDED
    };
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone())).with_limits(limits);
    for n in ["p1", "p2", "p3"] {
        pools.pool(Some(&name(n))).unwrap();
        pools.mark_dirty(Some(&name(n)));
    }
    let e = pools.pool(Some(&name("p4"))).unwrap_err();
    assert!(matches!(e, EngineError::PoolLimit { limit: 3 }), "{e}");
    pools.pool(Some(&name("p2"))).unwrap();
    // Each tenant has its own allowance.
    for n in ["p1", "p2", "p3"] {
        pools.pool_in(&tenant("t"), Some(&name(n))).unwrap();
    }
    assert!(pools.pool_in(&tenant("t"), Some(&name("x"))).is_err());
    assert!(pools.pool_in(&tenant("u"), Some(&name("x"))).is_ok());
    pools.save_dirty();
    // Saved pools count after a restart.
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone())).with_limits(limits);
    assert!(again.pool(Some(&name("p9"))).is_err());
    assert!(again.pool(Some(&name("p3"))).is_ok());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression (pools never unloaded): memory holds at most `max_loaded` pools; the least
/// recently used unused one is saved and unloaded, and comes back with what it learned.
#[test]
fn unused_pools_are_unloaded_least_recently_used_first_and_come_back_whole() {
    let dir = temp_dir("unload");
    let limits = PoolLimits {
        max_loaded: 2,
        ..PoolLimits::UNBOUNDED
    };
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone())).with_limits(limits);
    for (i, n) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let p = pools.pool(Some(&name(n))).unwrap();
        p.trie.lock().unwrap().insert(&[i as u32 + 10, 1]);
        pools.mark_dirty(Some(&name(n)));
        assert!(pools.loaded() <= 2);
    }
    // A pool a request holds is not unloaded.
    let held = pools.pool(Some(&name("c"))).unwrap();
    pools.pool(Some(&name("e"))).unwrap();
    pools.pool(Some(&name("f"))).unwrap();
    assert!(held.trie.lock().unwrap().count(&[12, 1]) == 1);
    drop(held);
    for (i, n) in ["a", "b", "c", "d"].into_iter().enumerate() {
        let p = pools.pool(Some(&name(n))).unwrap();
        assert_eq!(p.trie.lock().unwrap().count(&[i as u32 + 10, 1]), 1, "{n}");
    }
    assert!(pools.save_dirty().iter().all(|(_, r)| r.is_ok()));
    assert!(!pools.is_dirty());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression (the periodic save froze generation): saving now happens on a background
/// thread; what it wrote loads back, and a save at exit finds nothing left unsaved.
#[test]
fn background_saves_write_every_dirty_pool() {
    let dir = temp_dir("background");
    let mut pools = Pools::new(
        Pool::default(),
        Some(dir.join("global.trie")),
        Some(dir.clone()),
    );
    pools.global().trie.lock().unwrap().insert(&[3, 4]);
    pools.mark_dirty(None);
    for n in 0..20u32 {
        let p = pools.pool(Some(&name(&format!("g{n}")))).unwrap();
        p.trie.lock().unwrap().insert(&[n, n + 1]);
        pools.mark_dirty(Some(&name(&format!("g{n}"))));
    }
    pools.save_in_background();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while pools.is_saving() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!pools.is_dirty());
    assert!(
        pools.save_dirty().is_empty(),
        "nothing left for the exit save"
    );
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
    for n in 0..20u32 {
        let p = again.pool(Some(&name(&format!("g{n}")))).unwrap();
        assert_eq!(p.trie.lock().unwrap().count(&[n, n + 1]), 1);
    }
    assert_eq!(
        Trie::load(dir.join("global.trie")).unwrap().count(&[3, 4]),
        1
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression (learning lost while reporting success): `--pools DIR` or `--trie FILE`
/// under a path that cannot hold files started, failed every save and exited 0.
#[test]
fn start_up_refuses_a_place_it_cannot_save_to_and_creates_a_missing_folder() {
    let dir = temp_dir("refuse");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let h = HistoryConfig::default;
    let e = Pools::open(None, Some(file.join("pools")), 100, h())
        .err()
        .unwrap();
    assert!(matches!(e, EngineError::StateFolder { .. }), "{e}");
    let e = Pools::open(Some(&file.join("t.trie")), None, 100, h())
        .err()
        .unwrap();
    assert!(matches!(e, EngineError::StateFolder { .. }), "{e}");
    let missing = dir.join("new/pools");
    assert!(Pools::open(
        Some(&dir.join("new2/t.trie")),
        Some(missing.clone()),
        100,
        h()
    )
    .is_ok());
    assert!(missing.is_dir() && dir.join("new2").is_dir());
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression (first use of a pool stalled everyone): a saved pool is read on a background
/// thread while the caller goes on, then put in place whole.
#[test]
fn a_saved_pool_is_read_in_the_background() {
    let dir = temp_dir("prepare");
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
    let p = pools.pool_in(&tenant("t"), Some(&name("big"))).unwrap();
    for i in 0..2000u32 {
        p.history
            .lock()
            .unwrap()
            .add_request(&[i, i + 1], &[i + 2, i + 3, i + 4]);
        p.trie.lock().unwrap().insert(&[i, i + 1, i + 2]);
    }
    pools.mark_dirty_in(&tenant("t"), Some(&name("big")));
    pools.save_dirty();
    let want = p.history.lock().unwrap().clone();
    drop(p);
    let mut again = Pools::new(Pool::default(), None, Some(dir.clone()));
    // Nothing to read: ready at once.
    assert!(again.prepare(&tenant("t"), Some(&name("new"))));
    assert!(again.prepare(&CacheScope::Shared, None));
    assert!(again.prepare(&CacheScope::Private, Some(&name("big"))));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut waited = false;
    while !again.prepare(&tenant("t"), Some(&name("big"))) {
        waited = true;
        assert!(again.is_loading());
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(waited, "the saved pool was read on the caller's thread");
    assert!(!again.is_loading());
    let back = again.pool_in(&tenant("t"), Some(&name("big"))).unwrap();
    assert_eq!(*back.history.lock().unwrap(), want);
    assert_eq!(back.trie.lock().unwrap().count(&[5, 6, 7]), 1);
    std::fs::remove_dir_all(dir).unwrap();
}

/// A pool whose background read fails is reported once ready, and its error reaches the
/// request (a loop of reads that never settles would hold the request for ever).
#[test]
fn a_broken_saved_pool_fails_its_request_instead_of_waiting_for_ever() {
    let dir = temp_dir("broken");
    std::fs::write(dir.join("bad.trie"), b"specdTRI not a trie").unwrap();
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pools.prepare(&CacheScope::Shared, Some(&name("bad"))) {
        assert!(std::time::Instant::now() < deadline, "never ready");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let e = pools.pool(Some(&name("bad"))).unwrap_err();
    assert!(matches!(e, EngineError::Pool { .. }), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

/// Regression: any client could fill the tenants' folders (a tenant per `user` value) and
/// keep every later tenant from saving; past the limit the least recently saved one goes.
#[test]
fn tenant_folders_past_the_limit_replace_the_least_recently_saved() {
    let dir = temp_dir("tenant-limit");
    let limits = PoolLimits {
        max_saved_tenants: 2,
        ..PoolLimits::UNBOUNDED
    };
    let mut pools = Pools::new(Pool::default(), None, Some(dir.clone())).with_limits(limits);
    for t in ["a", "b", "c"] {
        let p = pools.pool_in(&tenant(t), None).unwrap();
        p.trie.lock().unwrap().insert(&[1, 2]);
        pools.mark_dirty_in(&tenant(t), None);
        assert!(pools.save_dirty().iter().all(|(_, r)| r.is_ok()));
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let folders = std::fs::read_dir(dir.join(TENANTS_DIR)).unwrap().count();
    assert_eq!(folders, 2);
    let newest = dir.join(TENANTS_DIR).join(tenant_folder(&Tenant::new("c")));
    assert!(newest.join("@default.trie").is_file());
    assert!(!dir
        .join(TENANTS_DIR)
        .join(tenant_folder(&Tenant::new("a")))
        .exists());
    std::fs::remove_dir_all(dir).unwrap();
}
