//! Integration tests of specdec-drafters (one binary: links once).

mod common;
mod history;
mod mix;
mod reference;
mod suffix;
mod trie;
mod trie_files;
mod wellformed;
