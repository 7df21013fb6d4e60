//! `pipeline`: ShardLift's release evidence, test-lane receipts and evidence visuals, as a library; the
//! `pipeline` binary (`main.rs`, `cli/`) is a thin clap front end over it.
#![warn(missing_docs)]
// Every public item of every module is documented; a new module gets no
// `allow(missing_docs)`.
pub mod git;
pub mod intoto;
pub mod receipt;
pub mod release;
pub mod sshsig;
pub mod visuals;
