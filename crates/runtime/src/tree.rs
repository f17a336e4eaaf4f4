//! Draft-tree geometry: validation and ancestor chains.

use crate::{Node, RuntimeError};

/// Every node's chain of flat indices from its root down to itself, after checking that
/// tokens are in the vocabulary and parents come first. A node's depth (0 for a root) is
/// its chain's length minus one.
pub(crate) fn paths(nodes: &[Node], vocab: usize) -> Result<Vec<Vec<usize>>, RuntimeError> {
    let mut paths: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        if n.token as usize >= vocab {
            return Err(RuntimeError::BadToken(n.token));
        }
        let mut path = match n.parent {
            None => Vec::with_capacity(1),
            Some(p) if (p as usize) < i => {
                let up = &paths[p as usize];
                let mut path = Vec::with_capacity(up.len() + 1);
                path.extend_from_slice(up);
                path
            }
            Some(p) => {
                return Err(RuntimeError::BadTree(format!(
                    "node {i} has parent {p}, which does not precede it"
                )))
            }
        };
        path.push(i);
        paths.push(path);
    }
    Ok(paths)
}
