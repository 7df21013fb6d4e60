//! The torch-free core: exact bytes and the arithmetic that must not depend on topology.
//!
//! Nothing here touches the file system, processes or libtorch. Every other room of the
//! crate builds on these types: digests, canonical JSON, the logical state and its root,
//! the data cursor and ledger, per-chunk AdamW.
pub mod adamw;
pub mod barrier;
pub mod canonical;
pub mod digest;
pub mod error_chain;
pub mod interrupt;
pub mod ledger;
pub mod logical;
pub mod parallel;
pub mod pins;
pub mod progress;
pub mod rng;
pub mod sampling;
pub mod step;
pub mod topology;
