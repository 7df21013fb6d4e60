//! `pipeline`: ShardLift's release evidence and test-lane receipts, as a library; the
//! `pipeline` binary (`main.rs`, `cli/`) is a thin clap front end over it.
pub mod git;
pub mod intoto;
pub mod receipt;
pub mod release;
pub mod sshsig;
pub mod visuals;
