//! The `specdec` binary's offline tests, one binary: commands that need no model file and
//! no network.

mod cli;
#[path = "../common/mod.rs"]
mod common;
mod rec_quality;
