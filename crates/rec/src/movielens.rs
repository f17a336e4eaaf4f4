//! MovieLens-100k as RECSYS.md describes it: users, items and ratings from the recbole
//! wheel's `ml-100k.{user,item,inter}` files (TSV with typed headers).
//!
//! (Parsing and fetching to be written; the types are fixed here because the split, the
//! prompts, the groups and the downstream check all share them.)

/// One MovieLens user (`ml-100k.user`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: u32,
    pub age: u32,
    /// `M` or `F`.
    pub gender: String,
    pub occupation: String,
    pub zip_code: String,
}

/// One MovieLens movie (`ml-100k.item`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item {
    pub id: u32,
    /// As written, leading articles moved to the end (`Ice Storm, The`).
    pub title: String,
    /// Missing for a few items.
    pub year: Option<u32>,
    /// In the order listed (the first one picks the item's group).
    pub genres: Vec<String>,
}

/// One rating (`ml-100k.inter`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rating {
    pub user: u32,
    pub item: u32,
    /// 1 to 5.
    pub rating: u8,
    pub timestamp: u64,
}

/// The whole dataset, users and items sorted by id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dataset {
    pub users: Vec<User>,
    pub items: Vec<Item>,
    pub ratings: Vec<Rating>,
}
