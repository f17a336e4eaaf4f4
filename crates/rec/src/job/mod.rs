//! The knowledge job (to be written).
