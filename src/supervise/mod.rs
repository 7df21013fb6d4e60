//! Process supervision: typed children in their own process groups, exact reaping, and
//! framed Unix-socket IPC with peer credentials.
pub mod ipc;
pub mod process;
