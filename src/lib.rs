//! ShardLift: a crash-consistency lab for sharded training state.
//!
//! The core (everything but `trainer`) builds without libtorch: digests, the logical
//! state and its root, the optimizer, the data cursor and ledger, the dataset, the
//! process supervisor, framed IPC, and the checkpoint store with its crash harness.
//! The tch-based training engine sits behind the default `torch` feature.
#![forbid(unsafe_code)]

pub mod adamw;
pub mod bundle;
pub mod canonical;
pub mod dataset;
pub mod defaults;
#[cfg(feature = "torch")]
pub mod demo;
pub mod digest;
#[cfg(feature = "torch")]
pub mod invariants;
pub mod ipc;
pub mod logical;
pub mod process;
pub mod sampling;
pub mod source;
pub mod store;
#[cfg(feature = "torch")]
pub mod trainer;
