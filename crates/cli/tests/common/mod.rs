//! What both tiers' tests of the `specdec` binary share.
#![allow(dead_code)] // each test binary uses part of this

pub mod cli;
pub mod quality;
