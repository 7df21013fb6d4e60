//! Process supervision: typed children (one `ChildSpec`, a typed `Role`) in their own
//! process groups, exact reaping, and framed Unix-socket IPC with peer credentials.
//! `process` says which of `rustix` and `nix` does which job.
pub mod ipc;
pub mod process;
