//! Release evidence: `release-evidence` binds a clean checkout, runs both killer-demo
//! barriers, verifies their bundles and emits a checkable, path-free directory;
//! `verify-release` re-checks such a directory and names the file of any tampering.
//!
//! The directory holds `bundles/<barrier>/` (the four bundle records of each run),
//! `transcripts/` (normalised transcripts of each child command), `summary.json` (canonical
//! JSON), `release-evidence.json` (an in-toto Statement v1 with a SLSA provenance v1
//! predicate), `SHA256SUMS` (GNU format, covering every other file) and, when signed,
//! `SHA256SUMS.sig` (SSHSIG, namespace `shardlift-release-evidence-v1`).
pub mod assets;
pub mod error;
pub mod pins;
pub mod produce;
pub mod reproduce;
pub mod scan;
pub mod sources;
pub mod statement;
pub mod summary;
pub mod sums;
pub mod verify;
