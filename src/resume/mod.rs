//! `shardlift resume-test`: does a training job resume exactly after a kill? The
//! user's own command runs to completion once (the reference), then once per kill plan:
//! killed with its whole process tree (after a step, or at a seeded instant, some inside
//! its own checkpoint save) and restarted in the same working directory. Every step a
//! run reports through the probe (`python/shardlift_probe.py`, or any program speaking
//! the line protocol of `docs/resume-test.md`) must equal the reference's record of that
//! step bit for bit, and each restart must resume right after the last step it
//! acknowledged as saved.
//!
//! - `channel`: the records and their incremental decoding;
//! - `plan`: when an interrupted run is killed;
//! - `run`: one supervised run;
//! - `verdict`: comparison with the reference, resume points, the probe's overhead;
//! - `suite`: the reference, the sequences and the verdict;
//! - `error`: why a test could not be judged.
pub mod channel;
mod error;
pub mod plan;
pub mod run;
pub mod suite;
pub mod verdict;

pub use error::ResumeError;
pub use suite::{resume_test, ResumeTestConfig, Verdict};
