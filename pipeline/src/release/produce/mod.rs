//! `release-evidence`: bind a clean checkout, run both killer-demo barriers as child
//! processes, verify their bundles, and emit the evidence directory.
//!
//! Order: everything that can be refused (the output path, the checkout, the pins at
//! HEAD, the binaries) is refused before any run. The runs and the bundle copies live in
//! a scratch folder outside the checkout (so the runs' own clean-checkout checks still see
//! a clean tree); `--out` is created only after the checkout is re-checked.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use shardlift::core::digest::Digest;
use shardlift::durable::{self, Replace, WriteOptions};
use shardlift::evidence::bundle::BUNDLE_FILES;

use super::error::{io, ReleaseError};
use super::pins::{self, BARRIERS};
use super::scan;
use super::sources::{CommitTree, SourceInputs};
use super::statement::LoadedLibrary;
use super::summary::{
    ReleaseSummary, RunStatus, RunSummary, SourceSummary, SUMMARY_SCHEMA, SUMMARY_VERSION,
};
use super::sums;
use child::{library_name, run_child, tail, ChildCommand, ChildRun};
use provenance::{build_statement, Binaries};
use transcript::{transcript, Normaliser};

mod assemble;
mod child;
use assemble::{assemble, host_needles, install, refuse_host_text, seal};
mod provenance;
mod transcript;

/// A killer-demo run may take this long before it is killed and reported as failed.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// `verify-bundle` is quick; it gets this long.
const VERIFY_DEADLINE: Duration = Duration::from_secs(120);
/// The seed of both runs (killer-demo's default, passed explicitly).
const SEED: u64 = 0;
/// The biggest file read back from a run or a binary digest (libtorch_cpu.so is ~500 MB,
/// hashed by streaming, so this caps only what is held in memory).
const MEMBER_CAP: u64 = 1 << 20;

/// What the caller asked for.
#[derive(Clone, Debug)]
pub struct ProduceOptions {
    /// The clean checkout to bind.
    pub repository: PathBuf,
    /// The evidence directory to write; it must not exist.
    pub out: PathBuf,
    /// The OpenSSH private key to sign `SHA256SUMS` with, if any.
    pub sign_key: Option<PathBuf>,
    /// The `shardlift` binary (built with `torch`) that runs the demo.
    pub shardlift: PathBuf,
    /// The dataset cache the runs use.
    pub cache_directory: PathBuf,
    /// The only dataset source, when given (`--source-directory`).
    pub source_directory: Option<PathBuf>,
    /// The merged test-lane receipt of this revision to include (its commit must be HEAD).
    pub receipt: Option<PathBuf>,
}

/// What was written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Produced {
    /// Always `produced`.
    pub status: &'static str,
    /// The evidence directory.
    pub out: PathBuf,
    /// The commit bound.
    pub commit: String,
    /// Its tree id.
    pub tree: String,
    /// The number of files written, `SHA256SUMS` and its signature included.
    pub files: usize,
    /// Whether `SHA256SUMS.sig` was written.
    pub signed: bool,
}

fn absolute(path: &Path) -> Result<PathBuf, ReleaseError> {
    std::fs::canonicalize(path).map_err(io(path))
}

/// The output directory must not exist yet.
fn refuse_existing_out(out: &Path) -> Result<(), ReleaseError> {
    if out.symlink_metadata().is_ok() {
        return Err(ReleaseError::OutExists {
            path: out.to_owned(),
        });
    }
    Ok(())
}

/// Everything bound from the HEAD tree.
struct SourceFacts {
    commit: String,
    tree: String,
    ignored: Vec<String>,
    inputs: SourceInputs,
}

fn bind_source(repository: &Path) -> Result<SourceFacts, ReleaseError> {
    let binding = shardlift::evidence::source::check_clean_checkout(repository, None)?;
    let head = CommitTree::head(repository)?;
    if head.commit != binding.commit {
        return Err(ReleaseError::CheckoutChanged(format!(
            "HEAD moved from {} to {} while it was being read",
            binding.commit, head.commit
        )));
    }
    let rule: Vec<String> = pins::RUNTIME_SOURCE_RULE
        .iter()
        .map(|s| s.to_string())
        .collect();
    let inputs = SourceInputs::read(&head, rule)?;
    Ok(SourceFacts {
        commit: binding.commit,
        tree: binding.tree,
        ignored: binding.ignored,
        inputs,
    })
}

/// The record `killer-demo` prints (the fields the pipeline checks).
#[derive(serde::Deserialize)]
struct DemoLine {
    status: RunStatus,
    barrier: String,
    audit_sha256: Digest,
}

/// One file of the evidence: its name inside the directory and its bytes.
type Emitted = (String, Vec<u8>);

/// Evidence files are new (never written over) and stay writable by their owner.
const NEW_FILE: WriteOptions = WriteOptions {
    replace: Replace::Never,
    read_only: false,
};

/// Writes `root/name` durably, creating its missing folders durably first.
fn write_file(root: &Path, name: &str, bytes: &[u8]) -> Result<(), ReleaseError> {
    let path = root.join(name);
    if let Some(parent) = path.parent() {
        durable::ensure_dir_all(parent)?;
    }
    durable::write_file(&path, bytes, NEW_FILE)?;
    Ok(())
}

/// Produces the release evidence described in the module docs.
pub fn produce(options: &ProduceOptions) -> Result<Produced, ReleaseError> {
    let checked = preflight(options)?;
    let scratch = Scratch::create(options, &checked)?;
    let runs = match run_barriers(options, &checked, &scratch) {
        Ok(runs) => runs,
        Err(failure) => {
            if failure.keep_scratch {
                // The failed run directory is kept for inspection.
                let _ = scratch.directory.keep();
            }
            return Err(failure.error);
        }
    };
    recheck_after_runs(&checked)?;
    let loaded_libraries = loaded_libraries(&runs.observed_libraries)?;
    let emitted = assemble(&checked, runs, loaded_libraries)?;
    refuse_host_text(&emitted, &host_needles(options, &checked, &scratch))?;
    let sealed = seal(&emitted, options.sign_key.as_deref())?;
    install(&options.out, &emitted, &sealed)?;
    Ok(Produced {
        status: "produced",
        out: options.out.clone(),
        commit: checked.source.commit,
        tree: checked.source.tree,
        files: emitted.len() + 1 + usize::from(sealed.signature.is_some()),
        signed: sealed.signature.is_some(),
    })
}

/// What was checked before any run.
struct Preflight {
    repository: PathBuf,
    source: SourceFacts,
    shardlift: PathBuf,
    shardlift_sha256: Digest,
    pipeline_exe: PathBuf,
    pipeline_sha256: Digest,
    /// The bytes of the receipt to include, checked to record HEAD.
    receipt: Option<Vec<u8>>,
}

/// Refusals, before any run: the output path, the checkout and its pins, the binaries,
/// the signing key, the receipt.
fn preflight(options: &ProduceOptions) -> Result<Preflight, ReleaseError> {
    refuse_existing_out(&options.out)?;
    let repository = absolute(&options.repository)?;
    let source = bind_source(&repository)?;
    let shardlift = shardlift_binary(&options.shardlift)?;
    let shardlift_sha256 = durable::file_sha256(&shardlift)?;
    let pipeline_exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let pipeline_sha256 = durable::file_sha256(&pipeline_exe)?;
    if let Some(key) = &options.sign_key {
        // An unusable key (missing, encrypted, unsupported) is refused before the runs.
        crate::sshsig::sign(key, pins::SIGNATURE_NAMESPACE, b"preflight")
            .map_err(ReleaseError::Sign)?;
    }
    let receipt = match &options.receipt {
        Some(path) => Some(read_receipt_of(path, &source.commit)?),
        None => None,
    };
    Ok(Preflight {
        repository,
        source,
        shardlift,
        shardlift_sha256,
        pipeline_exe,
        pipeline_sha256,
        receipt,
    })
}

fn shardlift_binary(path: &Path) -> Result<PathBuf, ReleaseError> {
    let shardlift = absolute(path).map_err(|_| ReleaseError::Shardlift {
        path: path.to_owned(),
        message: "not found (build it with `cargo build`, or pass --shardlift)".into(),
    })?;
    if !shardlift.is_file() {
        return Err(ReleaseError::Shardlift {
            path: shardlift,
            message: "not a file".into(),
        });
    }
    Ok(shardlift)
}

/// The receipt's bytes; it must record the tests of exactly `commit` and meet the release
/// policy.
fn read_receipt_of(path: &Path, commit: &str) -> Result<Vec<u8>, ReleaseError> {
    let bytes = durable::read_capped(path, 64 << 20)?;
    let decoded =
        crate::receipt::schema::Receipt::decode(&bytes).map_err(|e| ReleaseError::Malformed {
            name: pins::RECEIPT.into(),
            message: e.to_string(),
        })?;
    if decoded.shardlift.commit != commit {
        return Err(ReleaseError::Inconsistent {
            name: pins::RECEIPT.into(),
            claim: format!(
                "the receipt records commit {}, not HEAD {}: run ci/test at HEAD first",
                decoded.shardlift.commit, commit
            ),
        });
    }
    // What verify-release will demand of it (it refuses carried shards by default).
    crate::receipt::verify::check_receipt(
        &decoded,
        &crate::receipt::verify::Policy::release(false),
        None,
    )
    .map_err(|e| ReleaseError::ReceiptRejected(Box::new(e)))?;
    Ok(bytes)
}

/// The scratch folder outside the checkout: runs, child logs and the staged evidence.
struct Scratch {
    directory: tempfile::TempDir,
    path: PathBuf,
    runs: PathBuf,
    logs: PathBuf,
    staging: PathBuf,
    normaliser: Normaliser,
}

impl Scratch {
    fn create(options: &ProduceOptions, checked: &Preflight) -> Result<Scratch, ReleaseError> {
        let directory = tempfile::Builder::new()
            .prefix("shardlift-release-")
            .tempdir()
            .map_err(io(&std::env::temp_dir()))?;
        let path = directory.path().to_owned();
        let runs = path.join("runs");
        let logs = path.join("logs");
        let staging = path.join("evidence");
        for dir in [&runs, &logs, &staging] {
            durable::ensure_dir_all(dir)?;
        }
        let normaliser = Normaliser::new(vec![
            (runs.to_string_lossy().into_owned(), "<runs>"),
            (path.to_string_lossy().into_owned(), "<scratch>"),
            (
                checked.repository.to_string_lossy().into_owned(),
                "<repository>",
            ),
            (
                options.cache_directory.to_string_lossy().into_owned(),
                "<cache-directory>",
            ),
            (
                options
                    .source_directory
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                "<source-directory>",
            ),
            (
                checked.shardlift.to_string_lossy().into_owned(),
                "shardlift",
            ),
        ]);
        Ok(Scratch {
            directory,
            path,
            runs,
            logs,
            staging,
            normaliser,
        })
    }
}

/// Why the runs stopped, and whether the scratch folder is kept for inspection.
struct RunFailure {
    error: ReleaseError,
    keep_scratch: bool,
}

impl RunFailure {
    fn kept(error: ReleaseError) -> Self {
        RunFailure {
            error,
            keep_scratch: true,
        }
    }
}

impl From<ReleaseError> for RunFailure {
    fn from(error: ReleaseError) -> Self {
        RunFailure {
            error,
            keep_scratch: false,
        }
    }
}

/// What both barriers' runs produced.
struct BarrierRuns {
    /// The bundle copies and transcripts, in run order.
    emitted: Vec<Emitted>,
    summaries: Vec<RunSummary>,
    /// The union of the libtorch libraries the killer-demo processes mapped.
    observed_libraries: BTreeSet<PathBuf>,
}

fn run_barriers(
    options: &ProduceOptions,
    checked: &Preflight,
    scratch: &Scratch,
) -> Result<BarrierRuns, RunFailure> {
    let mut runs = BarrierRuns {
        emitted: Vec::new(),
        summaries: Vec::new(),
        observed_libraries: BTreeSet::new(),
    };
    for barrier in BARRIERS {
        let run_directory = scratch.runs.join(barrier);
        let (demo, line) = run_killer_demo(options, checked, scratch, barrier, &run_directory)?;
        runs.observed_libraries
            .extend(demo.libraries.iter().cloned());
        let bundle = run_directory.join("bundle");
        let verified = run_verify_bundle(checked, scratch, barrier, &run_directory, &bundle)?;
        let folder = pins::bundle_folder(barrier);
        let summary = copy_bundle(scratch, barrier, &bundle, &folder, &line, &mut runs.emitted)?;
        runs.summaries.push(summary);
        runs.emitted.push((
            pins::demo_transcript(barrier),
            transcript(&demo, &scratch.normaliser).into_bytes(),
        ));
        runs.emitted.push((
            pins::verify_transcript(barrier),
            transcript(&verified, &scratch.normaliser).into_bytes(),
        ));
    }
    Ok(runs)
}

fn demo_args(
    options: &ProduceOptions,
    checked: &Preflight,
    barrier: &str,
    run_directory: &Path,
) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "killer-demo".into(),
        "--run-directory".into(),
        run_directory.to_string_lossy().into_owned(),
        "--barrier".into(),
        barrier.into(),
        "--seed".into(),
        SEED.to_string(),
        "--repository".into(),
        checked.repository.to_string_lossy().into_owned(),
        "--expected-revision".into(),
        checked.source.commit.clone(),
        "--cache-directory".into(),
        options.cache_directory.to_string_lossy().into_owned(),
    ];
    if let Some(dir) = &options.source_directory {
        args.push("--source-directory".into());
        args.push(dir.to_string_lossy().into_owned());
    }
    args
}

/// Runs killer-demo at `barrier`; it must pass, map libtorch, and print its record.
fn run_killer_demo(
    options: &ProduceOptions,
    checked: &Preflight,
    scratch: &Scratch,
    barrier: &str,
    run_directory: &Path,
) -> Result<(ChildRun, DemoLine), RunFailure> {
    let args = demo_args(options, checked, barrier, run_directory);
    eprintln!("release-evidence: running killer-demo at {barrier}");
    let command = ChildCommand {
        program: &checked.shardlift,
        args: &args,
        label: format!("{barrier}.killer-demo"),
        deadline: RUN_DEADLINE,
        observe_libraries: true,
    };
    let demo = run_child(&command, &scratch.logs)?;
    if !demo.success {
        return Err(RunFailure::kept(ReleaseError::ChildFailed {
            command: "killer-demo",
            barrier: barrier.into(),
            outcome: demo.outcome,
            kept: run_directory.to_owned(),
            stderr_tail: tail(&demo.stderr, 15),
        }));
    }
    if demo.libraries.is_empty() {
        return Err(ReleaseError::LoadedLibraries(format!(
            "no libtorch_cpu.so/libc10.so mapping was seen in the killer-demo process at {barrier}"
        ))
        .into());
    }
    let line: DemoLine =
        serde_json::from_str(demo.stdout.trim()).map_err(|e| ReleaseError::DemoOutput {
            barrier: barrier.into(),
            message: e.to_string(),
        })?;
    if line.status != RunStatus::Passed || line.barrier != barrier {
        return Err(RunFailure::kept(ReleaseError::DemoOutput {
            barrier: barrier.into(),
            message: format!(
                "status {:?} for barrier {:?}",
                line.status.as_str(),
                line.barrier
            ),
        }));
    }
    Ok((demo, line))
}

/// Runs verify-bundle on the run's bundle; it must accept it.
fn run_verify_bundle(
    checked: &Preflight,
    scratch: &Scratch,
    barrier: &str,
    run_directory: &Path,
    bundle: &Path,
) -> Result<ChildRun, RunFailure> {
    let args: Vec<String> = vec![
        "verify-bundle".into(),
        "--bundle-directory".into(),
        bundle.to_string_lossy().into_owned(),
    ];
    let command = ChildCommand {
        program: &checked.shardlift,
        args: &args,
        label: format!("{barrier}.verify-bundle"),
        deadline: VERIFY_DEADLINE,
        observe_libraries: false,
    };
    let verified = run_child(&command, &scratch.logs)?;
    if !verified.success {
        return Err(RunFailure::kept(ReleaseError::ChildFailed {
            command: "verify-bundle",
            barrier: barrier.into(),
            outcome: verified.outcome,
            kept: run_directory.to_owned(),
            stderr_tail: tail(&format!("{}{}", verified.stdout, verified.stderr), 15),
        }));
    }
    Ok(verified)
}

/// Copies the bundle into the staged evidence, verifies the copy, and checks it is the
/// bundle killer-demo reported; returns its run summary.
fn copy_bundle(
    scratch: &Scratch,
    barrier: &str,
    bundle: &Path,
    folder: &str,
    line: &DemoLine,
    emitted: &mut Vec<Emitted>,
) -> Result<RunSummary, ReleaseError> {
    for name in BUNDLE_FILES {
        let bytes = durable::read_capped(&bundle.join(name), MEMBER_CAP)?;
        write_file(&scratch.staging, &format!("{folder}/{name}"), &bytes)?;
        emitted.push((format!("{folder}/{name}"), bytes));
    }
    let copy =
        shardlift::evidence::bundle::verify(&scratch.staging.join(folder)).map_err(|source| {
            ReleaseError::BundleRejected {
                name: folder.to_owned(),
                error: Box::new(source),
            }
        })?;
    if copy.audit_sha256 != line.audit_sha256
        || RunStatus::from(copy.run_status.as_str()) != RunStatus::Passed
    {
        return Err(ReleaseError::DemoOutput {
            barrier: barrier.into(),
            message: "the copied bundle is not the one killer-demo reported".into(),
        });
    }
    Ok(RunSummary::from_bundle(folder, &copy))
}

/// The checkout and the shardlift binary must be the ones bound before the runs (a
/// shared target directory can be rebuilt underneath a long run).
fn recheck_after_runs(checked: &Preflight) -> Result<(), ReleaseError> {
    let source = &checked.source;
    let after = shardlift::evidence::source::check_clean_checkout(
        &checked.repository,
        Some(&source.commit),
    )
    .map_err(|e| ReleaseError::CheckoutChanged(e.to_string()))?;
    if after.tree != source.tree {
        return Err(ReleaseError::CheckoutChanged(format!(
            "the tree moved from {} to {}",
            source.tree, after.tree
        )));
    }
    if durable::file_sha256(&checked.shardlift)? != checked.shardlift_sha256 {
        return Err(ReleaseError::Shardlift {
            path: checked.shardlift.clone(),
            message: "the binary changed while the runs were in progress".into(),
        });
    }
    Ok(())
}

/// Each observed libtorch library, named relative to its wheel prefix, with its SHA-256.
fn loaded_libraries(observed: &BTreeSet<PathBuf>) -> Result<Vec<LoadedLibrary>, ReleaseError> {
    let libtorch_cpu = observed
        .iter()
        .find(|p| p.file_name().is_some_and(|f| f == "libtorch_cpu.so"))
        .ok_or_else(|| ReleaseError::LoadedLibraries("libtorch_cpu.so was not mapped".into()))?;
    let mut loaded = Vec::new();
    for path in observed {
        loaded.push(LoadedLibrary {
            name: library_name(path, libtorch_cpu),
            sha256: durable::file_sha256(path)?.to_hex(),
        });
    }
    loaded.sort();
    Ok(loaded)
}
