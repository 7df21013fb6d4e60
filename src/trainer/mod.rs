//! The tch-based training engine. (Being written.)
pub mod cli;
