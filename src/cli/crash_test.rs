//! `shardlift crash-test` and its hidden stub `shardlift crash-test-exec`.
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

use anyhow::Context;
use shardlift::lab::external::{self, CheckLimits, CrashTestConfig, ModelLimits, RecordLimits};
use shardlift::lab::kernel::{self, states::StateLimits, FileSystem, KernelConfig};

/// `crash-test` arguments.
///
/// Runs WRITER (after `--`, no shell) in OUT/scratch under ptrace, recording every
/// file-system operation it and its threads and children make there. Rebuilds every
/// crash state a power cut could leave (un-fsynced data lost, short, zeroed or torn;
/// entries durable only after their directory's fsync; renames atomic), writes each into
/// its own directory and runs CHECK there (`sh -c`): exit 0 means "the checkpoint loads
/// and is the old or the new one". The writer's exit, and each stdout line matching
/// `--ack`, is an acknowledgement: CHECK runs with SHARDLIFT_ACKED=<acknowledgements the
/// crash follows>, so it can demand the new checkpoint once the writer claimed it
/// durable. Exits 0 when every state passes, 1 otherwise.
///
/// Example: shardlift crash-test --out /tmp/ct --setup 'python save.py 1'
///   --check 'python load.py' -- python save.py 2
#[derive(clap::Args, Debug)]
pub struct CrashTestArgs {
    /// Output directory (created; must be empty): scratch/, trace.json, failing states
    /// under states/, report.json.
    #[arg(long)]
    pub out: PathBuf,
    /// The loader to run on each crash state (`sh -c`, in the state's directory).
    #[arg(long)]
    pub check: String,
    /// Run first, untraced, in the scratch directory; what it leaves is the durable
    /// starting image (e.g. the previous checkpoint).
    #[arg(long)]
    pub setup: Option<String>,
    /// A regular expression: each line the writer prints on stdout that matches it is
    /// an acknowledgement (its exit always is one); the check sees how many the crash
    /// follows in SHARDLIFT_ACKED.
    #[arg(long, value_name = "REGEX")]
    pub ack: Option<String>,
    /// A path (relative to the scratch directory) the check never reads, such as the
    /// writer's private staging directory: its operations are applied in every state
    /// instead of multiplying states (repeatable).
    #[arg(long, value_name = "PATH")]
    pub unread: Vec<String>,
    /// Where the writer's file system comes from: `model` (ShardLift's persistence
    /// model over a ptrace recording) or `ext4`, `xfs`, `btrfs` (a real file system in a
    /// QEMU guest of the pinned Debian kernel; its block log gives the crash states; ext4
    /// states are recovered by e2fsck on the host, xfs and btrfs states by mounting them
    /// in a recovery guest, which replays their logs; ci/kernel install).
    #[arg(long, default_value = "model")]
    pub file_system: String,
    /// Kernel mode: kill the guest (QEMU's process group) after this long.
    #[arg(long, default_value_t = 180_000)]
    pub guest_timeout_ms: u64,
    /// Kernel mode: seeded subsets of the writes since the last flush, per flush epoch.
    #[arg(long, default_value_t = StateLimits::default().reordered_per_epoch)]
    pub reordered_per_epoch: usize,
    /// Kernel mode: reordered states in all.
    #[arg(long, default_value_t = StateLimits::default().max_reordered)]
    pub max_reordered: usize,
    /// Kernel mode: torn states in all.
    #[arg(long, default_value_t = StateLimits::default().max_torn)]
    pub max_torn: usize,
    /// Kernel mode: the seed of the reordered subsets and tear points.
    #[arg(long, default_value_t = StateLimits::default().seed)]
    pub seed: u64,
    /// Kernel mode: hold every recovered state against the model — the writer is also
    /// recorded on the host, and a state none of the model's crash states is fails the
    /// run, printed whole (a bug in the model).
    #[arg(long)]
    pub hold_model: bool,
    /// Kernel mode, with --hold-model: narrow the model on purpose (no entry operation
    /// persists before a directory fsync covers it), to show the kernel refutes it.
    #[arg(long, requires = "hold_model")]
    pub narrowed_model: bool,
    /// Kernel mode: record the writer on the host (under ptrace, as the model mode does)
    /// and replay its file operations in the guest, in the order they completed, with
    /// the same bytes, instead of running it there. For writers the guest cannot boot,
    /// such as a Python interpreter with torch. Threads are replayed one operation at a
    /// time and fdatasync as fsync; docs/crash-test.md says what else differs.
    #[arg(long)]
    pub replay: bool,
    /// Kernel mode: the pinned kernel's install directory (default: the per-user cache
    /// ci/kernel installs into).
    #[arg(long)]
    pub kernel_dir: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Check at most this many distinct states, spread evenly (the report says how
    /// many were checked, and whether the run was exhaustive).
    #[arg(long, default_value_t = CheckLimits::default().max_states)]
    pub max_states: usize,
    /// Refuse a trace with more distinct crash states than this.
    #[arg(long, default_value_t = ModelLimits::default().max_distinct_states)]
    pub max_distinct_states: usize,
    /// Kill a check (and its process group) after this long.
    #[arg(long, default_value_t = CheckLimits::default().timeout_ms)]
    pub check_timeout_ms: u64,
    /// Kill the writer (and every process it started) after this long.
    #[arg(long, default_value_t = RecordLimits::default().timeout_ms)]
    pub writer_timeout_ms: u64,
    /// Refuse a writer that records more operations than this.
    #[arg(long, default_value_t = RecordLimits::default().max_operations)]
    pub max_operations: usize,
    /// Refuse a writer that writes more bytes than this in the scratch directory.
    #[arg(long, default_value_t = RecordLimits::default().max_written_bytes)]
    pub max_written_bytes: u64,
    /// Checks run at once (default: the number of CPUs).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Keep the directories of passing states too.
    #[arg(long)]
    pub keep_states: bool,
    /// The writer command and its arguments.
    #[arg(last = true, required = true, value_name = "WRITER")]
    pub writer: Vec<OsString>,
}

/// The stub's arguments: the writer's argv.
#[derive(clap::Args, Debug)]
pub struct CrashTestExecArgs {
    #[arg(last = true, required = true)]
    pub argv: Vec<OsString>,
}

pub fn run(args: CrashTestArgs) -> anyhow::Result<()> {
    let file_system: FileSystem = args.file_system.parse().context("crash-test")?;
    if file_system != FileSystem::Model {
        return run_kernel(args, file_system);
    }
    anyhow::ensure!(
        !args.replay,
        "crash-test: --replay replays the writer in a kernel guest; it needs --file-system \
         ext4, xfs or btrfs (the model mode records the writer itself)"
    );
    let stub_exe = std::env::current_exe().context("locating the shardlift executable")?;
    let checks = CheckLimits {
        max_states: args.max_states,
        timeout_ms: args.check_timeout_ms,
        jobs: args.jobs.unwrap_or(CheckLimits::default().jobs).max(1),
        keep_passing: args.keep_states,
        ..CheckLimits::default()
    };
    let config = CrashTestConfig {
        stub_exe,
        out: args.out.clone(),
        writer: args.writer,
        check: args.check,
        setup: args.setup,
        ack: args.ack,
        unread: args.unread,
        record: RecordLimits {
            max_operations: args.max_operations,
            max_written_bytes: args.max_written_bytes,
            timeout_ms: args.writer_timeout_ms,
            ..RecordLimits::default()
        },
        model: ModelLimits {
            max_distinct_states: args.max_distinct_states,
            ..ModelLimits::default()
        },
        checks,
    };
    let report = external::run(&config, &mut |line| eprintln!("crash-test: {line}"))
        .context("crash-test")?;
    finish(
        args.json,
        &report,
        &args.out,
        report.failing_states > 0,
        || {
            let subsets_total = match report.subsets_total {
                Some(total) => total.to_string(),
                None => format!("more than {}", u64::MAX),
            };
            outln!(
                "{} operations traced; {} of {} subsets of pending entry operations enumerated{}; \
             {} distinct crash states, {} checked; {}; {} failing",
                report.trace_operations,
                report.subsets_checked,
                subsets_total,
                if report.sampled { " (sampled)" } else { "" },
                report.states_total,
                report.states,
                if report.exhaustive {
                    "exhaustive"
                } else {
                    "not exhaustive"
                },
                report.failing_states
            );
            for class in &report.failure_classes {
                outln!(
                    "  {} state(s), shortest prefix {} operations (e.g. states/{}): {}",
                    class.states,
                    class.smallest_crash_point,
                    class.example_state,
                    class.message
                );
            }
        },
    )
}

/// Prints `report` as JSON, or the summary `lines` print and the report's path; then exits
/// 1 when any state failed.
fn finish<T: serde::Serialize>(
    json: bool,
    report: &T,
    out: &std::path::Path,
    any_failed: bool,
    lines: impl FnOnce(),
) -> anyhow::Result<()> {
    if json {
        outln!("{}", serde_json::to_string_pretty(report)?);
    } else {
        lines();
        outln!("report: {}", out.join("report.json").display());
    }
    if any_failed {
        std::process::exit(1);
    }
    Ok(())
}

fn run_kernel(args: CrashTestArgs, file_system: FileSystem) -> anyhow::Result<()> {
    let config = KernelConfig {
        agent_exe: std::env::current_exe().context("locating the shardlift executable")?,
        kernel_dir: args.kernel_dir,
        file_system,
        out: args.out.clone(),
        writer: args.writer,
        check: args.check,
        setup: args.setup,
        ack: args.ack,
        unread: args.unread,
        guest_timeout_ms: args.guest_timeout_ms,
        setup_timeout_ms: args.writer_timeout_ms,
        states: StateLimits {
            reordered_per_epoch: args.reordered_per_epoch,
            max_reordered: args.max_reordered,
            max_torn: args.max_torn,
            seed: args.seed,
            ..StateLimits::default()
        },
        max_states: args.max_states,
        checks: CheckLimits {
            timeout_ms: args.check_timeout_ms,
            ..CheckLimits::default()
        },
        hold_model: args.hold_model.then_some(ModelLimits {
            max_distinct_states: args.max_distinct_states,
            narrowed: args.narrowed_model,
            ..ModelLimits::default()
        }),
        replay: args.replay,
    };
    let report =
        kernel::run(&config, &mut |line| eprintln!("crash-test: {line}")).context("crash-test")?;
    finish(
        args.json,
        &report,
        &args.out,
        report.failing_states > 0,
        || {
            outln!(
            "{:?} on {} ({:?}): {} log entries, {} flushes; {} flush points, {} reordered, {} torn; {} checked, {} failing",
            report.file_system,
            report.kernel.release,
            report.accelerator,
            report.log_entries,
            report.log_flushes,
            report.flush_points,
            report.reordered_states,
            report.torn_states,
            report.states,
            report.failing_states
        );
        },
    )
}

/// The kernel-mode guest agent's arguments.
#[derive(clap::Args, Debug)]
pub struct KernelGuestArgs {
    /// The agent's config (JSON).
    #[arg(long)]
    pub config: PathBuf,
}

/// The guest's replay of a writer recorded on the host.
#[derive(clap::Args, Debug)]
pub struct KernelReplayArgs {
    /// The replay script (written into the guest by `crash-test --replay`).
    #[arg(long)]
    pub script: PathBuf,
}

/// Replays a recorded writer's file operations in the working directory, printing its
/// acknowledgements. Outside a crash-test guest it does nothing and exits 2.
pub fn kernel_replay(args: KernelReplayArgs) -> anyhow::Result<()> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    if !kernel::agent::is_guest(&cmdline) {
        eprintln!(
            "shardlift kernel-replay runs only inside a crash-test guest (the kernel command \
             line lacks {}); nothing was done",
            kernel::agent::GUEST_TOKEN
        );
        std::process::exit(2);
    }
    let bytes = std::fs::read(&args.script)
        .with_context(|| format!("reading {}", args.script.display()))?;
    let script = kernel::replay::decode(&bytes)?;
    let mut stdout = std::io::stdout().lock();
    kernel::replay::replay(&script, std::path::Path::new("."), &mut stdout)?;
    Ok(())
}

/// Runs the guest agent; it powers the guest off and never returns.
pub fn kernel_guest(args: KernelGuestArgs) -> anyhow::Result<()> {
    kernel::agent::run(&args.config)
}

/// Waits for the recorder's go byte on stdin, then replaces itself with the writer.
pub fn exec_writer(args: CrashTestExecArgs) -> anyhow::Result<()> {
    let mut go = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut go)
        .context("waiting for the crash-test recorder")?;
    anyhow::ensure!(go == *b"G", "unexpected byte from the crash-test recorder");
    let (program, rest) = args.argv.split_first().context("no writer command")?;
    let error = std::process::Command::new(program)
        .args(rest)
        .stdin(std::process::Stdio::null())
        .exec();
    Err(error).with_context(|| format!("starting the writer {}", program.to_string_lossy()))
}
