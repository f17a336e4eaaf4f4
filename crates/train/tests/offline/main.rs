//! specdec-train's integration tests, one binary: no model file, no network (synthetic
//! teacher data and a fake target).

mod smoke;
