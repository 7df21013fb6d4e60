//! ShardLift: a crash-consistency lab for sharded training state.
//!
//! The crate is layered; a module may use the ones above it in this list, never below
//! (checked by `tests/fast_layering.rs`, drawn in `docs/architecture.md`):
//!
//! - [`core`]: digests, canonical JSON, the logical state and its root, data cursor and
//!   ledger, per-chunk AdamW — torch-free, no I/O.
//! - [`durable`]: the one file-system seam and durable-file writer.
//! - [`dataset`]: the pinned Fashion-MNIST bytes.
//! - [`store`]: the content-addressed checkpoint store and its commit protocol (RFC 0001).
//! - [`interop`]: generations as safetensors files PyTorch loads, and back.
//! - [`lab`]: the crash lab that tests the store (kills, power loss, corruption).
//! - [`objstore`]: the same store on S3-compatible object storage (RFC 0001 §9).
//! - [`supervise`]: child processes and framed IPC.
//! - [`resume`]: `resume-test`, whether another program's training resumes exactly.
// The torch-only modules are linked only in a build that has them, so the crate docs
// build (with `-D warnings`) with and without the feature.
#![cfg_attr(
    feature = "torch",
    doc = "- [`engine`] (feature `torch`): the tch arithmetic of one micro-batch."
)]
#![cfg_attr(
    not(feature = "torch"),
    doc = "- `engine` (feature `torch`): the tch arithmetic of one micro-batch."
)]
//! - [`trainer`]: coordinator sessions over worker processes, engine injected.
//! - [`evidence`]: bundle records, install and verify, the source binding.
#![cfg_attr(
    feature = "torch",
    doc = "- [`orchestrate`] (feature `torch`): the killer demo, the invariant suite, benches."
)]
#![cfg_attr(
    not(feature = "torch"),
    doc = "- `orchestrate` (feature `torch`): the killer demo, the invariant suite, benches."
)]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

// Every public item of every room is documented; a new room gets no
// `allow(missing_docs)`.
pub mod core;
pub mod dataset;
pub mod durable;
#[cfg(feature = "torch")]
pub mod engine;
pub mod evidence;
pub mod interop;
pub mod lab;
pub mod objstore;
#[cfg(feature = "torch")]
pub mod orchestrate;
pub mod resume;
pub mod store;
pub mod supervise;
pub mod trainer;
