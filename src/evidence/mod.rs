//! Evidence: bundle records, their installation and verification, the source binding and
//! the CPU kernel path evidence is reproducible on.
pub mod bundle;
pub mod kernel_path;
pub mod source;
