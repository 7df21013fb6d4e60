//! Why starting, signalling or waiting for a child failed.

use super::*;

/// Why supervising a child failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The child could not be started (or its output file created).
    #[error("cannot start {role} ({program}): {source}")]
    Spawn {
        /// The part the child was to play.
        role: Role,
        /// The program, as spelt in its spec.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child started but no pidfd could be opened for it; it was killed and reaped.
    #[error("cannot open a pidfd for {role} (pid {pid}): {source}")]
    Pidfd {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child's core dumps could not be turned off; it was killed and reaped.
    #[error("cannot limit the resources of {role} (pid {pid}): {source}")]
    Limit {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Sending a signal through the child's pidfd (or to its group) failed.
    #[error("cannot signal {role} (pid {pid}): {source}")]
    Signal {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Polling or reaping the child failed.
    #[error("waiting for {role} (pid {pid}) failed: {source}")]
    Wait {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child was still running when a wait's deadline passed.
    #[error("{role} did not exit within {timeout_ms} ms")]
    Deadline {
        /// The child's role.
        role: Role,
        /// The deadline that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// This process was asked to stop (Ctrl-C, SIGTERM) while waiting for a child; the
    /// child's owner tears it down as the error unwinds.
    #[error("interrupted by signal {signal} while waiting for {role}")]
    Interrupted {
        /// The child being waited for.
        role: Role,
        /// The signal that asked this process to stop.
        signal: i32,
    },
    /// A `shardlift` child could not set itself up on entry ([`enter_supervised_child`]).
    #[error("a supervised child cannot {what}: {source}")]
    Enter {
        /// What it could not do (e.g. "turn off core dumps").
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}
