//! SuffixDecoding (Oliaro et al.): one index over past requests' prompts and outputs,
//! shared by every request of a pool, and the drafter that reads the tree of what followed
//! the longest match of the context.

pub(crate) mod drafter;
pub(crate) mod index;
