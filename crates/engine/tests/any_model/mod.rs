//! Exactness tests that hold on any model (speculation equals plain decoding, batching and
//! cache reuse change no token, ...): each tier runs them on its models, the offline tier on
//! the tiny synthetic model, the real tier on the default model (and Gemma 3 when cached).

mod batched;
pub(crate) mod drafters_exact;
pub(crate) mod generate;
mod history_exact;
mod prefix_cache;
mod shared_learning;
mod speculative;
