//! Why a resume test could not be judged: one variant per reason.
use std::path::PathBuf;

use crate::supervise::process::{ExitOutcome, ProcessError};

/// Why `resume-test` could not reach a verdict. Each is bad input or bad usage (exit
/// 2); a restart that fails or diverges is not an error but part of the verdict.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The options contradict each other or the reference run.
    #[error("bad usage: {reason}")]
    Usage {
        /// What is wrong.
        reason: String,
    },
    /// The output directory exists and is not empty.
    #[error("the output directory {} is not empty", path.display())]
    OutputNotEmpty {
        /// The directory.
        path: PathBuf,
    },
    /// The reference run reported no step record: the command never calls the probe
    /// (or `SHARDLIFT_PROBE` does not reach it). Never a pass.
    #[error("the reference run reported no step records: the command never called the probe (is SHARDLIFT_PROBE passed through?)")]
    NoRecords,
    /// A line of a probe channel is not a record of the protocol.
    #[error("probe record {line} of {} does not decode: {reason}", path.display())]
    Undecodable {
        /// The channel file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// Why it does not decode.
        reason: String,
    },
    /// The reference run ended with a non-zero exit or a signal.
    #[error("the reference run failed ({outcome}); its output ends with:\n{output_tail}")]
    ReferenceFailed {
        /// How it ended.
        outcome: ExitOutcome,
        /// The end of its stdout and stderr.
        output_tail: String,
    },
    /// The reference run did not finish within its deadline; its process tree was killed.
    #[error(
        "the reference run did not finish within {timeout_ms} ms (its process tree was killed)"
    )]
    ReferenceDeadline {
        /// The deadline, in milliseconds.
        timeout_ms: u64,
    },
    /// Starting, signalling or reaping the command failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A file or directory of the test could not be made or read.
    #[error("cannot {what} {}: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl ResumeError {
    /// A stable kebab-case name of the variant (the JSON report's `error`).
    pub fn kind(&self) -> &'static str {
        match self {
            ResumeError::Usage { .. } => "usage",
            ResumeError::OutputNotEmpty { .. } => "output-not-empty",
            ResumeError::NoRecords => "no-records",
            ResumeError::Undecodable { .. } => "undecodable-record",
            ResumeError::ReferenceFailed { .. } => "reference-failed",
            ResumeError::ReferenceDeadline { .. } => "reference-deadline",
            ResumeError::Process(_) => "process",
            ResumeError::Io { .. } => "io",
        }
    }

    /// Whether the input is at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ResumeError::Process(_) | ResumeError::Io { .. })
    }

    /// An [`ResumeError::Io`] for `what` at `path`.
    pub(crate) fn io(
        what: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| ResumeError::Io { what, path, source }
    }
}
