//! Feeds arbitrary bytes, split at 0xFF into a user, an item and a rating file, to the
//! MovieLens parsers: an error or typed rows, never a panic; accepted rows keep their
//! invariants, and a dataset built from them splits into parts that add up.
//!
//! Run (nightly): `cargo fuzz run movielens_parse` from the repository root. The stable
//! equivalents are the parser tests in crates/rec/src/movielens.rs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use specdec_rec::movielens::{parse_items, parse_ratings, parse_users, Dataset};
use specdec_rec::split::Split;

fuzz_target!(|data: &[u8]| {
    let mut parts = data.split(|&b| b == 0xFF).map(String::from_utf8_lossy);
    let (users, items, ratings) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let users = parse_users(&users, "fuzz.user");
    let items = parse_items(&items, "fuzz.item");
    let ratings = parse_ratings(&ratings, "fuzz.inter");
    if let Ok(r) = &ratings {
        assert!(r.iter().all(|r| (1..=5).contains(&r.rating)));
    }
    if let Ok(u) = &users {
        assert!(u.iter().all(|u| u.gender == "M" || u.gender == "F"));
    }
    let (Ok(users), Ok(items), Ok(ratings)) = (users, items, ratings) else {
        return;
    };
    let n = ratings.len();
    let Ok(dataset) = Dataset::from_parts(users, items, ratings) else {
        return;
    };
    let split = Split::leave_last_out(&dataset);
    assert_eq!(split.train.len() + split.valid.len() + split.test.len(), n);
});
