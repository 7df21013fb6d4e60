//! The `shardlift` command: a thin layer over the library.
//!
//! Exit codes: 0 success; 1 the command ran and failed (a violation, a verification
//! failure, a dead peer, bad input); 2 the command line itself was wrong.
use clap::{Parser, Subcommand};

/// ShardLift: does sharded training state survive a crash mid-checkpoint, and a restart
/// on fewer workers, bit for bit?
///
/// Machine-readable results go to stdout as JSON; progress goes to stderr.
#[derive(Parser, Debug)]
#[command(name = "shardlift", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Fetch and check the pinned Fashion-MNIST resources.
    #[command(subcommand)]
    Dataset(shardlift::dataset::cli::DatasetCommand),
    /// Inspect, recover and reshard a checkpoint store.
    #[command(subcommand)]
    Store(shardlift::store::cli::StoreCommand),
    /// Kill a real publisher at every barrier, replay power-loss states and inject
    /// corruption on a synthetic state; report every invariant violation.
    CrashMatrix(shardlift::store::cli::CrashMatrixArgs),
    #[cfg(feature = "torch")]
    /// Train with W worker processes (or in-process) and print the resulting state digests.
    Train(shardlift::trainer::cli::TrainArgs),
    #[cfg(feature = "torch")]
    /// Measure step times (workers vs in-process vs plain tch) and print their ratios.
    #[command(subcommand)]
    Bench(shardlift::trainer::cli::BenchCommand),
    #[cfg(feature = "torch")]
    /// Kill a checkpoint publisher at a commit barrier, recover, reshard W4 -> W3, and
    /// write a verifiable evidence bundle (the headline run).
    KillerDemo(shardlift::demo::cli::KillerDemoArgs),
    #[cfg(feature = "torch")]
    /// Run or verify the checkpoint-invariant suite (eleven named scenarios).
    #[command(subcommand)]
    Invariants(shardlift::invariants::cli::InvariantsCommand),
    /// Internal: a worker launched by torch.distributed.run for the elastic scenario.
    #[cfg(feature = "torch")]
    #[command(hide = true)]
    ElasticWorker(shardlift::invariants::cli::ElasticWorkerArgs),
    /// Verify an evidence bundle without changing it.
    VerifyBundle(shardlift::bundle::cli::VerifyBundleArgs),
    /// Internal: a training worker process (spawned by the coordinator).
    #[cfg(feature = "torch")]
    #[command(hide = true)]
    Worker(shardlift::trainer::cli::WorkerArgs),
    /// Internal: a checkpoint publisher or recovery child (spawned by the crash harness).
    #[command(hide = true)]
    StoreChild(shardlift::store::cli::StoreChildArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dataset(command) => shardlift::dataset::cli::run(command),
        Command::Store(command) => shardlift::store::cli::run(command),
        Command::CrashMatrix(args) => shardlift::store::cli::run_crash_matrix(args),
        #[cfg(feature = "torch")]
        Command::Train(args) => shardlift::trainer::cli::run_train(args),
        #[cfg(feature = "torch")]
        Command::Bench(command) => shardlift::trainer::cli::run_bench(command),
        #[cfg(feature = "torch")]
        Command::KillerDemo(args) => shardlift::demo::cli::run_killer_demo(args),
        #[cfg(feature = "torch")]
        Command::Invariants(command) => shardlift::invariants::cli::run(command),
        #[cfg(feature = "torch")]
        Command::ElasticWorker(args) => shardlift::invariants::cli::run_elastic_worker(args),
        Command::VerifyBundle(args) => shardlift::bundle::cli::run(args),
        #[cfg(feature = "torch")]
        Command::Worker(args) => shardlift::trainer::cli::run_worker(args),
        Command::StoreChild(args) => shardlift::store::cli::run_child(args),
    };
    if let Err(error) = result {
        eprintln!("shardlift: error: {error:#}");
        std::process::exit(1);
    }
}
