//! The checkpoint-invariant suite (being written).
pub mod cli;
