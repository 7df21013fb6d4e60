//! The `shardlift` command: a thin layer over the library.
//!
//! Exit codes: 0 success; 1 the command ran and failed (a violation, a verification
//! failure, a dead peer, bad input); 2 the command line itself was wrong (and, for
//! `resume-test`, input it cannot judge: its help says which), or the command needs the
//! torch engine and this build has none; 128 + N the command was asked to
//! stop by signal N (130 for Ctrl-C, 143 for SIGTERM: its children stopped and reaped,
//! its scratch removed); 141 stdout's reader went away (as a shell reports a writer ended
//! by SIGPIPE; nothing is printed).
// Every stdout line goes through `cli::outln!`, which handles a closed pipe.
#![deny(clippy::print_stdout)]
use clap::{Parser, Subcommand};

mod cli;

/// ShardLift: does sharded training state survive a crash mid-checkpoint, and a restart
/// on fewer workers, bit for bit?
///
/// Machine-readable results go to stdout as JSON; progress goes to stderr.
///
/// Exit status: 0 success; 1 the command ran and failed (a violation, a verification
/// failure, a dead peer, bad input); 2 a wrong command line, or a command that needs the
/// torch engine in a build without it; 130 (143) stopped by Ctrl-C (SIGTERM), children
/// stopped and scratch removed; 141 stdout was closed by its reader.
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
    Store(cli::store::StoreArgs),
    /// Kill a real publisher at every barrier, replay power-loss states and inject
    /// corruption on a synthetic state; report every invariant violation.
    CrashMatrix(cli::crash_matrix::CrashMatrixArgs),
    /// Crash-test another program's checkpoint writer: record its file operations with
    /// ptrace, rebuild every crash state and run your check on each.
    CrashTest(Box<cli::crash_test::CrashTestArgs>),
    /// Internal: waits for the crash-test recorder, then execs the writer (traced).
    #[command(hide = true)]
    CrashTestExec(cli::crash_test::CrashTestExecArgs),
    /// Does your training job resume exactly? Kill it (after a step, at random instants,
    /// inside its checkpoint save), restart it, and compare every step with an
    /// uninterrupted run bit for bit.
    ///
    /// Runs COMMAND (after `--`, no shell) to completion in OUT/reference/work (the
    /// reference), then once per kill in a fresh OUT/<name>/work: its whole process tree
    /// is SIGKILLed right after the probe reports step K, or at a seeded instant (every
    /// second one inside a checkpoint save the reference reported), and the same command
    /// is started again in the same directory, as a scheduler would. Each run gets its
    /// own probe channel in SHARDLIFT_PROBE; the probe (python/shardlift_probe.py) or any
    /// program speaking docs/resume-test.md appends one record per step. Give the
    /// script's path absolute: runs start in their own working directories.
    ///
    /// The verdict is JSON on stdout, progress on stderr.
    ///
    /// Exit codes: 0 every restart resumed right after its last acknowledged save and
    /// every step matched the reference bit for bit; 1 a divergence (the verdict names
    /// the step and the components), lost or skipped steps, or a failed or hung restart;
    /// 2 bad usage or input: no probe records, an undecodable record, a reference run
    /// that fails or hangs (stdout: {"error": KIND, "message": ...}).
    ///
    /// Example: shardlift resume-test --out /tmp/rt --kill-after-step 3
    /// --kill-after-step 5,9 --random-kills 10 --seed 1 -- python /abs/path/train.py
    ResumeTest(cli::resume_test::ResumeTestArgs),
    /// (internal) The agent inside a kernel-mode guest: runs the writer, marks its
    /// acknowledgements on the disk, powers the guest off.
    #[command(hide = true)]
    KernelGuest(cli::crash_test::KernelGuestArgs),
    /// (internal) The store's writer inside a kernel-mode guest (crash-matrix
    /// --file-system), with a writer mutant's faults or none.
    #[command(hide = true)]
    KernelStoreWriter(cli::crash_matrix_kernel::StoreWriterArgs),
    /// (internal) A writer recorded on the host, replayed inside a kernel-mode guest
    /// (crash-test --replay).
    #[command(hide = true)]
    KernelReplay(cli::crash_test::KernelReplayArgs),
    /// Train with W worker processes (or in-process) and print the resulting state digests.
    Train(cli::train::TrainArgs),
    /// Measure checkpoint I/O against the disk and the PyTorch formats (`bench
    /// checkpoint`), and step times (workers vs in-process vs plain tch; needs the torch
    /// engine), and print their ratios.
    #[cfg(feature = "torch")]
    #[command(subcommand)]
    Bench(cli::bench_checkpoint::BenchCommand),
    /// Measure checkpoint I/O against the disk and the PyTorch formats (`bench
    /// checkpoint`); the step-time benches need the torch engine, which this build does
    /// not have.
    #[cfg(not(feature = "torch"))]
    Bench(cli::bench_checkpoint::TorchFreeBenchArgs),
    #[cfg(feature = "torch")]
    /// Kill a checkpoint publisher at a commit barrier, recover, reshard W4 -> W3, and
    /// write a verifiable evidence bundle (the headline run).
    KillerDemo(cli::demo::KillerDemoArgs),
    #[cfg(feature = "torch")]
    /// Run or verify the checkpoint-invariant suite (eleven named scenarios).
    #[command(subcommand)]
    Invariants(cli::invariants::InvariantsCommand),
    #[cfg(not(feature = "torch"))]
    /// Needs the torch engine, which this build does not have.
    KillerDemo(cli::NeedsTorchArgs),
    #[cfg(not(feature = "torch"))]
    /// Needs the torch engine, which this build does not have.
    Invariants(cli::NeedsTorchArgs),
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
    StoreChild(cli::store_child::StoreChildArgs),
}

/// Ctrl-C and SIGTERM ask the command to stop: long waits see the flag and unwind, so
/// children are torn down and reaped and temporary directories removed (exit 128 + the
/// signal). If registration fails the signals keep their default action.
fn stop_on_interrupt() {
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let slot = shardlift::core::interrupt::signal_slot();
        let number = usize::try_from(signal).unwrap_or(usize::MAX);
        if let Err(error) = signal_hook::flag::register_usize(signal, slot, number) {
            eprintln!("shardlift: warning: cannot handle signal {signal}: {error}");
        }
    }
}

fn main() {
    let cli = Cli::parse();
    // Internal children keep the default actions: their supervisor's teardown ends them
    // with SIGTERM, and a handler would turn that into a wait for the SIGKILL.
    let internal = matches!(
        cli.command,
        Command::CrashTestExec(_)
            | Command::KernelGuest(_)
            | Command::KernelStoreWriter(_)
            | Command::KernelReplay(_)
            | Command::Worker(_)
            | Command::StoreChild(_)
    );
    #[cfg(feature = "torch")]
    let internal = internal || matches!(cli.command, Command::ElasticWorker(_));
    if !internal {
        stop_on_interrupt();
    }
    let result = match cli.command {
        Command::Dataset(command) => cli::dataset::run(command),
        Command::Store(args) => {
            cli::objstore::set_request_timeout_ms(args.request_timeout_ms);
            cli::store::run(args.command)
        }
        Command::CrashMatrix(args) => cli::crash_matrix::run_crash_matrix(args),
        Command::CrashTest(args) => cli::crash_test::run(*args),
        Command::CrashTestExec(args) => cli::crash_test::exec_writer(args),
        Command::ResumeTest(args) => cli::resume_test::run(args),
        Command::KernelGuest(args) => cli::crash_test::kernel_guest(args),
        Command::KernelStoreWriter(args) => cli::crash_matrix_kernel::store_writer(args),
        Command::KernelReplay(args) => cli::crash_test::kernel_replay(args),
        Command::Train(args) => cli::train::run_train(args),
        #[cfg(feature = "torch")]
        Command::Bench(command) => cli::bench_checkpoint::run(command),
        #[cfg(not(feature = "torch"))]
        Command::Bench(args) => cli::bench_checkpoint::run_torch_free(args),
        #[cfg(feature = "torch")]
        Command::KillerDemo(args) => cli::demo::run_killer_demo(args),
        #[cfg(feature = "torch")]
        Command::Invariants(command) => cli::invariants::run(command),
        #[cfg(feature = "torch")]
        Command::ElasticWorker(args) => cli::invariants::run_elastic_worker(args),
        #[cfg(not(feature = "torch"))]
        Command::KillerDemo(_) => cli::needs_torch("killer-demo"),
        #[cfg(not(feature = "torch"))]
        Command::Invariants(_) => cli::needs_torch("invariants"),
        Command::VerifyBundle(args) => cli::verify_bundle::run(args),
        Command::Worker(args) => cli::train::run_worker(args),
        Command::StoreChild(args) => cli::store_child::run_child(args),
    };
    if let Err(error) = result {
        if let Some(signal) = shardlift::core::interrupt::requested() {
            eprintln!("shardlift: interrupted by signal {signal}; children stopped and reaped");
            std::process::exit(128 + signal);
        }
        // Each cause once: many errors repeat their source in their own message.
        let chain = shardlift::core::error_chain::error_chain_text(error.as_ref());
        eprintln!("shardlift: error: {chain}");
        std::process::exit(1);
    }
}
