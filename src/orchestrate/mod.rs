//! Orchestration: the killer demo, the invariant suite and the end-to-end benches, built
//! from the rooms below them.
pub mod bench;
pub mod demo;
pub mod invariants;
