//! Draft-tree geometry: validation and ancestor chains.

use crate::{Node, RuntimeError};

/// Every node's chain of flat indices from its root down to itself, after checking that
/// tokens are in the vocabulary and parents come first. A node's depth (0 for a root) is
/// its chain's length minus one.
pub(crate) fn paths(nodes: &[Node], vocab: usize) -> Result<Vec<Vec<usize>>, RuntimeError> {
    if let Some(n) = nodes.iter().find(|n| n.token as usize >= vocab) {
        return Err(RuntimeError::BadToken(n.token));
    }
    specdec_tree::ancestor_chains(nodes).map_err(|e| RuntimeError::BadTree(e.to_string()))
}
