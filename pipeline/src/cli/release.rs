//! `release-evidence` and `verify-release`: the clap arguments and the printing around
//! [`pipeline::release`].
use std::path::PathBuf;

use anyhow::Context as _;
use pipeline::release::{produce, reproduce, verify};

/// How the killer-demo runs are made (release-evidence and reproduce).
#[derive(clap::Args, Debug)]
pub struct DemoRunArgs {
    /// The shardlift binary to run (default: `shardlift` next to this pipeline binary).
    #[arg(long, value_name = "PATH")]
    pub shardlift: Option<PathBuf>,
    /// Dataset cache passed to killer-demo (default: shardlift's default cache).
    #[arg(long, value_name = "DIR")]
    pub cache_directory: Option<PathBuf>,
    /// Take the dataset only from this directory (passed to killer-demo).
    #[arg(long, value_name = "DIR")]
    pub source_directory: Option<PathBuf>,
}

impl DemoRunArgs {
    /// The shardlift binary, the dataset cache and the source directory to run with.
    fn resolve(self) -> anyhow::Result<(PathBuf, PathBuf, Option<PathBuf>)> {
        let shardlift = match self.shardlift {
            Some(path) => path,
            None => std::env::current_exe()
                .context("locating the pipeline binary")?
                .with_file_name("shardlift"),
        };
        let cache = self
            .cache_directory
            .unwrap_or_else(shardlift::dataset::defaults::cache_directory);
        Ok((shardlift, cache, self.source_directory))
    }
}

/// Bind a clean checkout, run both killer-demo barriers as child processes, verify their
/// bundles, and write release evidence into a new directory.
///
/// Refused before any run: an existing --out, a checkout with modified, staged or
/// untracked files (named), a ci/libtorch.lock at HEAD that differs from the pins, a
/// missing shardlift binary. Prints one JSON record on stdout; progress goes to stderr.
#[derive(clap::Args, Debug)]
pub struct ReleaseEvidenceArgs {
    /// The git checkout to bind (must be clean; ignored files are allowed and listed).
    #[arg(long, value_name = "PATH")]
    pub repository: PathBuf,
    /// The directory to create (must not exist).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Sign SHA256SUMS with this unencrypted OpenSSH Ed25519 private key (SSHSIG,
    /// namespace shardlift-release-evidence-v1), writing SHA256SUMS.sig.
    #[arg(long, value_name = "SSH_PRIVATE_KEY")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub runs: DemoRunArgs,
    /// Include this merged test-lane receipt (ci/test writes target/receipts/merged.json);
    /// it must record HEAD. It is emitted as receipts/merged.json, listed in SHA256SUMS,
    /// and bound by digest in the Statement.
    #[arg(long, value_name = "FILE")]
    pub receipt: Option<PathBuf>,
}

/// Re-check a release-evidence directory: SHA256SUMS, the layout, the signature (with
/// --allowed-signers), path-freeness, both bundles, the Statement, the summary, the
/// transcripts, and the bundled test receipt under the release policy (consistent, clean,
/// every test passed, of the same commit and tree, no carried shard unless
/// --allow-carried). Any change to any file fails with an error naming it.
///
/// With --repository, the recorded commit must be in that repository with the recorded
/// tree, and every recorded source input (runtime-source blob ids, the SHA-256 of
/// Cargo.lock and ci/libtorch.lock) must be what the blobs at that commit give; then it
/// also reports (without failing) whether that checkout's HEAD still has the recorded
/// runtime sources, naming the files that changed. With --shardlift/--pipeline, those
/// binaries' SHA-256 must be the recorded ones.
/// Prints one JSON record on stdout. Exit codes: 0 verified; 1 rejected; 2 bad command line.
#[derive(clap::Args, Debug)]
pub struct VerifyReleaseArgs {
    /// The release-evidence directory.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// An OpenSSH allowed_signers file; when given, SHA256SUMS.sig must verify against it.
    #[arg(long, value_name = "FILE")]
    pub allowed_signers: Option<PathBuf>,
    /// A repository holding the recorded commit: check the commit, its tree and the
    /// recorded source inputs against it, and report staleness against its HEAD.
    #[arg(long, value_name = "PATH")]
    pub repository: Option<PathBuf>,
    /// Admit carried shards in the bundled receipt, each checked against --repository
    /// under the five carry-forward conditions.
    #[arg(long, requires = "repository")]
    pub allow_carried: bool,
    /// The shardlift binary whose SHA-256 must be the one the evidence records.
    #[arg(long, value_name = "BIN")]
    pub shardlift: Option<PathBuf>,
    /// The pipeline binary whose SHA-256 must be the one the evidence records.
    #[arg(long, value_name = "BIN")]
    pub pipeline: Option<PathBuf>,
}

pub fn run_release_evidence(args: ReleaseEvidenceArgs) -> anyhow::Result<()> {
    let (shardlift, cache_directory, source_directory) = args.runs.resolve()?;
    let options = produce::ProduceOptions {
        repository: args.repository,
        out: args.out,
        sign_key: args.sign_key,
        shardlift,
        cache_directory,
        source_directory,
        receipt: args.receipt,
    };
    let produced = produce::produce(&options).context("release-evidence refused or failed")?;
    println!("{}", serde_json::to_string(&produced)?);
    eprintln!(
        "release-evidence: wrote {} files to {} for commit {}",
        produced.files,
        produced.out.display(),
        produced.commit
    );
    Ok(())
}

pub fn run_verify_release(args: VerifyReleaseArgs) -> anyhow::Result<()> {
    let options = verify::VerifyOptions {
        allowed_signers: args.allowed_signers.as_deref(),
        repository: args.repository.as_deref(),
        allow_carried: args.allow_carried,
        shardlift: args.shardlift.as_deref(),
        pipeline: args.pipeline.as_deref(),
    };
    let verified = match verify::verify(&args.dir, &options) {
        Ok(verified) => verified,
        Err(error) => {
            println!(
                "{}",
                serde_json::json!({
                    "status": "rejected",
                    "error_kind": error.kind(),
                    "file": error.file(),
                    "error": error.to_string(),
                })
            );
            return Err(anyhow::Error::new(error)
                .context(format!("release evidence {} rejected", args.dir.display())));
        }
    };
    let staleness = match &args.repository {
        Some(repository) => Some(
            verify::staleness(&verified, repository)
                .context("comparing the recorded runtime sources with the checkout")?,
        ),
        None => None,
    };
    if verified.signature == verify::SignatureCheck::PresentUnchecked {
        eprintln!(
            "verify-release: SHA256SUMS.sig is present but was not checked; pass --allowed-signers to check who signed"
        );
    }
    let mut record = serde_json::to_value(&verified)?;
    record["staleness"] = serde_json::to_value(&staleness)?;
    println!("{record}");
    if let Some(staleness) = staleness {
        if staleness.stale {
            eprintln!(
                "verify-release: STALE: the evidence is of {}; HEAD {} has other runtime sources:",
                staleness.recorded_commit, staleness.current_commit
            );
            for (label, paths) in [
                ("changed", &staleness.changed),
                ("added", &staleness.added),
                ("removed", &staleness.removed),
            ] {
                for path in paths {
                    eprintln!("  {label}: {path}");
                }
            }
        } else {
            eprintln!(
                "verify-release: current: HEAD {} has the runtime sources the evidence recorded (of {})",
                staleness.current_commit, staleness.recorded_commit
            );
        }
    }
    Ok(())
}

/// Rerun what release evidence records and compare: verify the evidence against the
/// repository (as verify-release --repository does), refuse a machine whose CPU kernel
/// path is not the recorded one (error kind other-kernel-path: libtorch computes other
/// bits there, so nothing is rerun), refuse a checkout whose HEAD has
/// other runtime sources than the recorded ones (naming them; the shardlift binary run is
/// built from it), rerun both killer-demo barriers exactly as release-evidence does, bound
/// to a fresh clone of the repository at the recorded commit in a scratch directory (your
/// checkout is not touched), and compare both bundles and both transcripts byte for byte
/// with the recorded ones, naming the first file that differs. The Statement, summary and
/// SHA256SUMS also bind binary digests and are not compared.
/// Prints one JSON record on stdout; progress on stderr. Exit codes: 0 reproduced; 1 not.
#[derive(clap::Args, Debug)]
pub struct ReproduceArgs {
    /// The release-evidence directory to reproduce.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// A repository holding the recorded commit, whose HEAD has the recorded runtime sources.
    #[arg(long, value_name = "PATH")]
    pub repository: PathBuf,
    #[command(flatten)]
    pub runs: DemoRunArgs,
}

pub fn run_reproduce(args: ReproduceArgs) -> anyhow::Result<()> {
    let (shardlift, cache_directory, source_directory) = args.runs.resolve()?;
    let options = reproduce::ReproduceOptions {
        dir: args.dir.clone(),
        repository: args.repository,
        shardlift,
        cache_directory,
        source_directory,
    };
    match reproduce::reproduce(&options) {
        Ok(reproduced) => {
            println!("{}", serde_json::to_string(&reproduced)?);
            eprintln!(
                "reproduce: {} files identical to the rerun from {}",
                reproduced.identical.len(),
                reproduced.rerun_commit
            );
            Ok(())
        }
        Err(error) => {
            println!(
                "{}",
                serde_json::json!({
                    "status": "not-reproduced",
                    "error_kind": error.kind(),
                    "file": error.file(),
                    "error": error.to_string(),
                })
            );
            Err(anyhow::Error::new(error).context(format!(
                "release evidence {} not reproduced",
                args.dir.display()
            )))
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ReleaseAssetsArgs {
    /// The repository; its checkout must be clean.
    #[arg(long, value_name = "DIR", default_value = ".")]
    repository: PathBuf,
    /// The commit (full id; default: HEAD).
    #[arg(long, value_name = "SHA")]
    commit: Option<String>,
    /// The output directory (must not exist, or be empty).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Also tar `evidence/<dir>` of the commit's tree.
    #[arg(long, value_name = "evidence/DIR")]
    evidence: Option<String>,
    /// Also tar the two release binaries (files named `shardlift` and `pipeline`).
    #[arg(long, value_name = "BIN", num_args = 2)]
    binaries: Vec<PathBuf>,
    /// Sign SHA256SUMS with this OpenSSH private key (writes SHA256SUMS.sig, namespace
    /// shardlift-release-assets-v1).
    #[arg(long, value_name = "KEY")]
    sign_key: Option<PathBuf>,
}

pub fn run_release_assets(args: ReleaseAssetsArgs) -> anyhow::Result<()> {
    use pipeline::release::assets;
    let written = assets::release_assets(&assets::AssetsOptions {
        repository: args.repository,
        commit: args.commit,
        out: args.out.clone(),
        evidence: args.evidence,
        binaries: args.binaries,
        sign_key: args.sign_key,
    })
    .context("release-assets refused or failed")?;
    let files: Vec<serde_json::Value> = written
        .files
        .iter()
        .map(|(name, digest)| serde_json::json!({"name": name, "sha256": digest.to_hex()}))
        .collect();
    println!(
        "{}",
        serde_json::json!({
            "commit": written.commit,
            "files": files,
            "signed": written.signed,
        })
    );
    eprintln!(
        "release-assets: wrote {} assets and SHA256SUMS{} to {}",
        written.files.len(),
        if written.signed { " (signed)" } else { "" },
        args.out.display()
    );
    Ok(())
}
