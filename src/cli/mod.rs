//! The binary's command-line layer: clap types and `anyhow` live here and nowhere in the
//! library. Each module parses its arguments, calls the library and prints.
pub mod crash_test;
pub mod dataset;
#[cfg(feature = "torch")]
pub mod demo;
#[cfg(feature = "torch")]
pub mod invariants;
pub mod objstore;
pub mod progress;
pub mod store;
pub mod train;
pub mod verify_bundle;
