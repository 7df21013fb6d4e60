//! The crash lab: process kills, the power-loss model, corruption injection and benches
//! that test the store. The lab depends on the store; the store never depends on the lab.
pub mod bench;
pub mod checkpoint_bench;
pub mod corruption;
pub mod crash_model;
pub mod error;
pub mod external;
pub mod handoff;
pub mod harness;
pub mod kernel;
pub mod kills;
pub mod matrix;
pub mod mutants;
pub mod powerloss;
pub mod recovery_mutants;
pub mod run;
pub mod writer_mutants;

pub use error::LabError;
pub use harness::{
    kill_publisher_at, kill_publisher_at_occurrence, kill_publisher_on, publish_in_child,
    publish_in_child_on, recover_in_child, recover_in_child_on, ChildStore, KillReport, LocalStore,
};
