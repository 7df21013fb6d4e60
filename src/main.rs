//! The `shardlift` command: a thin layer over the library.
//!
//! Exit codes: 0 success; 1 the command ran and failed (a violation, a verification
//! failure, a dead peer, bad input); 2 the command line itself was wrong.
use clap::{Parser, Subcommand};

mod cli;

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
    Dataset(cli::dataset::DatasetCommand),
    /// Inspect, recover and reshard a checkpoint store. `--store` is a directory, or
    /// `s3://BUCKET/PREFIX` for an S3-compatible object store (publish-synthetic,
    /// recover, verify, reshard, export, import; endpoint, region and credentials from
    /// the AWS_* variables; RFC 0001 §9).
    #[command(subcommand)]
    Store(cli::store::StoreCommand),
    /// Kill a real publisher at every barrier, replay power-loss states and inject
    /// corruption on a synthetic state; report every invariant violation.
    CrashMatrix(cli::store::CrashMatrixArgs),
    /// Crash-test another program's checkpoint writer: record its file operations with
    /// ptrace, rebuild every crash state and run your check on each.
    CrashTest(Box<cli::crash_test::CrashTestArgs>),
    /// Internal: waits for the crash-test recorder, then execs the writer (traced).
    #[command(hide = true)]
    CrashTestExec(cli::crash_test::CrashTestExecArgs),
    /// (internal) The agent inside a kernel-mode guest: runs the writer, marks its
    /// acknowledgements on the disk, powers the guest off.
    #[command(hide = true)]
    KernelGuest(cli::crash_test::KernelGuestArgs),
    /// Train with W worker processes (or in-process) and print the resulting state digests.
    Train(cli::train::TrainArgs),
    #[cfg(feature = "torch")]
    /// Measure step times (workers vs in-process vs plain tch) and print their ratios.
    #[command(subcommand)]
    Bench(cli::train::BenchCommand),
    #[cfg(feature = "torch")]
    /// Kill a checkpoint publisher at a commit barrier, recover, reshard W4 -> W3, and
    /// write a verifiable evidence bundle (the headline run).
    KillerDemo(cli::demo::KillerDemoArgs),
    #[cfg(feature = "torch")]
    /// Run or verify the checkpoint-invariant suite (eleven named scenarios).
    #[command(subcommand)]
    Invariants(cli::invariants::InvariantsCommand),
    /// Internal: a worker launched by torch.distributed.run for the elastic scenario.
    #[cfg(feature = "torch")]
    #[command(hide = true)]
    ElasticWorker(cli::invariants::ElasticWorkerArgs),
    /// Verify an evidence bundle without changing it.
    VerifyBundle(cli::verify_bundle::VerifyBundleArgs),
    /// Internal: a training worker process (spawned by the coordinator).
    #[command(hide = true)]
    Worker(cli::train::WorkerArgs),
    /// Internal: a checkpoint publisher or recovery child (spawned by the crash harness).
    #[command(hide = true)]
    StoreChild(cli::store::StoreChildArgs),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dataset(command) => cli::dataset::run(command),
        Command::Store(command) => cli::store::run(command),
        Command::CrashMatrix(args) => cli::store::run_crash_matrix(args),
        Command::CrashTest(args) => cli::crash_test::run(*args),
        Command::CrashTestExec(args) => cli::crash_test::exec_writer(args),
        Command::KernelGuest(args) => cli::crash_test::kernel_guest(args),
        Command::Train(args) => cli::train::run_train(args),
        #[cfg(feature = "torch")]
        Command::Bench(command) => cli::train::run_bench(command),
        #[cfg(feature = "torch")]
        Command::KillerDemo(args) => cli::demo::run_killer_demo(args),
        #[cfg(feature = "torch")]
        Command::Invariants(command) => cli::invariants::run(command),
        #[cfg(feature = "torch")]
        Command::ElasticWorker(args) => cli::invariants::run_elastic_worker(args),
        Command::VerifyBundle(args) => cli::verify_bundle::run(args),
        Command::Worker(args) => cli::train::run_worker(args),
        Command::StoreChild(args) => cli::store::run_child(args),
    };
    if let Err(error) = result {
        eprintln!("shardlift: error: {error:#}");
        std::process::exit(1);
    }
}
