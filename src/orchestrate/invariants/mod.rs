//! The checkpoint-invariant suite: eleven registered scenarios, each producing one
//! observation and one derived result, written as a verifiable evidence artifact.
//!
//! - [`scenarios`]: the registry and scenarios 1–10 (store, engine, child processes);
//! - [`elastic`]: scenario 11 under the real `torch.distributed.run` launcher, and the
//!   hidden `elastic-worker` it starts;
//! - [`provenance`]: the start-up guard over the loaded libtorch;
//! - [`evidence`]: record schemas, the artifact writer and its verifier.
//!
//! See `docs/invariants.md` for what each scenario proves and the claim boundary.
use std::path::PathBuf;

pub mod elastic;
pub mod evidence;
pub mod provenance;
pub mod registry;
pub mod scenarios;

use crate::core::progress::Progress;
use crate::dataset::{Resource, FASHION_MNIST};
use evidence::{BootstrapAttestation, Observation, Provenance, Summary};
use registry::REGISTRY;
use scenarios::Context;

/// How to run the suite.
#[derive(Clone, Debug)]
pub struct SuiteOptions {
    /// The `shardlift` binary the scenarios' children run.
    pub shardlift_exe: PathBuf,
    /// The artifact directory to create (it must not exist).
    pub out: PathBuf,
    /// Scratch directory for stores and worker files (never part of the evidence).
    pub work: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads to use instead of downloading, if any.
    pub source_directory: Option<PathBuf>,
    /// Seed of the genesis state every scenario starts from.
    pub seed: u64,
    /// `None`: scenario 11 is recorded as skipped.
    pub torchrun: Option<PathBuf>,
    /// Deadline of the elastic scenario's launcher, in seconds.
    pub elastic_timeout_s: u64,
}

/// Why the suite could not produce an artifact at all.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The loaded libtorch is not a registered pair (or could not be observed).
    #[error(transparent)]
    Provenance(#[from] provenance::ProvenanceError),
    /// The Fashion-MNIST payloads could not be loaded.
    #[error(transparent)]
    Dataset(#[from] crate::dataset::DatasetError),
    /// A scenario could not be observed at all.
    #[error(transparent)]
    Scenario(#[from] scenarios::ScenarioError),
    /// Writing the artifact failed.
    #[error(transparent)]
    Evidence(#[from] evidence::EvidenceError),
}

/// The provenance record for this process (the guard must have passed).
pub fn provenance_record(
    observed: &provenance::ObservedRuntime,
    pair: &provenance::RegisteredPair,
    launcher: Option<evidence::LauncherProvenance>,
) -> Provenance {
    Provenance {
        schema: evidence::PROVENANCE_SCHEMA.to_owned(),
        version: evidence::EVIDENCE_VERSION,
        shardlift_version: env!("CARGO_PKG_VERSION").to_owned(),
        bootstrap_attestation: BootstrapAttestation {
            tch_version: observed.tch_version.clone(),
            libtorch_version: observed.libtorch_version.clone(),
            libtorch_build: observed.libtorch_build.clone(),
            library: provenance::ATTESTED_LIBRARY.to_owned(),
            library_sha256: observed.libtorch_cpu_sha256,
            registered_pair_matched: true,
            registered_origin: pair.origin.to_owned(),
            method: "sha256 of the libtorch_cpu.so file mapped into this process (from its memory map); \
                     libtorch build version from the version file beside that library; tch version as linked"
                .to_owned(),
        },
        torch_threads: 1,
        dataset_payload_sha256: [
            Resource::TrainImages,
            Resource::TrainLabels,
            Resource::TestImages,
            Resource::TestLabels,
        ]
        .iter()
        .map(|r| FASHION_MNIST.get(*r).payload.sha256)
        .collect(),
        launcher,
    }
}

/// Runs every registered scenario and writes the artifact to `options.out`.
///
/// Each step is a phase of `progress`: the libtorch guard, the dataset, then one phase per
/// scenario, so a log shows which scenario ran how long.
pub fn run_suite(
    options: &SuiteOptions,
    progress: &mut dyn Progress,
) -> Result<Summary, SuiteError> {
    progress.phase(
        "invariants: checking the loaded libtorch against the registered pairs",
        None,
    );
    let (observed, pair) = provenance::guard()?;
    if options.out.symlink_metadata().is_ok() {
        return Err(evidence::EvidenceError::Exists(options.out.display().to_string()).into());
    }
    progress.phase(
        "invariants: loading the pinned Fashion-MNIST payloads",
        None,
    );
    let data = crate::dataset::ensure_and_load(
        &options.cache_directory,
        options.source_directory.as_deref(),
    )?;
    let ctx = Context::new(
        options.shardlift_exe.clone(),
        options.work.clone(),
        &data,
        options.seed,
    )?;
    let mut observations: Vec<Observation> = Vec::new();
    for spec in REGISTRY.iter().take(10) {
        progress.phase(
            &format!("invariants: [{:02}] {}", spec.ordinal, spec.id),
            None,
        );
        observations.push(scenarios::observe_or_fail(spec, &ctx, false));
    }
    let (elastic, launcher) = observe_elastic_scenario(options, &ctx, &observed, progress);
    observations.push(elastic);
    progress.finish();
    let record = provenance_record(&observed, &pair, launcher);
    Ok(evidence::write_artifact(
        &options.out,
        &record,
        &observations,
    )?)
}

/// The eleventh scenario, the real TorchElastic restart: its observation (skipped without
/// `--torchrun`, failed where it could not complete) and the launcher's provenance.
fn observe_elastic_scenario(
    options: &SuiteOptions,
    ctx: &Context<'_>,
    observed: &provenance::ObservedRuntime,
    progress: &mut dyn Progress,
) -> (Observation, Option<evidence::LauncherProvenance>) {
    let elastic_spec = &REGISTRY[10];
    let Some(torchrun) = &options.torchrun else {
        progress.phase(
            &format!(
                "invariants: [11] {} skipped (--skip-elastic)",
                elastic_spec.id
            ),
            None,
        );
        let skipped = Observation::skipped(
            elastic_spec,
            "skipped by request (--skip-elastic): Python torch (ci/python-torch) is installed only in the slow lane",
        );
        return (skipped, None);
    };
    progress.phase(&format!("invariants: [11] {}", elastic_spec.id), None);
    let launcher = elastic::launcher_provenance(torchrun, observed.libtorch_cpu_sha256);
    let launch = elastic::LaunchOptions {
        torchrun: torchrun.clone(),
        cache_directory: options.cache_directory.clone(),
        source_directory: options.source_directory.clone(),
        timeout_s: options.elastic_timeout_s,
        inject: false,
    };
    let observation = match elastic::observe_elastic(ctx, &launch) {
        Ok(observation) => observation,
        Err(error) => {
            eprintln!(
                "invariants: scenario {} could not complete: {error}",
                elastic_spec.id
            );
            let mut obs = Observation::new(elastic_spec);
            obs.check("completed", true, false);
            obs
        }
    };
    (observation, launcher)
}
