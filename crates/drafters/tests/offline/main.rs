//! Integration tests of specdec-drafters, one binary (links once): no model file, no network.

mod automaton_copy;
mod common;
mod draft_model;
mod llma;
mod lookahead;
mod lookahead_files;
mod mix;
mod suffix_decoding;
mod wellformed;
