//! Why an export or import failed. One variant per reason; every import error leaves the
//! store unchanged (import commits only after every check passed).
use std::path::PathBuf;

use crate::core::digest::Digest;

/// Why `store export` or `store import` failed.
#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Durable(#[from] crate::durable::file::DurableError),
    #[error("{path} already exists (export never overwrites)")]
    OutputExists { path: PathBuf },
    #[error("{path} is missing from the export directory")]
    MissingFile { path: PathBuf },
    #[error("{path} is {found} bytes, over the {cap}-byte cap")]
    TooLarge { path: PathBuf, cap: u64, found: u64 },
    #[error("metadata.json is not a valid export record: {0}")]
    BadMetadata(String),
    #[error("{file}: SHA-256 {found}, but metadata.json records {expected}")]
    DigestMismatch {
        file: &'static str,
        expected: Digest,
        found: Digest,
    },
    #[error("{file}: not a valid safetensors file: {message}")]
    BadSafetensors { file: &'static str, message: String },
    #[error("{file}: tensor {name} is {dtype}, only F32 is accepted")]
    WrongDtype {
        file: &'static str,
        name: String,
        dtype: String,
    },
    #[error("{file}: tensor {name} has shape {found:?}, expected {expected:?}")]
    WrongShape {
        file: &'static str,
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("{file}: tensor {name} is missing")]
    MissingTensor { file: &'static str, name: String },
    #[error("{file}: unexpected tensor {name}")]
    ExtraTensor { file: &'static str, name: String },
    #[error("the imported state is malformed: {0}")]
    BadState(#[from] crate::core::logical::LogicalStateError),
    #[error("the imported state's root is {found}, but metadata.json records {expected}")]
    RootMismatch { expected: Digest, found: Digest },
    #[error(transparent)]
    Topology(#[from] crate::core::topology::TopologyError),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl InteropError {
    /// A stable kebab-case name of the variant.
    pub fn kind(&self) -> &'static str {
        match self {
            InteropError::Store(e) => e.kind(),
            InteropError::Durable(_) => "durable",
            InteropError::OutputExists { .. } => "output-exists",
            InteropError::MissingFile { .. } => "missing-file",
            InteropError::TooLarge { .. } => "too-large",
            InteropError::BadMetadata(_) => "bad-metadata",
            InteropError::DigestMismatch { .. } => "digest-mismatch",
            InteropError::BadSafetensors { .. } => "bad-safetensors",
            InteropError::WrongDtype { .. } => "wrong-dtype",
            InteropError::WrongShape { .. } => "wrong-shape",
            InteropError::MissingTensor { .. } => "missing-tensor",
            InteropError::ExtraTensor { .. } => "extra-tensor",
            InteropError::BadState(_) => "bad-state",
            InteropError::RootMismatch { .. } => "root-mismatch",
            InteropError::Topology(_) => "topology",
            InteropError::Io { .. } => "io",
        }
    }
}
