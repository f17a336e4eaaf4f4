//! Draft-tree geometry: validation, depths and ancestor chains.

use crate::{Node, RuntimeError};

/// Depth of every node (a root has depth 0) after checking that parents come first.
pub(crate) fn depths(nodes: &[Node], vocab: usize) -> Result<Vec<usize>, RuntimeError> {
    let mut depth = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        if n.token as usize >= vocab {
            return Err(RuntimeError::BadToken(n.token));
        }
        let d = match n.parent {
            None => 0,
            Some(p) if (p as usize) < i => depth[p as usize] + 1,
            Some(p) => {
                return Err(RuntimeError::BadTree(format!(
                    "node {i} has parent {p}, which does not precede it"
                )))
            }
        };
        depth.push(d);
    }
    Ok(depth)
}

/// The node itself and its ancestors, root first, as flat indices.
pub(crate) fn path_to(nodes: &[Node], mut i: usize, out: &mut Vec<usize>) {
    out.clear();
    loop {
        out.push(i);
        match nodes[i].parent {
            Some(p) => i = p as usize,
            None => break,
        }
    }
    out.reverse();
}
