//! Hardening of trie files: vocabulary checks, files that are not regular files, saves that
//! are killed or race with another process, and hostile bytes fed to the loader.

use std::path::PathBuf;

use proptest::collection::vec;
use proptest::prelude::*;
use specdec_drafters::*;

fn scratch(test: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("specdec-trie-files-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn trie_of(paths: &[&[u32]]) -> Trie {
    let mut t = Trie::default();
    for p in paths {
        t.insert(p);
    }
    t
}

#[test]
fn trie_with_out_of_vocabulary_token_ids_is_refused_at_load() {
    let dir = scratch("vocab");
    let path = dir.join("pool.trie");
    trie_of(&[&[1, 2, 3], &[4, 49_999]]).save(&path).unwrap();
    // The checksum is valid, so a plain load accepts it...
    let t = Trie::load(&path).unwrap();
    t.check_vocab(50_000).unwrap();
    // ...but not against a smaller vocabulary.
    let e = Trie::load_for_vocab(&path, 49_152).unwrap_err();
    assert!(
        matches!(
            e,
            DraftError::TokenOutOfVocabulary {
                token: 49_999,
                vocab: 49_152
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("49999"), "{e}");
    Trie::default().check_vocab(0).unwrap();
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
#[allow(unsafe_code)] // libc::mkfifo: std has no way to create a FIFO
fn fifo_as_trie_is_refused_instead_of_hanging() {
    let dir = scratch("fifo");
    let fifo = dir.join("pool.trie");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = Trie::load(&fifo).unwrap_err();
    assert!(
        matches!(e, DraftError::NotAFile { what: "FIFO", .. }),
        "{e}"
    );
    assert!(e.to_string().contains("FIFO"), "{e}");
    let e = Trie::load(&dir).unwrap_err();
    assert!(
        matches!(
            e,
            DraftError::NotAFile {
                what: "directory",
                ..
            }
        ),
        "{e}"
    );
    let e = Trie::load("/dev/null").unwrap_err();
    assert!(
        matches!(e, DraftError::NotAFile { what: "device", .. }),
        "{e}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn save_killed_midway_leaves_one_temporary_that_the_next_save_reuses() {
    let dir = scratch("killed");
    let path = dir.join("pool.trie");
    // What a kill -9 between create and rename leaves behind.
    std::fs::write(dir.join(".pool.trie.tmp"), b"half a tri").unwrap();
    let t = trie_of(&[&[1, 2, 3]]);
    for _ in 0..3 {
        t.save(&path).unwrap();
    }
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["pool.trie", "pool.trie.lock"]);
    assert!(Trie::load(&path).unwrap() == t);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn two_tries_saved_to_one_file_keep_both_paths() {
    let dir = scratch("shared");
    let path = dir.join("global.trie");
    // Both servers start from the same file.
    trie_of(&[&[9, 9]]).save(&path).unwrap();
    let stamp = FileStamp::of(&path);
    let mut a = Trie::load(&path).unwrap();
    let mut b = Trie::load(&path).unwrap();
    a.insert(&[1, 2, 3]);
    b.insert(&[4, 5]);
    let sa = a.save_shared(&path, stamp).unwrap();
    let sb = b.save_shared(&path, stamp).unwrap();
    let disk = Trie::load(&path).unwrap();
    for p in [&[9, 9][..], &[1, 2, 3], &[4, 5]] {
        assert_eq!(disk.count(p), 1, "{p:?} lost: {:?}", disk.entries());
    }
    // A learns more and saves again: it takes in b's paths, counting nothing twice.
    a.insert(&[1, 2, 3]);
    a.save_shared(&path, Some(sa)).unwrap();
    let disk = Trie::load(&path).unwrap();
    assert_eq!(disk.count(&[1, 2, 3]), 2);
    assert_eq!(disk.count(&[4, 5]), 1);
    assert_eq!(disk.count(&[9, 9]), 1);
    // B saving with an up-to-date stamp would not merge; its stamp is stale, so it does.
    assert_ne!(FileStamp::of(&path), Some(sb));
    b.save_shared(&path, Some(sb)).unwrap();
    assert_eq!(Trie::load(&path).unwrap().count(&[1, 2, 3]), 2);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn concurrent_shared_saves_serialize_and_lose_no_path() {
    let dir = scratch("threads");
    let path = dir.join("global.trie");
    let handles: Vec<_> = (0..4u32)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let mut t = Trie::default();
                let mut stamp = None;
                for j in 0..10u32 {
                    t.insert(&[i, j, 100 + i]);
                    stamp = Some(t.save_shared(&path, stamp).unwrap());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let disk = Trie::load(&path).unwrap();
    for i in 0..4u32 {
        for j in 0..10u32 {
            assert_eq!(disk.count(&[i, j, 100 + i]), 1, "[{i}, {j}] lost");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn merge_max_is_idempotent_and_keeps_invariants() {
    let mut a = trie_of(&[&[1, 2], &[1, 2], &[1, 3], &[5]]);
    let b = trie_of(&[&[1, 3], &[1, 3], &[1, 3], &[6, 7]]);
    a.merge_max(&b);
    let once = a.entries();
    a.merge_max(&b);
    assert_eq!(a.entries(), once);
    assert_eq!(a.count(&[1]), 3);
    assert_eq!(a.count(&[1, 2]), 2);
    assert_eq!(a.count(&[1, 3]), 3);
    assert_eq!(a.count(&[6, 7]), 1);
    // Still a valid trie: it round-trips through the checked loader.
    assert!(Trie::from_bytes(&a.to_bytes()).unwrap() == a);
    // Best child first.
    let one = a.find(&[1]).unwrap();
    assert_eq!(a.node_token(a.children(one)[0]), 3);
}

fn small_trie() -> impl Strategy<Value = Trie> {
    vec(vec(0u32..8, 1..6), 0..12).prop_map(|paths| {
        let mut t = Trie::default();
        for p in &paths {
            t.insert(p);
        }
        t
    })
}

/// Loads `bytes` from memory and from a file; either way an error or a trie, no panic; a
/// trie that loads must be valid (it saves and reloads to itself).
fn load_both(dir: &std::path::Path, bytes: &[u8]) -> Result<(), TestCaseError> {
    let mem = Trie::from_bytes(bytes);
    let path = dir.join("fuzz.trie");
    std::fs::write(&path, bytes).unwrap();
    let file = Trie::load(&path);
    std::fs::remove_file(&path).unwrap();
    prop_assert_eq!(mem.is_ok(), file.is_ok());
    if let Ok(t) = mem {
        prop_assert!(Trie::from_bytes(&t.to_bytes()).unwrap() == t);
        let _ = t.check_vocab(4);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn random_bytes_never_panic_the_loader(bytes in vec(any::<u8>(), 0..300)) {
        let dir = scratch("random");
        load_both(&dir, &bytes)?;
        // Random bytes behind a valid magic reach the length and checksum checks.
        let mut b = b"specdTRI".to_vec();
        b.extend_from_slice(&bytes);
        load_both(&dir, &b)?;
    }

    #[test]
    fn mutated_trie_files_never_panic_the_loader(
        t in small_trie(),
        edits in vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        cut in any::<prop::sample::Index>(),
        reseal in any::<bool>(),
    ) {
        let dir = scratch("mutated");
        let mut b = t.to_bytes();
        for (at, v) in &edits {
            let i = at.index(b.len());
            b[i] = *v;
        }
        if reseal {
            // A fixed checksum lets the mutation reach the structural checks.
            crate::common::reseal(&mut b);
        }
        load_both(&dir, &b)?;
        load_both(&dir, &b[..cut.index(b.len())])?;
    }

    #[test]
    fn merged_tries_keep_every_path_of_both(a in small_trie(), b in small_trie()) {
        let mut m = a.clone();
        m.merge_max(&b);
        for (p, c) in a.entries().into_iter().chain(b.entries()) {
            prop_assert!(m.count(&p) >= c, "{:?}", p);
        }
        prop_assert!(Trie::from_bytes(&m.to_bytes()).unwrap() == m);
    }
}
