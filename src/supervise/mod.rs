//! Process supervision: typed children (one `ChildSpec`, a typed `Role`) in their own
//! process groups, exact reaping, and framed Unix-socket IPC with peer credentials.
//! `process` says which of `rustix` and `nix` does which job; `tree` kills a child with
//! every process it started, including those that left its process group.
pub mod ipc;
pub mod process;
pub mod tree;
