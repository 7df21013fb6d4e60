//! The content-addressed checkpoint store. (Being written.)
pub mod cli;
