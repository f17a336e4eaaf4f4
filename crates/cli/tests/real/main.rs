//! The `specdec` binary's real-model tests, one binary, built only with `--features
//! real-models`: commands on the default model (fetched if missing) and on MovieLens-100k
//! (fetched into the data cache; skipped, saying so, when it cannot be downloaded).

mod cli;
#[path = "../common/mod.rs"]
mod common;
mod knowledge;
mod knowledge_relaxed;
mod rec_prepare;
mod rec_quality;
mod rec_train_draft;
mod recommend;
mod serve;
