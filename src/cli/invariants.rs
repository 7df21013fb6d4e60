//! `shardlift invariants run|verify` and the hidden `shardlift elastic-worker`.
use std::path::PathBuf;

use anyhow::Context as _;

use shardlift::orchestrate::invariants::evidence::SuiteStatus;

#[derive(clap::Subcommand, Debug)]
pub enum InvariantsCommand {
    /// Run the eleven registered scenarios and write the evidence artifact to --out.
    /// Prints the summary as JSON on stdout; exits 1 if any scenario failed.
    Run(RunArgs),
    /// Verify an artifact without changing it (exact schema version, manifest digests,
    /// and the bindings between summary, observations and results).
    Verify(VerifyArgs),
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The artifact directory to create (must not exist).
    #[arg(long)]
    pub out: PathBuf,
    /// Record scenario 11 (elastic restart under torch.distributed.run) as skipped.
    #[arg(long)]
    pub skip_elastic: bool,
    /// The torchrun of the hash-locked Python torch (printed by ci/python-torch);
    /// defaults to $SHARDLIFT_TORCHRUN.
    #[arg(long)]
    pub torchrun: Option<PathBuf>,
    /// Bound on the whole launcher run, in seconds.
    #[arg(long, default_value_t = shardlift::orchestrate::invariants::elastic::LAUNCHER_TIMEOUT_S)]
    pub elastic_timeout_s: u64,
    #[arg(long, default_value_t = 20_240_611)]
    pub seed: u64,
    /// Dataset cache (default: the per-user cache).
    #[arg(long)]
    pub cache_directory: Option<PathBuf>,
    /// A directory holding the four Fashion-MNIST .gz files, used instead of a download.
    #[arg(long)]
    pub source_directory: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    #[arg(long)]
    pub dir: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct ElasticWorkerArgs {
    #[arg(long)]
    pub store: PathBuf,
    #[arg(long)]
    pub marker_dir: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub cache_directory: PathBuf,
    #[arg(long)]
    pub source_directory: Option<PathBuf>,
    /// Test only: rank 1 perturbs its loaded state on the restarted attempt.
    #[arg(long)]
    pub inject_violation: bool,
}

pub fn run(command: InvariantsCommand) -> anyhow::Result<()> {
    match command {
        InvariantsCommand::Run(args) => run_suite(args),
        InvariantsCommand::Verify(args) => {
            let summary = shardlift::orchestrate::invariants::evidence::verify_artifact(&args.dir)
                .with_context(|| format!("verifying {}", args.dir.display()))?;
            outln!(
                "{}",
                serde_json::json!({
                    "verified": true,
                    "status": summary.status,
                    "passed": summary.passed,
                    "failed": summary.failed,
                    "skipped": summary.skipped,
                    "registered": summary.registered,
                })
            );
            Ok(())
        }
    }
}

fn run_suite(args: RunArgs) -> anyhow::Result<()> {
    let torchrun = if args.skip_elastic {
        None
    } else {
        let from_env = std::env::var_os("SHARDLIFT_TORCHRUN").map(PathBuf::from);
        Some(args.torchrun.clone().or(from_env).context(
            "the elastic scenario needs torch.distributed.run: pass --torchrun \"$(ci/python-torch)\" \
             (or set SHARDLIFT_TORCHRUN), or --skip-elastic to record it as skipped",
        )?)
    };
    let work = tempfile::Builder::new()
        .prefix("shardlift-invariants-")
        .tempdir()
        .context("creating a scratch directory")?;
    let options = shardlift::orchestrate::invariants::SuiteOptions {
        shardlift_exe: std::env::current_exe().context("locating the shardlift binary")?,
        out: args.out.clone(),
        work: work.path().to_path_buf(),
        cache_directory: args
            .cache_directory
            .unwrap_or_else(shardlift::dataset::defaults::cache_directory),
        source_directory: args.source_directory,
        seed: args.seed,
        torchrun,
        elastic_timeout_s: args.elastic_timeout_s,
    };
    let mut progress = super::progress::StderrProgress::new();
    let summary = shardlift::orchestrate::invariants::run_suite(&options, &mut progress)?;
    drop(progress);
    outln!(
        "{}",
        serde_json::json!({
            "status": summary.status,
            "registered": summary.registered,
            "passed": summary.passed,
            "failed": summary.failed,
            "skipped": summary.skipped,
            "out": args.out.display().to_string(),
            "scenarios": summary.entries.iter().map(|e| serde_json::json!({
                "ordinal": e.ordinal, "scenario": e.scenario, "verdict": e.verdict,
            })).collect::<Vec<_>>(),
        })
    );
    if summary.status == SuiteStatus::Failed {
        let kept = work.keep();
        anyhow::bail!(
            "{} of {} scenarios failed (scratch kept at {})",
            summary.failed,
            summary.registered,
            kept.display()
        );
    }
    Ok(())
}

pub fn run_elastic_worker(args: ElasticWorkerArgs) -> anyhow::Result<()> {
    let options = shardlift::orchestrate::invariants::elastic::WorkerOptions {
        store: args.store,
        marker_dir: args.marker_dir,
        out: args.out,
        cache_directory: args.cache_directory,
        source_directory: args.source_directory,
        inject: args.inject_violation,
    };
    let code = shardlift::orchestrate::invariants::elastic::run_worker(&options)?;
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}
