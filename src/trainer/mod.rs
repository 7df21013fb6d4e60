//! Coordinator sessions over worker processes, torch-free: the gradient engine is injected
//! ([`crate::core::step::GradientEngine`]), so the coordinator, the protocol and the
//! worker loop build and are tested without libtorch (with the fake engine).
//!
//! See `docs/architecture.md` for why the result cannot depend on the worker count.
pub mod coordinator;
pub mod engines;
pub mod protocol;
pub mod run;
pub mod worker;

pub use coordinator::{CoordinatorSession, SessionError, SessionOptions, StepTimings};
pub use engines::{EngineKind, FakeEngine};
pub use run::{run_steps, Placement, TrainError, TrainRun};
