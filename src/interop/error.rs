//! Why an export or import failed. One variant per reason; every import error leaves the
//! store unchanged (import commits only after every check passed).
use std::path::PathBuf;

use crate::core::digest::Digest;

/// Why `store export` or `store import` failed.
#[derive(Debug, thiserror::Error)]
pub enum InteropError {
    /// The store refused: the generation did not verify, or the commit failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Writing an export file durably failed.
    #[error(transparent)]
    Durable(#[from] crate::durable::file::DurableError),
    /// The export target exists already.
    #[error("{path} already exists (export never overwrites)")]
    OutputExists {
        /// The target directory.
        path: PathBuf,
    },
    /// The export target ends in `..` or is a root, so it names no directory to create.
    #[error("{path} names no new directory (give a path ending in a new directory's name)")]
    OutputHasNoName {
        /// The target as given.
        path: PathBuf,
    },
    /// One of the three files of an export is absent.
    #[error("{path} is missing from the export directory")]
    MissingFile {
        /// The missing file.
        path: PathBuf,
    },
    /// A file is over its size cap.
    #[error("{path} is {found} bytes, over the {cap}-byte cap")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The cap in bytes.
        cap: u64,
        /// Its size in bytes.
        found: u64,
    },
    /// `metadata.json` does not parse, or has the wrong schema, version or file list.
    #[error("metadata.json is not a valid export record: {0}")]
    BadMetadata(String),
    /// A file's SHA-256 differs from the one `metadata.json` records.
    #[error("{file}: SHA-256 {found}, but metadata.json records {expected}")]
    DigestMismatch {
        /// The file.
        file: &'static str,
        /// The recorded digest.
        expected: Digest,
        /// The digest of its bytes.
        found: Digest,
    },
    /// The `safetensors` crate refused the file (header, offsets, sizes).
    #[error("{file}: not a valid safetensors file: {message}")]
    BadSafetensors {
        /// The file.
        file: &'static str,
        /// The crate's reason.
        message: String,
    },
    /// A tensor is not F32.
    #[error("{file}: tensor {name} is {dtype}, only F32 is accepted")]
    WrongDtype {
        /// The file.
        file: &'static str,
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
    },
    /// A tensor's shape is not the model's.
    #[error("{file}: tensor {name} has shape {found:?}, expected {expected:?}")]
    WrongShape {
        /// The file.
        file: &'static str,
        /// The tensor.
        name: String,
        /// The model's shape.
        expected: Vec<usize>,
        /// The file's shape.
        found: Vec<usize>,
    },
    /// An expected tensor is absent.
    #[error("{file}: tensor {name} is missing")]
    MissingTensor {
        /// The file.
        file: &'static str,
        /// The tensor.
        name: String,
    },
    /// The file holds a tensor the model does not have.
    #[error("{file}: unexpected tensor {name}")]
    ExtraTensor {
        /// The file.
        file: &'static str,
        /// The tensor.
        name: String,
    },
    /// The rebuilt state breaks an invariant (e.g. a zero batch size).
    #[error("the imported state is malformed: {0}")]
    BadState(#[from] crate::core::logical::LogicalStateError),
    /// The rebuilt state's root differs from the one `metadata.json` records.
    #[error("the imported state's root is {found}, but metadata.json records {expected}")]
    RootMismatch {
        /// The recorded root.
        expected: Digest,
        /// The rebuilt state's root.
        found: Digest,
    },
    /// The worker count cannot place the state.
    #[error(transparent)]
    Topology(#[from] crate::core::topology::TopologyError),
    /// Reading or installing a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
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
            InteropError::OutputHasNoName { .. } => "output-has-no-name",
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
