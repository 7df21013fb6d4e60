//! `shardlift killer-demo`.
use std::path::PathBuf;

use anyhow::Context as _;

use shardlift::store::Barrier;

use shardlift::evidence::bundle::RunStatus;
use shardlift::orchestrate::demo::{preflight, run, DemoOptions, DEMO_BARRIERS};

/// Kill a checkpoint publisher with a real SIGKILL at a commit barrier, recover in a fresh
/// process, continue against an uninterrupted reference, reshard W4 → W3, evaluate, and
/// write a verifiable evidence bundle.
///
/// With no options it runs both barriers (commit-after-file-fsync, commit-after-rename)
/// into fresh run directories under /tmp/shardlift-runs and prints one JSON record per
/// run on stdout (one per line). Progress goes to stderr. Each run directory holds the
/// two checkpoint stores and `bundle/` (check it with `shardlift verify-bundle`).
///
/// With --crash-store s3://BUCKET/PREFIX the store the publisher is killed on is a prefix
/// of an S3-compatible object store (endpoint, region and credentials from the `AWS_*`
/// variables; RFC 0001 §9); with both barriers each run uses PREFIX/<barrier>. Every prefix
/// must be empty. The reference store stays in the run directory.
///
/// Exit codes: 0 every run passed; 1 a run failed or could not start (its directory is
/// kept for inspection and is never reused); 2 bad command line.
#[derive(clap::Args, Debug)]
pub struct KillerDemoArgs {
    /// Where the run writes its stores and bundle; must not exist. With both barriers
    /// (no --barrier), each run goes in DIR/<barrier>.
    #[arg(long, value_name = "DIR")]
    pub run_directory: Option<PathBuf>,
    /// Dataset cache (owned by you, not group/world-writable; created 0700 if missing).
    #[arg(long, value_name = "DIR")]
    pub cache_directory: Option<PathBuf>,
    /// Take the dataset only from this directory (e.g. /usr/share/datasets/fashion-mnist).
    #[arg(long, value_name = "DIR")]
    pub source_directory: Option<PathBuf>,
    /// The barrier to kill the publisher at: commit-after-file-fsync or commit-after-rename
    /// (default: both, one run each).
    #[arg(long, value_name = "BARRIER", value_parser = parse_barrier)]
    pub barrier: Option<Barrier>,
    /// Seed of the initial parameters and the data order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A git checkout to bind the run to; it must be clean (no modified, staged or
    /// untracked files) and at --expected-revision.
    #[arg(long, value_name = "PATH", requires = "expected_revision")]
    pub repository: Option<PathBuf>,
    /// The full 40-hex commit id the checkout must be at.
    #[arg(long, value_name = "SHA", requires = "repository")]
    pub expected_revision: Option<String>,
    /// Put the crash store on an object store: an empty `s3://BUCKET/PREFIX` (with both
    /// barriers, PREFIX/<barrier> each).
    #[arg(long, value_name = "s3://BUCKET/PREFIX", value_parser = parse_crash_store)]
    pub crash_store: Option<String>,
}

fn parse_crash_store(text: &str) -> Result<String, String> {
    shardlift::objstore::S3Location::parse(text)
        .map(|location| location.url())
        .map_err(|e| e.to_string())
}

fn parse_barrier(text: &str) -> Result<Barrier, String> {
    let barrier = Barrier::from_name(text).ok_or_else(|| format!("unknown barrier {text:?}"))?;
    if !DEMO_BARRIERS.contains(&barrier) {
        return Err(format!("{text} is a store barrier but not a killer-demo one: use commit-after-file-fsync or commit-after-rename"));
    }
    Ok(barrier)
}

/// The default parent of run directories: short, fresh per invocation.
fn default_runs_directory() -> PathBuf {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    PathBuf::from("/tmp/shardlift-runs").join(format!("run-{seconds}-{}", std::process::id()))
}

pub fn run_killer_demo(args: KillerDemoArgs) -> anyhow::Result<()> {
    let shardlift_exe = std::env::current_exe().context("locating the shardlift binary")?;
    let cache_directory = args
        .cache_directory
        .clone()
        .unwrap_or_else(shardlift::dataset::defaults::cache_directory);
    let source = args.repository.clone().zip(args.expected_revision.clone());
    let plans: Vec<DemoOptions> = match args.barrier {
        Some(barrier) => vec![DemoOptions {
            shardlift_exe: shardlift_exe.clone(),
            run_directory: args
                .run_directory
                .clone()
                .unwrap_or_else(|| default_runs_directory().join(barrier.name())),
            cache_directory: cache_directory.clone(),
            source_directory: args.source_directory.clone(),
            barrier,
            seed: args.seed,
            source: source.clone(),
            crash_store: args.crash_store.clone(),
        }],
        None => {
            let parent = args
                .run_directory
                .clone()
                .unwrap_or_else(default_runs_directory);
            if args.run_directory.is_some() && parent.symlink_metadata().is_ok() {
                anyhow::bail!(shardlift::orchestrate::demo::DemoError::RunDirectoryExists(
                    parent
                ));
            }
            DEMO_BARRIERS
                .iter()
                .map(|&barrier| DemoOptions {
                    shardlift_exe: shardlift_exe.clone(),
                    run_directory: parent.join(barrier.name()),
                    cache_directory: cache_directory.clone(),
                    source_directory: args.source_directory.clone(),
                    barrier,
                    seed: args.seed,
                    source: source.clone(),
                    crash_store: args
                        .crash_store
                        .as_ref()
                        .map(|url| format!("{url}/{}", barrier.name())),
                })
                .collect()
        }
    };
    // Everything that can be refused is refused before any run starts.
    let mut bindings = Vec::new();
    for plan in &plans {
        bindings.push(preflight(plan)?);
    }
    let mut all_passed = true;
    for (plan, binding) in plans.iter().zip(bindings) {
        let record = run(plan, binding).with_context(|| {
            format!(
                "killer-demo at {} failed; its run directory {} is kept for inspection",
                plan.barrier.name(),
                plan.run_directory.display()
            )
        })?;
        all_passed &= record.status == RunStatus::Passed;
        outln!("{}", serde_json::to_string(&record)?);
    }
    if !all_passed {
        anyhow::bail!("a run did not reproduce the expected outcome; see its bundle");
    }
    Ok(())
}
