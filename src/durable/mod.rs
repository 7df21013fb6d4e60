//! Durable files: the one file-system seam ([`fs::FileSystem`]), the one durable writer
//! ([`file::write_file`]: hash → temp → fsync → rename → directory fsync), capped reads,
//! and the one fault-injecting wrapper for tests ([`faulty::FaultyFs`]).
//!
//! Every file the project writes — store objects and records, bundles, release evidence,
//! receipts, the dataset cache — goes through this module.
pub mod faulty;
pub mod file;
pub mod fs;

pub use file::{
    ensure_dir_all, ensure_dir_with, file_sha256, read_capped, write_file, write_file_with,
    DurableError, Replace, WriteOptions,
};
pub use fs::{EntryKind, FileSystem, RealFs};
