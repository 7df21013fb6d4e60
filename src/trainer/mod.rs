//! The tch-based training engine: per-micro-batch gradients, the in-process reference
//! trainer, coordinator sessions over worker processes, and evaluation.
//!
//! See `docs/architecture.md` for why the result cannot depend on the worker count.
pub mod bench;
pub mod cli;
pub mod coordinator;
pub mod engine;
pub mod protocol;
pub mod worker;

pub use coordinator::{CoordinatorSession, SessionError, SessionOptions};
pub use engine::{evaluate, in_process_step, Evaluation, SplitView, StepOutcome};

impl<'a> From<&'a crate::dataset::Split> for SplitView<'a> {
    fn from(split: &'a crate::dataset::Split) -> Self {
        SplitView {
            images: &split.images,
            labels: &split.labels,
            count: split.count,
        }
    }
}
