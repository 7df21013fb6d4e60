//! `shardlift train`, `shardlift bench train` and the hidden `worker` command.
use std::path::{Path, PathBuf};

use anyhow::Context as _;

#[cfg(feature = "torch")]
use std::os::unix::process::CommandExt as _;

use shardlift::core::step::SplitView;
use shardlift::dataset::{self, FashionMnist};
#[cfg(feature = "torch")]
use shardlift::supervise::process::{worker_malloc_tunables, MALLOC_TUNABLES_VARIABLE};
use shardlift::trainer::{run_steps, EngineKind, Placement};

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
    /// Gradient engine: `tch` (the model) or `fake` (a torch-free test engine whose
    /// numbers are not a model's; for testing the coordinator without libtorch).
    #[arg(long, default_value = "tch", value_parser = parse_engine)]
    pub engine: EngineKind,
}

fn parse_engine(name: &str) -> Result<EngineKind, String> {
    EngineKind::from_name(name).ok_or_else(|| format!("unknown engine {name:?} (tch, fake)"))
}

/// Benchmarks (figures, not assertions).
#[cfg(feature = "torch")]
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Step time for in-process, W = 1, 3 and 4, each as a ratio to a plain single-process
    /// tch step (tch's own AdamW, one 192-sample batch) measured in the same run: medians
    /// of steps timed one by one after a warm-up, with the measured per-phase split
    /// (forward/backward, IPC, reduction, AdamW) and the CPU every process of a
    /// configuration used per step (`cpu_per_step`: coordinator and workers measured apart;
    /// `floor_step_ms`, that CPU over the cores, is the shortest step these cores allow).
    /// Progress on stderr, the report on stdout.
    ///
    /// Every configuration, the plain tch baseline included, runs with the glibc allocator
    /// settings the workers start with (`GLIBC_TUNABLES`, reported as `glibc_tunables`):
    /// when it is unset, the command re-executes itself once with it set, and then measures
    /// everything again under glibc's defaults (`glibc_defaults`: the same report, from a
    /// second run with `GLIBC_TUNABLES=` in every process). Set the variable yourself and
    /// every process uses yours, in one run.
    Train {
        /// Steps timed one by one per configuration (after the warm-up); figures are medians.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..))]
        steps: u64,
        /// Untimed warm-up steps per configuration.
        #[arg(long, default_value_t = 3)]
        warmup: u64,
        /// Print the report as one JSON object (otherwise a short table).
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "DIR")]
        cache_directory: Option<PathBuf>,
        #[arg(long, value_name = "DIR")]
        source_directory: Option<PathBuf>,
        /// Internal: after this run, run again under glibc's defaults and report both (set
        /// by the re-execution that applies the workers' allocator settings).
        #[arg(long, hide = true)]
        then_glibc_defaults: bool,
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
    /// Gradient engine (`tch` or `fake`).
    #[arg(long, default_value = "tch", value_parser = parse_engine)]
    pub engine: EngineKind,
}

/// Loads the verified dataset, acquiring it on first use.
pub fn load_dataset(
    cache_directory: Option<&Path>,
    source_directory: Option<&Path>,
) -> anyhow::Result<FashionMnist> {
    let cache = cache_directory
        .map(Path::to_path_buf)
        .unwrap_or_else(dataset::defaults::cache_directory);
    dataset::ensure_and_load(&cache, source_directory)
        .with_context(|| format!("loading Fashion-MNIST from the cache {}", cache.display()))
}

/// The printed result of `train`.
#[derive(Debug, serde::Serialize)]
struct TrainReport {
    mode: &'static str,
    engine: &'static str,
    workers: Option<u32>,
    seed: u64,
    step: u64,
    cursor: u64,
    logical_state_root: String,
    ledger_digest: String,
    /// The last step's loss as FP32 bits (8 hex digits): exact.
    loss: String,
    /// The same loss as the shortest decimal that round-trips to those bits.
    loss_decimal: String,
    worker_exits: usize,
}

pub fn run_train(args: TrainArgs) -> anyhow::Result<()> {
    let placement = if args.in_process {
        Placement::InProcess
    } else {
        let workers = args
            .workers
            .context("--workers N or --in-process is required")?;
        let shardlift_exe = std::env::current_exe().context("locating the shardlift binary")?;
        Placement::Workers {
            shardlift_exe,
            workers,
        }
    };
    // Refuse an engine this build lacks before touching the dataset.
    args.engine.instantiate()?;
    let data = load_dataset(
        args.cache_directory.as_deref(),
        args.source_directory.as_deref(),
    )?;
    let run = run_steps(
        args.engine,
        &placement,
        args.steps,
        args.seed,
        SplitView::from(&data.train),
        true,
    )?;
    let workers = match placement {
        Placement::InProcess => None,
        Placement::Workers { workers, .. } => Some(workers),
    };
    let report = TrainReport {
        mode: if workers.is_some() {
            "workers"
        } else {
            "in-process"
        },
        engine: args.engine.name(),
        workers,
        seed: args.seed,
        step: run.state.step(),
        cursor: run.state.cursor(),
        logical_state_root: run.state.logical_state_root().to_hex(),
        ledger_digest: run.state.ledger_digest().to_hex(),
        loss: format!("{:08x}", run.loss.to_bits()),
        loss_decimal: format!("{:?}", run.loss),
        worker_exits: run.worker_exits,
    };
    if args.json {
        outln!("{}", serde_json::to_string(&report)?);
    } else {
        outln!(
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
    let engine = args.engine.instantiate()?;
    Ok(shardlift::trainer::worker::run(
        &args.socket,
        args.rank,
        engine.as_ref(),
    )?)
}

/// The train bench as a short table: median step, ratio, and the W4 split.
#[cfg(feature = "torch")]
fn print_train_bench(report: &serde_json::Value) {
    let ms = |value: &serde_json::Value| value.as_f64().unwrap_or(f64::NAN);
    outln!(
        "plain tch step {:.2} ms (median of {} steps, {} profile)",
        ms(&report["plain_tch_step_ms"]),
        report["steps_timed"],
        report["profile"].as_str().unwrap_or("?"),
    );
    outln!(
        "{:<11} {:>11} {:>7} {:>12} {:>8}",
        "",
        "median step",
        "x plain",
        "cpu per step",
        "cpu floor"
    );
    for row in report["configurations"].as_array().into_iter().flatten() {
        let cpu = &row["cpu_per_step"];
        outln!(
            "{:<11} {:>8.2} ms {:>6.2}x {:>9.2} ms {:>7.2}x",
            row["configuration"].as_str().unwrap_or("?"),
            ms(&row["step_ms"]),
            ms(&row["ratio_to_plain_tch"]),
            ms(&cpu["total_ms"]),
            ms(&cpu["floor_ratio_to_plain_tch"]),
        );
    }
    outln!(
        "cpu floor: the configuration's CPU per step (all its processes) over {} cores, as a multiple of the plain step",
        report["cores"]
    );
    if let Some(phases) = report["w4_phases_ms"].as_object() {
        let split: Vec<String> = phases
            .iter()
            .map(|(name, value)| format!("{name} {:.2}", ms(value)))
            .collect();
        outln!("W4 phases (ms): {}", split.join(", "));
    }
}

/// Runs `command` (a `bench train --json`), its progress on our stderr, and returns its
/// report.
#[cfg(feature = "torch")]
fn bench_train_child(command: &mut std::process::Command) -> anyhow::Result<serde_json::Value> {
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .context("starting bench train under glibc's allocator defaults")?;
    anyhow::ensure!(
        output.status.success(),
        "bench train under glibc's allocator defaults failed ({})",
        output.status
    );
    serde_json::from_slice(&output.stdout)
        .context("reading the report of bench train under glibc's allocator defaults")
}

/// The same `bench train` in a child whose every process runs under glibc's allocator
/// defaults (`GLIBC_TUNABLES=`): its JSON report.
#[cfg(feature = "torch")]
fn glibc_defaults_report(
    exe: &std::path::Path,
    steps: u64,
    warmup: u64,
    cache_directory: Option<&std::path::Path>,
    source_directory: Option<&std::path::Path>,
) -> anyhow::Result<serde_json::Value> {
    let mut again = std::process::Command::new(exe);
    again.args(["bench", "train", "--json"]).args([
        "--steps",
        &steps.to_string(),
        "--warmup",
        &warmup.to_string(),
    ]);
    if let Some(dir) = cache_directory {
        again.arg("--cache-directory").arg(dir);
    }
    if let Some(dir) = source_directory {
        again.arg("--source-directory").arg(dir);
    }
    bench_train_child(again.env(MALLOC_TUNABLES_VARIABLE, ""))
}

#[cfg(feature = "torch")]
pub fn run_bench(command: BenchCommand) -> anyhow::Result<()> {
    match command {
        BenchCommand::Train {
            steps,
            warmup,
            json,
            cache_directory,
            source_directory,
            then_glibc_defaults,
        } => {
            let exe = std::env::current_exe().context("locating the shardlift binary")?;
            if let Some((variable, value)) =
                worker_malloc_tunables(std::env::var_os(MALLOC_TUNABLES_VARIABLE))
            {
                // The workers start with these allocator settings; the plain tch baseline
                // and the in-process engine run here, so this process takes them too,
                // which glibc reads only at start-up: the same command again, same pid.
                let error = std::process::Command::new(&exe)
                    .args(std::env::args_os().skip(1))
                    .arg("--then-glibc-defaults")
                    .env(variable, value)
                    .exec();
                return Err(error)
                    .context("re-running bench train with the workers' allocator settings");
            }
            let data = load_dataset(cache_directory.as_deref(), source_directory.as_deref())?;
            let options = shardlift::orchestrate::bench::TrainBenchOptions {
                warmup_steps: warmup,
                timed_steps: steps,
            };
            let mut progress = crate::cli::progress::StderrProgress::new();
            let mut report =
                shardlift::orchestrate::bench::train(&exe, &data, options, &mut progress)?;
            report["glibc_defaults"] = if then_glibc_defaults {
                glibc_defaults_report(
                    &exe,
                    steps,
                    warmup,
                    cache_directory.as_deref(),
                    source_directory.as_deref(),
                )?
            } else {
                serde_json::Value::Null
            };
            if json {
                outln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print_train_bench(&report);
                if report["glibc_defaults"].is_object() {
                    outln!();
                    outln!("under glibc's allocator defaults (GLIBC_TUNABLES= in every process):");
                    print_train_bench(&report["glibc_defaults"]);
                }
            }
            Ok(())
        }
        BenchCommand::Demo {
            cache_directory,
            source_directory,
        } => {
            let cache = cache_directory.unwrap_or_else(dataset::defaults::cache_directory);
            let data = load_dataset(Some(&cache), source_directory.as_deref())?;
            let exe = std::env::current_exe().context("locating the shardlift binary")?;
            let report = shardlift::orchestrate::bench::demo(
                &exe,
                &data,
                &cache,
                source_directory.as_deref(),
            )?;
            outln!("{}", serde_json::to_string_pretty(&report)?);
            Ok(())
        }
    }
}
