//! Adaptive draft size.
//!
//! The drafter proposes a tree up to the request's node cap (drafted nodes below the
//! pending token, the tree's root); the engine keeps the subtree that maximizes expected
//! tokens per unit of verify cost, `(1 + E[accepted]) / cost(1 + k)`.
//! `E[accepted]` sums each kept node's probability of being accepted: the product, along its
//! path, of acceptance rates learned online per (source, evidence of the branch, depth,
//! first-or-later sibling).
//! The cost curve is learned from the verify forwards actually timed. When no draft is
//! expected to pay, nothing is drafted and the step is plain decoding, with an occasional
//! small probe so a change in the text (a copied passage starting) is noticed.
//!
//! Beam searches draw their draft plans from here too (`beam_plans`), priced on the same
//! cost model: a plan per search, chosen by what each plan measured per beam step.

mod acceptance;
mod beam_plans;
mod cost;
mod policy;

pub use acceptance::{AcceptanceMemories, AcceptanceMemory};
pub use beam_plans::PlanReport;
pub(crate) use beam_plans::{Plan, PlanChooser};
pub use cost::{curve_ms, is_curve, BatchLoad, CostModel};
pub use policy::BudgetPolicy;

#[cfg(test)]
mod tests;
