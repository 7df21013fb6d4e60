//! PyTorch interop: a committed generation as safetensors files a PyTorch user can load
//! (`store export`), and safetensors files committed back as a new generation
//! (`store import`), bit for bit.
//!
//! An export directory holds exactly three files:
//! - `model.safetensors`: the MLP's tensors under `nn.Linear` names and shapes
//!   (`fc1.weight [128,784]`, `fc1.bias [128]`, `fc2.weight [10,128]`, `fc2.bias [10]`),
//!   F32 little-endian, exactly the bytes the store holds;
//! - `optimizer.safetensors`: AdamW's moments per parameter (`fc1.weight.exp_avg`,
//!   `fc1.weight.exp_avg_sq`, …), same shapes;
//! - `metadata.json` (canonical JSON): generation, commit digest, step, cursor,
//!   hyper-parameters (the seed among them), logical-state root, ledger digest and the
//!   SHA-256 of each safetensors file.
//!
//! Import checks, in this order, and commits nothing unless all pass: metadata size cap
//! and schema → each file's size cap and SHA-256 against the metadata → the safetensors
//! header and offsets (the `safetensors` crate) → exactly the expected tensor names, F32
//! only, exact shapes → the rebuilt state's invariants → its root against the metadata's
//! (when the metadata records one). Export verifies the generation first and never leaves
//! a partial directory: it writes a temp directory beside the target and renames it.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::core::digest::Digest;
use crate::core::logical::{
    f32_le_bytes, ChunkState, Hyperparameters, LogicalState, PARAMETER_COUNT, PARAMETER_TENSORS,
};
use crate::core::topology::Topology;
use crate::durable::file::{read_capped, write_file, WriteOptions};
use crate::durable::fs::{FileSystem, RealFs};
use crate::store::barrier::NoHooks;
use crate::store::writer::CommitSummary;

pub mod error;

pub use error::InteropError;

/// The model's parameters in an export directory.
pub const MODEL_FILE: &str = "model.safetensors";
/// AdamW's moments in an export directory.
pub const OPTIMIZER_FILE: &str = "optimizer.safetensors";
/// The export's record (canonical JSON).
pub const METADATA_FILE: &str = "metadata.json";

/// Schema name of `metadata.json`.
pub const METADATA_SCHEMA: &str = "shardlift-safetensors-export";
/// The one version of `metadata.json` this build reads and writes.
pub const METADATA_VERSION: u32 = 1;

/// Caps on what import reads.
const MAX_METADATA_BYTES: u64 = 64 * 1024;
const MAX_SAFETENSORS_BYTES: u64 = 64 * 1024 * 1024;

/// `metadata.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportMetadata {
    /// [`METADATA_SCHEMA`].
    pub schema: String,
    /// [`METADATA_VERSION`].
    pub version: u32,
    /// The generation exported (absent in a state written outside ShardLift).
    pub generation: Option<u64>,
    /// The digest of the commit record it came from.
    pub commit_digest: Option<Digest>,
    /// Optimizer steps taken (AdamW's `t`).
    pub step: u64,
    /// The data cursor: the next unconsumed sample position.
    pub cursor: u64,
    /// The training hyper-parameters, seed included.
    pub hyperparameters: Hyperparameters,
    /// Checked against the imported state when present.
    pub logical_state_root: Option<Digest>,
    /// The data ledger's running digest.
    pub ledger_digest: Digest,
    /// SHA-256 of `model.safetensors` and `optimizer.safetensors`.
    pub files: BTreeMap<String, Digest>,
}

/// What an export wrote.
#[derive(Clone, Debug, Serialize)]
pub struct ExportSummary {
    /// What `metadata.json` holds.
    pub metadata: ExportMetadata,
    /// The export directory.
    pub directory: PathBuf,
}

/// What an import committed: the commit as its store reports it (a local store's
/// [`CommitSummary`] unless said otherwise).
#[derive(Clone, Debug, Serialize)]
pub struct ImportSummary<C = CommitSummary> {
    /// The new generation's commit.
    pub commit: C,
    /// The imported state's logical-state root.
    pub imported_root: Digest,
}

/// PyTorch's shape of tensor `index` of [`PARAMETER_TENSORS`] (biases are vectors).
fn torch_shape(index: usize) -> Vec<usize> {
    let (_, [rows, columns]) = PARAMETER_TENSORS[index];
    if columns == 1 {
        vec![rows]
    } else {
        vec![rows, columns]
    }
}

/// The flat vector split per tensor: (name, shape, values).
fn split_flat(flat: &[f32]) -> Vec<(&'static str, Vec<usize>, &[f32])> {
    let mut offset = 0;
    PARAMETER_TENSORS
        .iter()
        .enumerate()
        .map(|(index, (name, [rows, columns]))| {
            let len = rows * columns;
            let values = &flat[offset..offset + len];
            offset += len;
            (*name, torch_shape(index), values)
        })
        .collect()
}

/// The three flat vectors (parameters, exp_avg, exp_avg_sq) of a state, in chunk order.
fn flat_slots(state: &LogicalState) -> [Vec<f32>; 3] {
    let mut out = [Vec::new(), Vec::new(), Vec::new()];
    for chunk in state.chunks() {
        out[0].extend_from_slice(chunk.parameters());
        out[1].extend_from_slice(chunk.exp_avg());
        out[2].extend_from_slice(chunk.exp_avg_sq());
    }
    out
}

fn safetensors_bytes(
    tensors: &[(String, Vec<usize>, Vec<u8>)],
    file: &'static str,
) -> Result<Vec<u8>, InteropError> {
    let bad = |e: safetensors::SafeTensorError| InteropError::BadSafetensors {
        file,
        message: e.to_string(),
    };
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), bytes)
                .map(|view| (name.clone(), view))
                .map_err(bad)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let format = std::collections::HashMap::from([("format".to_owned(), "pt".to_owned())]);
    safetensors::tensor::serialize(views, Some(format)).map_err(bad)
}

/// The model and optimizer files of a state.
fn encode_state(state: &LogicalState) -> Result<(Vec<u8>, Vec<u8>), InteropError> {
    let [parameters, exp_avg, exp_avg_sq] = flat_slots(state);
    let mut model = Vec::new();
    for (name, shape, values) in split_flat(&parameters) {
        model.push((name.to_owned(), shape, f32_le_bytes(values)));
    }
    let mut optimizer = Vec::new();
    for (slot, flat) in [("exp_avg", &exp_avg), ("exp_avg_sq", &exp_avg_sq)] {
        for (name, shape, values) in split_flat(flat) {
            optimizer.push((format!("{name}.{slot}"), shape, f32_le_bytes(values)));
        }
    }
    Ok((
        safetensors_bytes(&model, MODEL_FILE)?,
        safetensors_bytes(&optimizer, OPTIMIZER_FILE)?,
    ))
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> InteropError {
    let context = context.into();
    move |source| InteropError::Io { context, source }
}

/// Verifies `generation` of `store_dir` and writes its export directory `out`.
pub fn export(
    store_dir: &Path,
    generation: u64,
    out: &Path,
) -> Result<ExportSummary, InteropError> {
    check_output(out)?;
    let verified = crate::store::recovery::verify_generation(&RealFs, store_dir, generation)?;
    let Some(state) = verified.state else {
        return Err(crate::store::StoreError::GenerationNotFound {
            path: store_dir.to_owned(),
            generation,
        }
        .into());
    };
    export_state(&state, generation, verified.commit_digest, out)
}

/// Refuses an output path with no name to install under, or one that exists (checked
/// before any generation is loaded, and again when the export is written).
pub fn check_output(out: &Path) -> Result<(&Path, &std::ffi::OsStr), InteropError> {
    let (Some(parent), Some(name)) = (out.parent(), out.file_name()) else {
        return Err(InteropError::OutputHasNoName {
            path: out.to_owned(),
        });
    };
    if out.exists() {
        return Err(InteropError::OutputExists {
            path: out.to_owned(),
        });
    }
    Ok((parent, name))
}

/// Writes the export directory `out` of a state the caller has verified as
/// `generation` with commit record `commit_digest` (any backend's loader).
pub fn export_state(
    state: &LogicalState,
    generation: u64,
    commit_digest: Digest,
    out: &Path,
) -> Result<ExportSummary, InteropError> {
    let (parent, name) = check_output(out)?;
    let (model, optimizer) = encode_state(state)?;
    let metadata = ExportMetadata {
        schema: METADATA_SCHEMA.to_owned(),
        version: METADATA_VERSION,
        generation: Some(generation),
        commit_digest: Some(commit_digest),
        step: state.step(),
        cursor: state.cursor(),
        hyperparameters: *state.hyperparameters(),
        logical_state_root: Some(state.logical_state_root()),
        ledger_digest: state.ledger_digest(),
        files: BTreeMap::from([
            (MODEL_FILE.to_owned(), Digest::of(&model)),
            (OPTIMIZER_FILE.to_owned(), Digest::of(&optimizer)),
        ]),
    };
    let metadata_bytes = serde_json_canonicalizer::to_vec(&metadata)
        .map_err(|e| InteropError::BadMetadata(e.to_string()))?;
    let parent = if parent.as_os_str().is_empty() {
        Path::new(".")
    } else {
        parent
    };
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".export-{}", std::process::id()));
    let temp = parent.join(temp_name);
    let written = (|| {
        std::fs::create_dir(&temp).map_err(io("creating the export's temp directory"))?;
        for (file, bytes) in [
            (MODEL_FILE, &model),
            (OPTIMIZER_FILE, &optimizer),
            (METADATA_FILE, &metadata_bytes),
        ] {
            write_file(&temp.join(file), bytes, WriteOptions::IMMUTABLE)?;
        }
        RealFs
            .rename_noreplace(&temp, out)
            .map_err(io("installing the export directory"))?;
        RealFs
            .fsync_dir(parent)
            .map_err(io("syncing the export's parent"))
    })();
    if let Err(error) = written {
        let _ = std::fs::remove_dir_all(&temp);
        return Err(error);
    }
    Ok(ExportSummary {
        metadata,
        directory: out.to_owned(),
    })
}

/// Reads an export directory, checks it (see the module docs) and rebuilds the state.
pub fn read_export(dir: &Path) -> Result<(LogicalState, ExportMetadata), InteropError> {
    let metadata_bytes = read_file(dir, METADATA_FILE, MAX_METADATA_BYTES)?;
    let metadata: ExportMetadata = serde_json::from_slice(&metadata_bytes)
        .map_err(|e| InteropError::BadMetadata(e.to_string()))?;
    if metadata.schema != METADATA_SCHEMA || metadata.version != METADATA_VERSION {
        return Err(InteropError::BadMetadata(format!(
            "schema {} version {}, expected {METADATA_SCHEMA} version {METADATA_VERSION}",
            metadata.schema, metadata.version
        )));
    }
    let expected_files = [MODEL_FILE, OPTIMIZER_FILE];
    if metadata.files.len() != expected_files.len()
        || expected_files
            .iter()
            .any(|f| !metadata.files.contains_key(*f))
    {
        return Err(InteropError::BadMetadata(format!(
            "files must name exactly {MODEL_FILE} and {OPTIMIZER_FILE}"
        )));
    }
    let model = checked_file(dir, MODEL_FILE, &metadata)?;
    let optimizer = checked_file(dir, OPTIMIZER_FILE, &metadata)?;
    let parameters = decode_model(&model)?;
    let [exp_avg, exp_avg_sq] = decode_optimizer(&optimizer)?;
    let hyperparameters = metadata.hyperparameters;
    let chunk_count = if hyperparameters.chunk_elements == 0 {
        0
    } else {
        hyperparameters.chunk_count()
    };
    let chunks = (0..chunk_count)
        .map(|id| {
            let range = hyperparameters.chunk_range(id);
            ChunkState::new(
                id as u32,
                parameters[range.clone()].to_vec(),
                exp_avg[range.clone()].to_vec(),
                exp_avg_sq[range].to_vec(),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let state = LogicalState::from_parts(
        hyperparameters,
        metadata.step,
        metadata.cursor,
        metadata.ledger_digest,
        chunks,
    )?;
    if let Some(expected) = metadata.logical_state_root {
        let found = state.logical_state_root();
        if found != expected {
            return Err(InteropError::RootMismatch { expected, found });
        }
    }
    Ok((state, metadata))
}

/// Checks an export directory and commits its state to `store_dir` as a new generation
/// placed on `workers` workers.
pub fn import(store_dir: &Path, from: &Path, workers: u32) -> Result<ImportSummary, InteropError> {
    let topology = Topology::new(workers)?;
    let (state, _) = read_export(from)?;
    let commit = crate::store::publish(store_dir, &state, topology, &mut NoHooks)?;
    Ok(ImportSummary {
        imported_root: state.logical_state_root(),
        commit,
    })
}

fn read_file(dir: &Path, name: &'static str, cap: u64) -> Result<Vec<u8>, InteropError> {
    let path = dir.join(name);
    let meta = match std::fs::metadata(&path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(InteropError::MissingFile { path })
        }
        Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
    };
    if meta.len() > cap {
        return Err(InteropError::TooLarge {
            path,
            cap,
            found: meta.len(),
        });
    }
    Ok(read_capped(&path, cap)?)
}

fn checked_file(
    dir: &Path,
    name: &'static str,
    metadata: &ExportMetadata,
) -> Result<Vec<u8>, InteropError> {
    let bytes = read_file(dir, name, MAX_SAFETENSORS_BYTES)?;
    let found = Digest::of(&bytes);
    let expected = metadata.files[name];
    if found != expected {
        return Err(InteropError::DigestMismatch {
            file: name,
            expected,
            found,
        });
    }
    Ok(bytes)
}

/// The flat parameter vector of a `model.safetensors` file (exact names, F32, shapes).
pub fn decode_model(bytes: &[u8]) -> Result<Vec<f32>, InteropError> {
    let mut tensors = decode(MODEL_FILE, bytes, &[""])?;
    Ok(tensors.remove("").unwrap_or_default())
}

/// The flat `exp_avg` and `exp_avg_sq` vectors of an `optimizer.safetensors` file.
pub fn decode_optimizer(bytes: &[u8]) -> Result<[Vec<f32>; 2], InteropError> {
    let mut tensors = decode(OPTIMIZER_FILE, bytes, &[".exp_avg", ".exp_avg_sq"])?;
    Ok([
        tensors.remove(".exp_avg").unwrap_or_default(),
        tensors.remove(".exp_avg_sq").unwrap_or_default(),
    ])
}

/// Decodes a safetensors file holding, for each suffix, the four parameter tensors named
/// `<parameter><suffix>`; returns each suffix's flat vector in the model's order.
fn decode(
    file: &'static str,
    bytes: &[u8],
    suffixes: &[&str],
) -> Result<BTreeMap<String, Vec<f32>>, InteropError> {
    let tensors =
        safetensors::SafeTensors::deserialize(bytes).map_err(|e| InteropError::BadSafetensors {
            file,
            message: e.to_string(),
        })?;
    let mut expected: Vec<String> = Vec::new();
    for suffix in suffixes {
        for (name, _) in PARAMETER_TENSORS {
            expected.push(format!("{name}{suffix}"));
        }
    }
    let mut present = tensors.names();
    present.sort_unstable();
    for name in present {
        if !expected.iter().any(|e| e == name) {
            return Err(InteropError::ExtraTensor {
                file,
                name: name.to_owned(),
            });
        }
    }
    let mut out = BTreeMap::new();
    for suffix in suffixes {
        let mut flat = Vec::with_capacity(PARAMETER_COUNT);
        for (index, (name, _)) in PARAMETER_TENSORS.iter().enumerate() {
            let full = format!("{name}{suffix}");
            let view = tensors
                .tensor(&full)
                .map_err(|_| InteropError::MissingTensor {
                    file,
                    name: full.clone(),
                })?;
            if view.dtype() != safetensors::Dtype::F32 {
                return Err(InteropError::WrongDtype {
                    file,
                    name: full,
                    dtype: format!("{:?}", view.dtype()),
                });
            }
            let shape = torch_shape(index);
            if view.shape() != shape.as_slice() {
                return Err(InteropError::WrongShape {
                    file,
                    name: full,
                    expected: shape,
                    found: view.shape().to_vec(),
                });
            }
            flat.extend(
                view.data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
            );
        }
        out.insert((*suffix).to_owned(), flat);
    }
    Ok(out)
}
