//! Evidence: bundle records, their installation and verification, and the source binding.
pub mod bundle;
pub mod source;
