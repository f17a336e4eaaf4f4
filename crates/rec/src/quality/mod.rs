//! Quality of relaxed knowledge (to be written).
