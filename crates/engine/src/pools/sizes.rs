//! What the pools hold and whom they serve, for metrics. The operator's pools are named
//! (their names are the operator's); every tenant's pools count as one group, since their
//! names are the tenants' own.

use std::collections::BTreeMap;
use std::sync::PoisonError;

use super::{Key, Owner, PoolName, Pools};
use crate::scope::CacheScope;

/// The label of the operator's default (global) pool; no pool name has parentheses.
pub const GLOBAL_LABEL: &str = "(global)";
/// The label of every tenant's pools together.
pub const TENANTS_LABEL: &str = "(tenants)";

/// The pools of one label in memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolSize {
    /// An operator's pool name, [`GLOBAL_LABEL`] or [`TENANTS_LABEL`].
    pub label: String,
    /// Pools in memory under the label.
    pub pools: usize,
    /// Their tries' nodes.
    pub trie_nodes: usize,
    /// Their history indexes' tokens.
    pub history_tokens: usize,
}

impl Pools {
    /// The metrics label of the pool a request of `scope` naming `name` drafts from; none
    /// for a private request (its pool is its own and empty).
    pub fn label(&self, scope: &CacheScope, name: Option<&PoolName>) -> Option<String> {
        self.key(scope, name).map(|k| label_of(&k))
    }

    /// What the pools in memory hold, by label (briefly locking each).
    pub fn sizes(&self) -> Vec<PoolSize> {
        let mut by: BTreeMap<String, PoolSize> = BTreeMap::new();
        let global = std::iter::once((GLOBAL_LABEL.to_string(), &self.global.pool));
        let loaded = self.loaded.iter().map(|(k, s)| (label_of(k), &s.pool));
        for (label, pool) in global.chain(loaded) {
            let e = by.entry(label.clone()).or_insert_with(|| PoolSize {
                label,
                ..PoolSize::default()
            });
            e.pools += 1;
            e.trie_nodes += pool
                .trie
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len();
            e.history_tokens += pool
                .history
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .tokens();
        }
        by.into_values().collect()
    }
}

fn label_of(key: &Key) -> String {
    match (&key.owner, &key.name) {
        (Owner::Operator, None) => GLOBAL_LABEL.to_string(),
        (Owner::Operator, Some(n)) => n.as_str().to_string(),
        (Owner::Tenant(_), _) => TENANTS_LABEL.to_string(),
    }
}
