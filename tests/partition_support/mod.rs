//! Support of the partition run (`tests/objectstore_partitions.rs`): hosts and nemesis,
//! workload, history and its checker.
#![allow(dead_code)]
pub mod history;
pub mod nemesis;
pub mod workload;
