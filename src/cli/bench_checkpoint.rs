//! `shardlift bench`: the checkpoint I/O bench (`bench checkpoint`, in every build) beside
//! the training benches (`bench train`, `bench demo`, which need the torch engine).
use std::path::PathBuf;

use anyhow::Context as _;
use shardlift::lab::checkpoint_bench::{self, CheckpointBenchOptions};

/// Benches: checkpoint I/O against the disk and the PyTorch formats, training steps.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Checkpoint save and load against what users would pick, on one state and one file
    /// system in one run: the disk itself (one sequential write + fsync of the same bytes,
    /// and a cold read), ShardLift (publish; recovery and load with every digest verified,
    /// cold), PyTorch DCP save/load (FileSystemWriter, sync_files=True, one process),
    /// torch.save + fsync / torch.load and safetensors save_file + fsync / load_file (in the
    /// hash-locked Python torch: `ci/python-torch` installs it and prints its torchrun), and
    /// resharding W4 -> W3 (ShardLift's offline reshard against a DCP user's load-and-save).
    ///
    /// The state is seeded, shaped like a model's state dict (4 MiB FP32 weights plus the
    /// optimizer's two moments) and made before anything is timed. Every method runs once
    /// per repetition, interleaved; cold loads evict their files with
    /// posix_fadvise(DONTNEED). The report (JSON on stdout, progress on stderr) holds every
    /// figure's samples, median, min and max, and `ratios`, each naming the figures it
    /// divides (publish_over_disk_write, load_over_disk_read, publish_speedup_over_dcp_save,
    /// load_speedup_over_dcp_load, reshard_speedup_over_dcp, reshard_bytes_written, ...),
    /// with the bounds of today's store layout measured in the same run (the state's
    /// objects written and read as plain files; SHA-256 on one and on all cores).
    ///
    /// Needs about three times --state-bytes free under --dir.
    Checkpoint(CheckpointArgs),
    #[cfg(feature = "torch")]
    #[command(flatten)]
    Torch(crate::cli::train::BenchCommand),
}

/// `bench` in a build without the torch engine: `bench checkpoint`, or anything else
/// (taken whole) to say that the other benches need the engine.
#[cfg(not(feature = "torch"))]
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, disable_help_flag = true)]
pub struct TorchFreeBenchArgs {
    #[command(subcommand)]
    command: Option<BenchCommand>,
    /// Whatever followed `bench` when it is not `checkpoint`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    ignored: Vec<String>,
}

/// Runs `bench` in a build without the torch engine.
#[cfg(not(feature = "torch"))]
pub fn run_torch_free(args: TorchFreeBenchArgs) -> anyhow::Result<()> {
    match args.command {
        Some(command) => run(command),
        None => {
            let bench = args.ignored.first().filter(|w| !w.starts_with('-'));
            crate::cli::needs_torch(&bench.map_or("bench".to_owned(), |b| format!("bench {b}")))
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    // The torch-free `bench` disables clap's help flag, which its subcommands inherit, so
    // that `bench --help` says the step-time benches need torch; this one keeps a help.
    /// Print help.
    #[cfg(not(feature = "torch"))]
    #[arg(short = 'h', long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// Bytes of the state (rounded down to whole FP32 weight/moment triples; 4 MiB to 16 GiB).
    #[arg(long, default_value_t = 1 << 30)]
    pub state_bytes: u64,
    /// Repetitions of every method, interleaved (1 to 20); figures are medians.
    #[arg(long, default_value_t = 2)]
    pub repetitions: u32,
    /// Where the scratch directory goes (default: the current directory, so the bench
    /// measures its file system); removed at the end.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub dir: PathBuf,
    /// The hash-locked Python torch's torchrun (`ci/python-torch` prints it); the peers
    /// run in the python beside it. Default: $SHARDLIFT_TORCHRUN.
    #[arg(long, value_name = "PATH")]
    pub torchrun: Option<PathBuf>,
    /// Measure the disk and ShardLift only, without the PyTorch peers (their ratios are
    /// then null, each saying which figure is missing).
    #[arg(long)]
    pub without_python_peers: bool,
    /// How long one peer request may take, in milliseconds.
    #[arg(long, default_value_t = checkpoint_bench::DEFAULT_PEER_TIMEOUT_MS)]
    pub peer_timeout_ms: u64,
    /// The state's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the report as JSON (otherwise one line of the main ratios).
    #[arg(long)]
    pub json: bool,
}

pub fn run(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Checkpoint(args) => run_checkpoint(args),
        #[cfg(feature = "torch")]
        BenchCommand::Torch(command) => crate::cli::train::run_bench(command),
    }
}

fn run_checkpoint(args: CheckpointArgs) -> anyhow::Result<()> {
    let torchrun = args
        .torchrun
        .or_else(|| std::env::var_os("SHARDLIFT_TORCHRUN").map(PathBuf::from));
    let options = CheckpointBenchOptions {
        state_bytes: args.state_bytes,
        repetitions: args.repetitions,
        dir: args.dir,
        torchrun,
        python_peers: !args.without_python_peers,
        peer_timeout_ms: args.peer_timeout_ms,
        seed: args.seed,
    };
    let mut progress = crate::cli::progress::StderrProgress::new();
    let report = checkpoint_bench::run(&options, &mut progress).context("bench checkpoint")?;
    let value = |name: &str| {
        report
            .ratios
            .get(name)
            .and_then(|r| r.value)
            .map_or("n/a".to_owned(), |v| format!("{v:.3}"))
    };
    crate::cli::print_report(args.json, &report, || {
        format!(
            "publish_over_disk_write {} load_over_disk_read {} publish_speedup_over_dcp_save {} \
             load_speedup_over_dcp_load {} reshard_speedup_over_dcp {}",
            value("publish_over_disk_write"),
            value("load_over_disk_read"),
            value("publish_speedup_over_dcp_save"),
            value("load_speedup_over_dcp_load"),
            value("reshard_speedup_over_dcp"),
        )
    })
}
