//! ShardLift's side: publish through the store's public API, recover and load with every
//! digest verified, and the offline reshard W4 -> W3.
use std::path::Path;
use std::time::Instant;

use super::disk::{evict_tree, tree_bytes};
use super::error::CheckpointBenchError;
use super::state::TENSOR_ELEMENTS;
use crate::core::logical::{LogicalState, PARAMETER_COUNT};
use crate::core::progress::NoProgress;
use crate::core::topology::Topology;
use crate::store::codec::MAX_SYNTHETIC_OBJECT_BYTES;
use crate::store::layout::synthetic_state;
use crate::store::writer::SyntheticSpec;
use crate::store::{NoHooks, ObjectCheck};

/// What ShardLift publishes for a state of `state_bytes`: the model's state as one chunk
/// (three objects, one per FP32 slot) plus the store's seeded synthetic objects for the
/// rest, each the size of one of the state's tensors ([`OBJECT_BYTES`]), as a
/// content-addressed store of this state dict would hold it.
pub struct ShardliftState {
    /// The model's state.
    pub model: LogicalState,
    /// The synthetic objects.
    pub spec: SyntheticSpec,
}

/// Bytes of each synthetic object: one weight tensor of the benchmarked state (4 MiB).
pub const OBJECT_BYTES: u32 = (TENSOR_ELEMENTS * 4) as u32;
const _: () = assert!(OBJECT_BYTES as u64 <= MAX_SYNTHETIC_OBJECT_BYTES);

impl ShardliftState {
    /// The state for `state_bytes` (more than the model's three objects) seeded by `seed`.
    pub fn new(state_bytes: u64, seed: u64) -> ShardliftState {
        let model = synthetic_state(seed, 0, PARAMETER_COUNT as u32);
        ShardliftState {
            model,
            spec: SyntheticSpec {
                seed,
                object_bytes: OBJECT_BYTES,
                total_bytes: state_bytes.saturating_sub(model_bytes()).max(1),
            },
        }
    }

    /// Objects one publish installs besides the manifest and the commit record.
    pub fn objects(&self) -> u64 {
        3 + self.spec.object_count()
    }
}

/// Bytes of the model's chunk objects (parameters and the two moments, FP32).
pub fn model_bytes() -> u64 {
    PARAMETER_COUNT as u64 * 12
}

/// Publishes `state` on W4 as generation 0 of a new store at `store`; returns the seconds.
pub fn publish(store: &Path, state: &ShardliftState) -> Result<f64, CheckpointBenchError> {
    let started = Instant::now();
    let summary = crate::store::publish_synthetic(
        store,
        &state.model,
        Topology::new(4).map_err(crate::store::StoreError::from)?,
        state.spec,
        &mut NoHooks,
        &mut NoProgress,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    if summary.committed.generation != 0 {
        return Err(CheckpointBenchError::NotVerified(format!(
            "publish into a new store committed generation {}",
            summary.committed.generation
        )));
    }
    Ok(seconds)
}

/// Evicts the store, then times recovery's full scan (every commit record, manifest and
/// object digest verified, no state built); returns the seconds.
pub fn recover_cold(store: &Path) -> Result<f64, CheckpointBenchError> {
    evict_tree(store)?;
    let started = Instant::now();
    let report = crate::store::recover(store)?;
    let seconds = started.elapsed().as_secs_f64();
    let selected = report.selected.as_ref().map(|s| s.generation);
    if !report.rejected.is_empty() || selected != Some(0) {
        return Err(CheckpointBenchError::NotVerified(format!(
            "recovery selected {selected:?} with {} rejected",
            report.rejected.len()
        )));
    }
    Ok(seconds)
}

/// Evicts the store, then times the load of the newest generation
/// ([`crate::store::load_newest`]: the generation recovery selects, every digest verified
/// once, the state rebuilt); returns the seconds.
pub fn load_cold(store: &Path, state: &ShardliftState) -> Result<f64, CheckpointBenchError> {
    evict_tree(store)?;
    let started = Instant::now();
    let newest = crate::store::load_newest(store)?;
    let seconds = started.elapsed().as_secs_f64();
    let Some(loaded) = newest.loaded else {
        return Err(CheckpointBenchError::NotVerified(format!(
            "the load found no valid generation ({} rejected)",
            newest.rejected.len()
        )));
    };
    if loaded.generation != 0
        || !newest.rejected.is_empty()
        || loaded.state.logical_state_root() != state.model.logical_state_root()
        || loaded.topology.workers() != 4
    {
        return Err(CheckpointBenchError::NotVerified(
            "the loaded generation is not the published state".to_owned(),
        ));
    }
    Ok(seconds)
}

/// Evicts the store, then reshards generation 0 to W3 offline (the default source check,
/// RFC 0001 §7); returns the seconds and the bytes the reshard added to the store.
pub fn reshard_w3(store: &Path) -> Result<(f64, u64), CheckpointBenchError> {
    evict_tree(store)?;
    let before = tree_bytes(store)?;
    let started = Instant::now();
    let summary = crate::store::reshard(
        store,
        0,
        Topology::new(3).map_err(crate::store::StoreError::from)?,
        ObjectCheck::Lengths,
    )?;
    let seconds = started.elapsed().as_secs_f64();
    if summary.committed.generation != 1 {
        return Err(CheckpointBenchError::NotVerified(format!(
            "the reshard committed generation {}",
            summary.committed.generation
        )));
    }
    let after = tree_bytes(store)?;
    Ok((seconds, after.saturating_sub(before)))
}
