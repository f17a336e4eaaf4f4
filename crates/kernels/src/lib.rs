//! specdec-kernels
