//! A check of each recovered crash state that runs in this process instead of the
//! `--check` command (the store's invariants, for `crash-matrix --file-system`).
use std::path::Path;

use crate::lab::kernel::error::KernelError;
use crate::lab::matrix::Violation;

/// A check that runs in this process instead of the `--check` command.
pub trait StateCheck {
    /// Called once the guest has run, with the acknowledgement lines the agent marked.
    fn prepare(&mut self, acks: &[String]) -> Result<(), KernelError>;
    /// The invariants broken by the recovered state `tree`, which follows `acknowledged`
    /// acknowledgements (the writer's exit is the last one).
    fn violations(&self, tree: &Path, acknowledged: usize, context: &str) -> Vec<Violation>;
    /// Whether enough was found: the remaining states are not checked.
    fn done(&self) -> bool {
        false
    }
}
