//! Evidence bundles: installing the four records of a run (`audit.json` last, as the
//! commit marker) and verifying a bundle without changing it.
//!
//! Verification runs in a fixed order and stops at the first failure, each with its own
//! error kind: the directory; completeness (`audit.json` present); missing files; extra
//! files; regular files only, each linked by its bundle name alone (no other hard link),
//! read without following symlinks and with their identity (device, inode, size,
//! modification time) revalidated across the read ([`read`]); size
//! caps; closed schema and version; canonical bytes; the audit's self digest; the SHA-256
//! bindings between files; and the consistency of every claim with the facts it is
//! derived from, the evaluation figures among them: each against what it must equal (the
//! pinned test split's payload digests and image count, the probe's shape) and, when both
//! evaluations are of one state, against the other's. [`reevaluate`] then evaluates the recorded checkpoints
//! again from the run's stores, where they are present (with the torch engine only).
mod claims;
mod error;
mod install;
pub mod read;
pub mod records;
pub mod reevaluate;
#[cfg(test)]
mod tests;
mod verify;

pub use error::BundleError;
pub use install::{audit_self_digest, install, InstalledBundle};
pub use records::*;
pub use verify::{verify, verify_pinned, BundleSummary, VerifiedBundle};
