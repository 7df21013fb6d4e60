//! Durable files: the one file-system seam every writer in the project goes through.
pub mod fs;
