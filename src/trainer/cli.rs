//! `shardlift train`, `shardlift bench train` and the hidden `worker` command.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;

use crate::dataset::{self, FashionMnist};
use crate::logical::{Hyperparameters, LogicalState};
use crate::sampling::SampleStream;

use super::coordinator::{CoordinatorSession, SessionOptions};
use super::engine::{self, SplitView};

/// Train Fashion-MNIST for a few steps and print the resulting state digests.
///
/// With `--workers N` the coordinator (this process) runs N worker processes; with
/// `--in-process` the same arithmetic runs here with no workers. Either way the printed
/// `logical_state_root`, `ledger_digest` and `loss` are the same bytes for the same seed.
#[derive(clap::Args, Debug)]
pub struct TrainArgs {
    /// Number of worker processes (1..=12).
    #[arg(
        long,
        conflicts_with = "in_process",
        required_unless_present = "in_process"
    )]
    pub workers: Option<u32>,
    /// Run every micro-batch in this process instead of in workers.
    #[arg(long)]
    pub in_process: bool,
    /// Optimizer steps to take from the seeded initial state.
    #[arg(long, default_value_t = 3)]
    pub steps: u64,
    /// Seed of the initial parameters and the data order.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Dataset cache (created 0700 if missing; acquired on first use).
    #[arg(long, value_name = "DIR")]
    pub cache_directory: Option<PathBuf>,
    /// Take the dataset only from this directory (e.g. /usr/share/datasets/fashion-mnist).
    #[arg(long, value_name = "DIR")]
    pub source_directory: Option<PathBuf>,
    /// Print one JSON object on stdout.
    #[arg(long)]
    pub json: bool,
}

/// Benchmarks (figures, not assertions).
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Step time for W = 1, 3, 4 and in-process, each as a ratio to a plain
    /// single-process tch step (tch's own Adam, one 192-sample batch) measured in the same run.
    Train {
        /// Steps timed per configuration (after one warm-up step).
        #[arg(long, default_value_t = 5)]
        steps: u64,
        #[arg(long, value_name = "DIR")]
        cache_directory: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        source_directory: Option<PathBuf>,
    },
    /// Wall time of a killer-demo run per barrier, as a ratio to the same six training
    /// steps taken by one uninterrupted W4 session without any checkpointing.
    Demo {
        #[arg(long, value_name = "DIR")]
        cache_directory: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        source_directory: Option<PathBuf>,
    },
}

/// Internal: one worker process.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// The coordinator's Unix socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// This worker's rank.
    #[arg(long)]
    pub rank: u32,
}

/// Loads the verified dataset, acquiring it on first use.
pub fn load_dataset(
    cache_directory: Option<&Path>,
    source_directory: Option<&Path>,
) -> anyhow::Result<FashionMnist> {
    let cache = cache_directory
        .map(Path::to_path_buf)
        .unwrap_or_else(crate::defaults::cache_directory);
    dataset::ensure_and_load(&cache, source_directory)
        .with_context(|| format!("loading Fashion-MNIST from the cache {}", cache.display()))
}

/// The printed result of `train`.
#[derive(Debug, serde::Serialize)]
pub struct TrainReport {
    pub mode: &'static str,
    pub workers: Option<u32>,
    pub seed: u64,
    pub step: u64,
    pub cursor: u64,
    pub logical_state_root: String,
    pub ledger_digest: String,
    /// The last step's loss as FP32 bits (8 hex digits): exact.
    pub loss: String,
    /// The same loss as the shortest decimal that round-trips to those bits.
    pub loss_decimal: String,
    pub worker_exits: usize,
}

pub(crate) fn run_steps(
    workers: Option<u32>,
    steps: u64,
    seed: u64,
    data: &FashionMnist,
    progress: bool,
) -> anyhow::Result<(LogicalState, f32, usize)> {
    let mut state = LogicalState::genesis(Hyperparameters::with_seed(seed));
    let mut stream = SampleStream::new(seed, data.train.count as u32);
    let train = SplitView::from(&data.train);
    let mut loss = f32::NAN;
    match workers {
        None => {
            engine::pin_single_thread();
            for _ in 0..steps {
                let outcome = engine::in_process_step(&mut state, &mut stream, train)?;
                loss = outcome.loss;
                if progress {
                    eprintln!(
                        "train: in-process step {} loss {:.6}",
                        outcome.step, outcome.loss
                    );
                }
            }
            Ok((state, loss, 0))
        }
        Some(workers) => {
            let exe = std::env::current_exe().context("locating the shardlift binary")?;
            let mut session =
                CoordinatorSession::start(SessionOptions::new(exe, workers, "train"), state)?;
            for _ in 0..steps {
                let outcome = session.step(&mut stream, train)?;
                loss = outcome.loss;
                if progress {
                    eprintln!(
                        "train: W{workers} step {} loss {:.6}",
                        outcome.step, outcome.loss
                    );
                }
            }
            let (state, exits) = session.finish()?;
            Ok((state, loss, exits.len()))
        }
    }
}

pub fn run_train(args: TrainArgs) -> anyhow::Result<()> {
    let workers = if args.in_process { None } else { args.workers };
    let data = load_dataset(
        args.cache_directory.as_deref(),
        args.source_directory.as_deref(),
    )?;
    let (state, loss, worker_exits) = run_steps(workers, args.steps, args.seed, &data, true)?;
    let report = TrainReport {
        mode: if workers.is_some() {
            "workers"
        } else {
            "in-process"
        },
        workers,
        seed: args.seed,
        step: state.step,
        cursor: state.cursor,
        logical_state_root: state.logical_state_root().to_hex(),
        ledger_digest: state.ledger_digest.to_hex(),
        loss: format!("{:08x}", loss.to_bits()),
        loss_decimal: format!("{loss:?}"),
        worker_exits,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "step {} cursor {} loss {}\nlogical_state_root {}\nledger_digest {}",
            report.step,
            report.cursor,
            report.loss_decimal,
            report.logical_state_root,
            report.ledger_digest
        );
    }
    Ok(())
}

pub fn run_worker(args: WorkerArgs) -> anyhow::Result<()> {
    super::worker::run(&args.socket, args.rank)
}

pub fn run_bench(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Train {
            steps,
            cache_directory,
            source_directory,
        } => {
            let data = load_dataset(cache_directory.as_deref(), source_directory.as_deref())?;
            super::bench::train(&data, steps.max(1))
        }
        BenchCommand::Demo {
            cache_directory,
            source_directory,
        } => {
            let cache = cache_directory.unwrap_or_else(crate::defaults::cache_directory);
            let data = load_dataset(Some(&cache), source_directory.as_deref())?;
            super::bench::demo(&data, &cache, source_directory.as_deref())
        }
    }
}

/// Times `steps` steps after one warm-up; milliseconds per step.
pub fn time_steps(workers: Option<u32>, steps: u64, data: &FashionMnist) -> anyhow::Result<f64> {
    let started = Instant::now();
    run_steps(workers, 1, 0, data, false)?;
    let warm = started.elapsed();
    let started = Instant::now();
    run_steps(workers, steps + 1, 0, data, false)?;
    let total = started.elapsed().saturating_sub(warm);
    Ok(total.as_secs_f64() * 1000.0 / steps as f64)
}
