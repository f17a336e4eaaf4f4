//! specdec-rec's real-data tests, one binary, built only with `--features real-models`:
//! MovieLens-100k (fetched into the data cache) and the default model's tokenizer and
//! weights; each skips, saying so, when what it needs is unavailable.

mod catalogue_real;
mod common;
mod real_data;
mod recommend_real;
