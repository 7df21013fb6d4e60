//! A store opened for one `shardlift store` subcommand: a directory, or an object store
//! (`--store s3://bucket/prefix`, endpoint, region and credentials from the `AWS_*`
//! variables). Each subcommand is written once over it; a backend adds only what is its
//! own: an object store's location, keys and conditional-create capability in its
//! reports, and its typed failure as JSON on stdout with `--json`.
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;

use shardlift::core::logical::LogicalState;
use shardlift::core::progress::Progress;
use shardlift::core::topology::Topology;
use shardlift::interop::ExportSummary;
use shardlift::objstore::{ObjCommitSummary, ObjStore};
use shardlift::store::barrier::{BarrierHook, NoHooks};
use shardlift::store::location::{Location, S3Location};
use shardlift::store::protocol::Committed;
use shardlift::store::writer::{CommitSummary, SyntheticSpec};
use shardlift::store::{ObjectCheck, RecoveryReport};

use super::objstore::{client_options, fail};

/// An opened store.
pub enum OpenedStore {
    /// A local store directory (opening touches nothing).
    Dir(PathBuf),
    /// An object store, its client open.
    S3 {
        store: Box<ObjStore>,
        location: S3Location,
        /// Whether a failure is also reported as JSON on stdout.
        json: bool,
    },
}

/// A commit as its backend reports it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum CommitReport {
    /// A local store's summary.
    Dir(CommitSummary),
    /// An object store's summary (its keys, PUT counts and capability too).
    S3(ObjCommitSummary),
}

impl CommitReport {
    /// What was committed, on either backend.
    pub fn committed(&self) -> Committed {
        match self {
            CommitReport::Dir(summary) => summary.committed.clone(),
            CommitReport::S3(summary) => summary.commit_summary().committed,
        }
    }
}

impl OpenedStore {
    /// Opens `location`; `writes`: the command may write, so an object store's
    /// conditional-create capability is probed first (RFC 0001 §9.2).
    pub fn open(location: &Location, writes: bool, json: bool) -> anyhow::Result<Self> {
        Ok(match location {
            Location::Dir(dir) => OpenedStore::Dir(dir.clone()),
            Location::S3(location) => OpenedStore::S3 {
                store: Box::new(
                    ObjStore::open_at(location.clone(), client_options(), writes)
                        .map_err(|e| fail(e, json))?,
                ),
                location: location.clone(),
                json,
            },
        })
    }

    /// The fully verified state of `generation` and its topology (RFC 0001 §5, §9.4).
    pub fn load_generation(&self, generation: u64) -> anyhow::Result<(LogicalState, Topology)> {
        match self {
            OpenedStore::Dir(dir) => Ok(shardlift::store::load_generation(dir, generation)?),
            OpenedStore::S3 { store, json, .. } => store
                .load_generation(generation)
                .map_err(|e| fail(e, *json)),
        }
    }

    /// Adds what this backend reports about itself to a command's JSON report.
    pub fn describe(&self, report: &mut serde_json::Value) {
        if let OpenedStore::S3 {
            store, location, ..
        } = self
        {
            report["location"] = serde_json::json!(location.url());
            report["conditional_create"] = serde_json::json!(store.conditional_create());
        }
    }

    /// Reshards `generation` onto `topology` as the next generation (RFC 0001 §7).
    pub fn reshard(
        &self,
        generation: u64,
        topology: Topology,
        objects: ObjectCheck,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<CommitReport> {
        Ok(match self {
            OpenedStore::Dir(dir) => CommitReport::Dir(
                shardlift::store::reshard_reporting(dir, generation, topology, objects, progress)
                    .with_context(|| format!("resharding generation {generation}"))?,
            ),
            OpenedStore::S3 { store, json, .. } => CommitReport::S3(
                store
                    .reshard(generation, topology, objects, &mut NoHooks, progress)
                    .map_err(|e| fail(e, *json))?,
            ),
        })
    }

    /// Publishes `state` on `topology` as the next generation, with the synthetic objects
    /// of `synthetic` if any (their progress to `progress`), reporting each barrier to
    /// `hooks`.
    pub fn publish(
        &self,
        state: &LogicalState,
        topology: Topology,
        synthetic: Option<SyntheticSpec>,
        hooks: &mut dyn BarrierHook,
        progress: &mut dyn Progress,
    ) -> anyhow::Result<CommitReport> {
        Ok(match (self, synthetic) {
            (OpenedStore::Dir(dir), None) => {
                CommitReport::Dir(shardlift::store::publish(dir, state, topology, hooks)?)
            }
            (OpenedStore::Dir(dir), Some(spec)) => CommitReport::Dir(
                shardlift::store::publish_synthetic(dir, state, topology, spec, hooks, progress)?,
            ),
            (OpenedStore::S3 { store, json, .. }, None) => CommitReport::S3(
                store
                    .publish(state, topology, hooks)
                    .map_err(|e| fail(e, *json))?,
            ),
            (OpenedStore::S3 { store, json, .. }, Some(spec)) => CommitReport::S3(
                store
                    .publish_synthetic(state, topology, spec, hooks, progress)
                    .map_err(|e| fail(e, *json))?,
            ),
        })
    }

    /// Says on stderr what an object store's service honours (probed when it opened).
    pub fn announce_capability(&self) {
        if let OpenedStore::S3 {
            store, location, ..
        } = self
        {
            eprintln!(
                "objstore: {location}: conditional create {:?}",
                store.conditional_create()
            );
        }
    }

    /// The read-only recovery scan, and (`repair_latest`, a local store only) LATEST
    /// rewritten to name the selected generation when it does not: the command's JSON
    /// report and the scan.
    pub fn recover(
        &self,
        repair_latest: bool,
    ) -> anyhow::Result<(serde_json::Value, RecoveryReport)> {
        match self {
            OpenedStore::Dir(dir) => {
                let report = shardlift::store::recover(dir)?;
                let repaired = repair_latest && shardlift::store::repair_latest(dir, &report)?;
                let json = serde_json::json!({ "report": report, "latest_repaired": repaired });
                Ok((json, report))
            }
            OpenedStore::S3 { store, json, .. } => {
                anyhow::ensure!(
                    !repair_latest,
                    "--repair-latest is not supported on an object store yet"
                );
                let report = store.recover().map_err(|e| fail(e, *json))?;
                Ok((serde_json::json!({ "report": report }), report.scan))
            }
        }
    }

    /// Verifies `generation` as a loader does and writes its export directory `out`.
    pub fn export(&self, generation: u64, out: &Path) -> anyhow::Result<ExportSummary> {
        match self {
            OpenedStore::Dir(dir) => shardlift::interop::export(dir, generation, out)
                .with_context(|| format!("exporting generation {generation}")),
            OpenedStore::S3 { store, json, .. } => {
                let (state, _, commit_digest) = store
                    .load_generation_record(generation)
                    .map_err(|e| fail(e, *json))?;
                Ok(shardlift::interop::export_state(
                    &state,
                    generation,
                    commit_digest,
                    out,
                )?)
            }
        }
    }
}
