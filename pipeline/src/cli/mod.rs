//! The `pipeline` command line: clap types and the printing of results.
pub mod receipt;
pub mod release;
pub mod visuals;
