//! Tree walking over parent links: the one place that follows them.

use crate::{Node, TreeError};

pub(crate) fn check_parents(nodes: &[Node]) -> Result<(), TreeError> {
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            if p as usize >= i {
                return Err(TreeError::ParentAfter { node: i, parent: p });
            }
        }
    }
    Ok(())
}

pub(crate) fn check_dfs(nodes: &[Node]) -> Result<(), TreeError> {
    // `path`: the current root-to-node chain; a DFS-ordered node's parent is on it.
    let mut path: Vec<u32> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, n) in nodes.iter().enumerate() {
        match n.parent {
            None => path.clear(),
            Some(p) => {
                if p as usize >= i {
                    return Err(TreeError::ParentAfter { node: i, parent: p });
                }
                while path.last().is_some_and(|&x| x != p) {
                    path.pop();
                }
                if path.is_empty() {
                    return Err(TreeError::NotContiguous { node: i, parent: p });
                }
            }
        }
        if !seen.insert((n.parent, n.token)) {
            return Err(TreeError::DuplicateSibling {
                node: i,
                token: n.token,
            });
        }
        path.push(i as u32);
    }
    Ok(())
}

pub(crate) fn depths(nodes: &[Node]) -> Vec<usize> {
    let mut d: Vec<usize> = Vec::with_capacity(nodes.len());
    for n in nodes {
        let v = n.parent.map_or(0, |p| d[p as usize] + 1);
        d.push(v);
    }
    d
}

pub(crate) fn path_to(nodes: &[Node], mut node: usize) -> Vec<usize> {
    let mut path = vec![node];
    while let Some(p) = nodes[node].parent {
        node = p as usize;
        path.push(node);
    }
    path.reverse();
    path
}

/// Where `path` stops being a chain from a root: the position in `path` of the first node
/// that is not a child of the one before it (the first must be a root), or `None` when the
/// whole of `path` is such a chain.
pub fn chain_break(nodes: &[Node], path: &[usize]) -> Option<usize> {
    let mut prev: Option<u32> = None;
    path.iter().position(|&j| {
        let ok = j < nodes.len() && nodes[j].parent == prev;
        prev = Some(j as u32);
        !ok
    })
}

/// Every node's chain of indices from its root down to itself, after checking that parents
/// come first. A node's depth is its chain's length minus one. Each chain is built from its
/// parent's, so the whole pass is linear in the chains' total length.
pub fn ancestor_chains(nodes: &[Node]) -> Result<Vec<Vec<usize>>, TreeError> {
    let mut chains: Vec<Vec<usize>> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let mut chain = match n.parent {
            None => Vec::with_capacity(1),
            Some(p) if (p as usize) < i => {
                let up = &chains[p as usize];
                let mut c = Vec::with_capacity(up.len() + 1);
                c.extend_from_slice(up);
                c
            }
            Some(p) => return Err(TreeError::ParentAfter { node: i, parent: p }),
        };
        chain.push(i);
        chains.push(chain);
    }
    Ok(chains)
}
