//! Durable files: the one file-system seam ([`fs::FileSystem`]), the one durable writer
//! ([`file::write_file`]: hash → temp → fsync → rename → directory fsync), capped reads,
//! and the one fault-injecting wrapper for tests ([`faulty::FaultyFs`]).
//!
//! Every file the project writes — store objects and records, bundles, release evidence,
//! receipts, the dataset cache, the invariant suite's artifact — goes through this module.
//! The only exceptions are deliberate and in the crash lab: the damage `lab::corruption`
//! injects, the crash states `lab::crash_model` materialises into scratch directories, and
//! the plain write+fsync baseline `lab::bench` measures against.
pub mod faulty;
pub mod file;
pub mod fs;

pub use file::{
    ensure_dir_all, ensure_dir_all_with, ensure_dir_with, file_sha256, read_capped, write_file,
    write_file_with, DurableError, Replace, WriteOptions,
};
pub use fs::{EntryKind, FileSystem, RealFs};
