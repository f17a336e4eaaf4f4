//! specdec-workloads' real-data tests, one binary, built only with `--features
//! real-models`: every workload built from the real datasets (fetched on first use).

mod build_real;
