//! specdec-server's offline tests, one binary: no model file, no network. The servers load
//! the tiny synthetic model of `specdec-testkit` (random weights, byte-level tokenizer,
//! ChatML): every endpoint, validation, admission, timeouts, tenants and `/v1/recommend`
//! hold on any model.

mod admission;
mod backend;
mod common;
mod config;
mod parse_fuzz;
mod pool_errors;
mod recommend;
mod router;
mod shared_state;
mod tenants;
mod timeout;
mod validation;
