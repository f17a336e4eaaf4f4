//! Verification of draft trees, and the token choice it shares with plain decoding.
//!
//! A verifier is a pure function: draft tree + the target's logits at every node → which
//! nodes are accepted and the bonus token. It never touches a KV cache; the engine commits.
//!
//! Strict verification walks the tree along the tokens the target itself chooses at each
//! node — the argmax, or a sample drawn with one uniform number per emitted token — so
//! given logits that are bit-identical to plain decoding's (the runtime guarantees that),
//! the emitted tokens are exactly those of plain decoding, greedy or seeded sampling alike.
//!
//! Modules, leaves first: `rng` and `sampling`; `walk` (the walk and strict verification);
//! `relaxed` (LASER's rule and its parameters) and `forced` (the benchmark's rule) on it;
//! `rule` (a request's [`Acceptance`]) on those. None imports a module above it.
//!
//! By method: strict greedy and seeded-sampling verification of draft trees is `walk`
//! ([`verify_strict`], [`verify_greedy_argmax`]); LASER's relaxed rule (top-k, tau) is
//! `relaxed` ([`Relaxed`]); beam-search verification is [`beam`]: the target's top-K step
//! that plain and strict speculative beam search share, and AtSpeed's relaxed sampling
//! step.

pub mod beam;
mod forced;
mod relaxed;
mod rng;
mod rule;
pub mod sampling;
mod walk;

pub use forced::Forced;
pub use relaxed::Relaxed;
pub use rng::Rng;
pub use rule::Acceptance;
pub use sampling::{argmax, distribution, draw, sample, SamplingParams};
pub use walk::{verify_greedy_argmax, verify_strict, walk, walk_with, Step, Verdict};

#[cfg(test)]
use specdec_tree::TokenTree;

#[cfg(test)]
mod tests;
