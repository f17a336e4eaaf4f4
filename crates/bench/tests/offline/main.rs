//! The benchmark library without a model file: replays against real runs on a fake target.

mod beams;
mod knowledge;
mod replay;
mod roofline;
mod workload;
