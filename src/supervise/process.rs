//! Child-process supervision: spawn, signal exactly, wait with a deadline, reap, record.
//!
//! Every child runs in its own process group and is addressed through a pidfd, so a
//! signal can never reach a recycled pid. Every wait has a deadline. A `Supervisor` owns
//! its children: `teardown` (and `Drop`) sends SIGTERM, waits a grace period, sends
//! SIGKILL and reaps, so no child outlives its owner or is left a zombie. Each exit is
//! recorded once as an `ExitRecord` (role, session, rank, code or signal) in one event
//! list, from which reports are built. Every child is started from a [`ChildSpec`]; the
//! `shardlift` subcommands a child runs are typed ([`ShardliftChild`]), so their argv is
//! built in one place.
//!
//! Which crate does what, and why:
//! - `rustix` owns the syscalls addressed at *another* process or at a descriptor: pidfd
//!   open and signal, `poll` on a pidfd, process-group kill, and `prlimit` on a child
//!   (nix has no `prlimit`), plus the sockets in `ipc`.
//! - `nix` owns what a supervised child does to *itself* on entry
//!   ([`enter_supervised_child`]): its resource limits (`setrlimit`, typed `Resource`) and
//!   its parent-death signal (`prctl`), each a safe typed wrapper.
//! - No child is changed between fork and exec: that needs `CommandExt::pre_exec`, which
//!   is `unsafe` and forbidden in this crate. So core dumps are turned off by the parent
//!   right after the spawn (`prlimit`), and again by `shardlift` children first thing,
//!   which closes the short window before the parent's limit lands.
use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::core::interrupt;
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Resource, Rlimit};

pub use rustix::process::Signal;

/// Default grace between SIGTERM and SIGKILL during teardown.
pub const TEARDOWN_GRACE_MS: u64 = 2_000;

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ExitOutcome {
    /// Exited normally with this code.
    Code(i32),
    /// Killed by this signal number.
    Signal(i32),
}

impl ExitOutcome {
    /// Whether the child exited with code 0.
    pub fn success(&self) -> bool {
        *self == ExitOutcome::Code(0)
    }
}

impl std::fmt::Display for ExitOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExitOutcome::Code(code) => write!(f, "exit code {code}"),
            ExitOutcome::Signal(signal) => write!(f, "signal {signal}"),
        }
    }
}

/// The part a child plays. Recorded (in exit records, errors and evidence) as its
/// lower-case name: `worker`, `publisher`, `recovery`, `launcher`, `setup`, `check`,
/// `trainer`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A coordinator session's worker (`shardlift worker`).
    Worker,
    /// The crash harness's publisher (`shardlift store-child publish`).
    Publisher,
    /// The crash harness's fresh recovery process (`shardlift store-child recover`).
    Recovery,
    /// The elastic invariant's torch.distributed launcher.
    Launcher,
    /// `crash-test`'s setup command (untraced; it builds the starting image).
    Setup,
    /// `crash-test`'s check command, run on one materialised crash state.
    Check,
    /// `resume-test`'s training command under test.
    Trainer,
    /// A QEMU guest of `crash-test`'s kernel mode (and the host tools that recover its
    /// crash states).
    Guest,
}

impl Role {
    /// The recorded name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Publisher => "publisher",
            Role::Recovery => "recovery",
            Role::Launcher => "launcher",
            Role::Setup => "setup",
            Role::Check => "check",
            Role::Trainer => "trainer",
            Role::Guest => "guest",
        }
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reaped child.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExitRecord {
    /// The part the child played.
    pub role: Role,
    /// The session (or harness run) the child belonged to.
    pub session: String,
    /// The worker's rank, for children that have one.
    pub rank: Option<u32>,
    /// How it ended.
    pub outcome: ExitOutcome,
}

/// What to start.
#[derive(Clone, Debug)]
pub struct ChildSpec {
    /// The executable.
    pub program: PathBuf,
    /// Its arguments (without the program name).
    pub args: Vec<OsString>,
    /// Variables added to the inherited environment, in order.
    pub env: Vec<(OsString, OsString)>,
    /// Give the parent a pipe to the child's stdin (else /dev/null).
    pub pipe_stdin: bool,
    /// Give the parent a pipe from the child's stdout (else inherited).
    pub pipe_stdout: bool,
    /// Working directory (else the parent's).
    pub cwd: Option<PathBuf>,
    /// Send stdout and stderr to this new file (else as `pipe_stdout` says, and stderr
    /// inherited).
    pub output_to: Option<PathBuf>,
    /// The part the child plays, recorded in its [`ExitRecord`].
    pub role: Role,
    /// The session it belongs to, recorded in its [`ExitRecord`].
    pub session: String,
    /// The worker's rank, if it has one.
    pub rank: Option<u32>,
}

/// The environment variable through which glibc's allocator takes its settings.
pub const MALLOC_TUNABLES_VARIABLE: &str = "GLIBC_TUNABLES";

/// glibc allocator settings every worker starts with: allocations below 32 MiB come from
/// the heap (no `mmap` of their own), and the heap keeps up to 128 MiB free at its top
/// instead of returning it. With glibc's defaults a worker's heap shrank and grew back
/// every step (libtorch frees a step's tensors together), and every page it grew back into
/// was faulted in and zeroed again: `perf` of `bench train` showed about a fifth of a W4
/// worker's CPU in `brk`, page faults and page clearing, and these settings cut the
/// faults of a whole `bench train` run from about 553 000 to 166 000. A worker holds at
/// most a few tens of MiB, so keeping it costs little. Where the allocator lives, not what
/// it computes: libtorch aligns every tensor to 64 bytes either way, and the golden roots
/// and the cross-placement identity tests run with these settings in the workers and
/// glibc's defaults in process.
pub const WORKER_MALLOC_TUNABLES: &str =
    "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=134217728";

/// The allocator variable a worker is given: [`WORKER_MALLOC_TUNABLES`], unless this
/// process already has `GLIBC_TUNABLES` (`inherited`), which its workers then inherit
/// unchanged: a user's own allocator settings win.
pub fn worker_malloc_tunables(inherited: Option<OsString>) -> Option<(&'static str, &'static str)> {
    match inherited {
        Some(_) => None,
        None => Some((MALLOC_TUNABLES_VARIABLE, WORKER_MALLOC_TUNABLES)),
    }
}

/// Size cap of a process's environment as [`glibc_tunables_of`] reads it.
pub const MAX_ENVIRON_BYTES: u64 = 1 << 20;

/// The `GLIBC_TUNABLES` process `pid` started with, from `/proc/PID/environ`, `None` when
/// it has none: what a child really runs with, not what its spec meant to give it. glibc
/// 2.36 cuts the value at each `:` in place as it parses it (seen here: the settings after
/// the first become entries of their own), so entries that follow it and name a tunable
/// (`glibc.…=…`) are joined back with `:`. An environment over [`MAX_ENVIRON_BYTES`] is
/// refused.
pub fn glibc_tunables_of(pid: u32) -> std::io::Result<Option<String>> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(format!("/proc/{pid}/environ"))?
        .take(MAX_ENVIRON_BYTES + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_ENVIRON_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("/proc/{pid}/environ: over {MAX_ENVIRON_BYTES} bytes"),
        ));
    }
    let prefix = format!("{MALLOC_TUNABLES_VARIABLE}=");
    let mut entries = bytes.split(|&byte| byte == 0);
    let Some(first) = entries.find_map(|entry| entry.strip_prefix(prefix.as_bytes())) else {
        return Ok(None);
    };
    let mut value = String::from_utf8_lossy(first).into_owned();
    for entry in entries.take_while(|entry| entry.starts_with(b"glibc.")) {
        value.push(':');
        value.push_str(&String::from_utf8_lossy(entry));
    }
    Ok(Some(value))
}

/// A `shardlift` subcommand run as a supervised child: the one place its argv is spelt
/// (it must match the binary's hidden `worker` and `store-child` commands).
#[derive(Clone, Copy, Debug)]
pub enum ShardliftChild<'a> {
    /// `shardlift worker --socket S --rank R --engine E`, one BLAS/OpenMP thread.
    Worker {
        /// The coordinator's Unix socket.
        socket: &'a Path,
        /// The worker's rank in its session.
        rank: u32,
        /// The engine's name (as `shardlift worker --engine` takes it).
        engine: &'a str,
    },
    /// `shardlift store-child publish --store D --handoff F --pause-at P`, with stdin and
    /// stdout piped (events out, acknowledgements in).
    Publisher {
        /// The store: a directory, or an `s3://` location the child's CLI recognises.
        store: &'a Path,
        /// The handoff file holding the state to publish (`lab::handoff`).
        handoff: &'a Path,
        /// Where the publisher stops for an acknowledgement.
        pause: PublisherPause,
    },
    /// `shardlift store-child recover --store D`, its report on piped stdout.
    Recovery {
        /// The store: a directory, or an `s3://` location the child's CLI recognises.
        store: &'a Path,
    },
}

/// Where a publisher child stops for an acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublisherPause {
    /// After every barrier event (the named steps of RFC 0001 §4).
    Barriers,
    /// Before every file-system operation (so a kill can land between any two).
    Operations,
    /// Nowhere: it says it is ready, then runs free (for kills at random instants).
    Nowhere,
}

impl PublisherPause {
    /// The value of `store-child publish --pause-at`.
    pub fn arg(self) -> &'static str {
        match self {
            PublisherPause::Barriers => "barriers",
            PublisherPause::Operations => "operations",
            PublisherPause::Nowhere => "nowhere",
        }
    }

    /// The inverse of [`PublisherPause::arg`].
    pub fn from_arg(text: &str) -> Option<Self> {
        [
            PublisherPause::Barriers,
            PublisherPause::Operations,
            PublisherPause::Nowhere,
        ]
        .into_iter()
        .find(|p| p.arg() == text)
    }
}

impl ShardliftChild<'_> {
    /// The role a child running this subcommand plays.
    pub fn role(&self) -> Role {
        match self {
            ShardliftChild::Worker { .. } => Role::Worker,
            ShardliftChild::Publisher { .. } => Role::Publisher,
            ShardliftChild::Recovery { .. } => Role::Recovery,
        }
    }
}

impl ChildSpec {
    /// A spec of `program` with no arguments, no extra environment, stdin from /dev/null and
    /// stdout and stderr inherited.
    pub fn new(program: impl Into<PathBuf>, role: Role, session: &str) -> Self {
        ChildSpec {
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            pipe_stdin: false,
            pipe_stdout: false,
            cwd: None,
            output_to: None,
            role,
            session: session.to_owned(),
            rank: None,
        }
    }

    /// The spec of `shardlift_exe` running `child`.
    pub fn shardlift(shardlift_exe: &Path, session: &str, child: ShardliftChild<'_>) -> Self {
        let spec = ChildSpec::new(shardlift_exe, child.role(), session);
        match child {
            ShardliftChild::Worker {
                socket,
                rank,
                engine,
            } => spec
                .arg("worker")
                .arg("--socket")
                .arg(socket)
                .arg("--rank")
                .arg(rank.to_string())
                .arg("--engine")
                .arg(engine)
                .env("OMP_NUM_THREADS", "1")
                .env("MKL_NUM_THREADS", "1")
                .envs(worker_malloc_tunables(std::env::var_os(
                    MALLOC_TUNABLES_VARIABLE,
                )))
                .rank(rank),
            ShardliftChild::Publisher {
                store,
                handoff,
                pause,
            } => spec
                .arg("store-child")
                .arg("publish")
                .arg("--store")
                .arg(store)
                .arg("--handoff")
                .arg(handoff)
                .arg("--pause-at")
                .arg(pause.arg())
                .piped_stdin()
                .piped_stdout(),
            ShardliftChild::Recovery { store } => spec
                .arg("store-child")
                .arg("recover")
                .arg("--store")
                .arg(store)
                .piped_stdout(),
        }
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds one environment variable.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Adds each of `variables` (none for `None`).
    pub fn envs(mut self, variables: Option<(&str, &str)>) -> Self {
        self.env.extend(
            variables
                .into_iter()
                .map(|(key, value)| (key.into(), value.into())),
        );
        self
    }

    /// Records the worker's rank.
    pub fn rank(mut self, rank: u32) -> Self {
        self.rank = Some(rank);
        self
    }

    /// Gives the parent a pipe to the child's stdin.
    pub fn piped_stdin(mut self) -> Self {
        self.pipe_stdin = true;
        self
    }

    /// Gives the parent a pipe from the child's stdout.
    pub fn piped_stdout(mut self) -> Self {
        self.pipe_stdout = true;
        self
    }

    /// Runs the child in `dir`.
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cwd = Some(dir.into());
        self
    }

    /// Sends the child's stdout and stderr to a new file at `path`.
    pub fn output_to(mut self, path: impl Into<PathBuf>) -> Self {
        self.output_to = Some(path.into());
        self
    }
}

/// Why supervising a child failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The child could not be started (or its output file created).
    #[error("cannot start {role} ({program}): {source}")]
    Spawn {
        /// The part the child was to play.
        role: Role,
        /// The program, as spelt in its spec.
        program: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child started but no pidfd could be opened for it; it was killed and reaped.
    #[error("cannot open a pidfd for {role} (pid {pid}): {source}")]
    Pidfd {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child's core dumps could not be turned off; it was killed and reaped.
    #[error("cannot limit the resources of {role} (pid {pid}): {source}")]
    Limit {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Sending a signal through the child's pidfd (or to its group) failed.
    #[error("cannot signal {role} (pid {pid}): {source}")]
    Signal {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Polling or reaping the child failed.
    #[error("waiting for {role} (pid {pid}) failed: {source}")]
    Wait {
        /// The child's role.
        role: Role,
        /// The child's pid.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The child was still running when a wait's deadline passed.
    #[error("{role} did not exit within {timeout_ms} ms")]
    Deadline {
        /// The child's role.
        role: Role,
        /// The deadline that passed, in milliseconds.
        timeout_ms: u64,
    },
    /// This process was asked to stop (Ctrl-C, SIGTERM) while waiting for a child; the
    /// child's owner tears it down as the error unwinds.
    #[error("interrupted by signal {signal} while waiting for {role}")]
    Interrupted {
        /// The child being waited for.
        role: Role,
        /// The signal that asked this process to stop.
        signal: i32,
    },
    /// A `shardlift` child could not set itself up on entry ([`enter_supervised_child`]).
    #[error("a supervised child cannot {what}: {source}")]
    Enter {
        /// What it could not do (e.g. "turn off core dumps").
        what: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// What a `shardlift` child does first: no core dumps (closing the window before the
/// parent's `prlimit` lands), and SIGKILL when its parent dies, so no child outlives
/// its supervisor.
pub fn enter_supervised_child() -> Result<(), ProcessError> {
    use nix::sys::resource::{setrlimit, Resource as NixResource};
    setrlimit(NixResource::RLIMIT_CORE, 0, 0).map_err(|errno| ProcessError::Enter {
        what: "turn off core dumps",
        source: errno.into(),
    })?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).map_err(|errno| {
        ProcessError::Enter {
            what: "set its parent-death signal",
            source: errno.into(),
        }
    })
}

/// Sets the child's core-dump limit to zero, soft and hard. A child that has already
/// exited (ESRCH: a zombie) has nothing left to dump.
fn forbid_core_dumps(pid: Pid) -> Result<(), rustix::io::Errno> {
    let none = Rlimit {
        current: Some(0),
        maximum: Some(0),
    };
    match rustix::process::prlimit(Some(pid), Resource::Core, none) {
        Ok(_) | Err(rustix::io::Errno::SRCH) => Ok(()),
        Err(errno) => Err(errno),
    }
}

/// A running child addressed by pidfd. Reaped exactly once.
#[derive(Debug)]
pub struct SupervisedChild {
    child: Child,
    pidfd: OwnedFd,
    /// The part the child plays.
    pub role: Role,
    /// The session it belongs to.
    pub session: String,
    /// The worker's rank, if it has one.
    pub rank: Option<u32>,
    exit: Option<ExitRecord>,
}

impl SupervisedChild {
    /// Starts the child in its own process group, opens its pidfd and turns off its core
    /// dumps.
    pub fn spawn(spec: ChildSpec) -> Result<Self, ProcessError> {
        let mut command = Command::new(&spec.program);
        command.args(&spec.args).process_group(0);
        for (key, value) in &spec.env {
            command.env(key, value);
        }
        command.stdin(if spec.pipe_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        command.stdout(if spec.pipe_stdout {
            Stdio::piped()
        } else {
            Stdio::inherit()
        });
        if let Some(dir) = &spec.cwd {
            command.current_dir(dir);
        }
        if let Some(path) = &spec.output_to {
            let spawn_error = |source| ProcessError::Spawn {
                role: spec.role,
                program: spec.program.display().to_string(),
                source,
            };
            let file = std::fs::File::create(path).map_err(spawn_error)?;
            let copy = file.try_clone().map_err(spawn_error)?;
            command.stdout(file).stderr(copy);
        }
        let child = command.spawn().map_err(|source| ProcessError::Spawn {
            role: spec.role,
            program: spec.program.display().to_string(),
            source,
        })?;
        let pid = child.id();
        // The child is unreaped, so its pid cannot have been recycled yet.
        let raw_pid = Pid::from_raw(pid as i32).ok_or_else(|| ProcessError::Pidfd {
            role: spec.role,
            pid,
            source: std::io::Error::other("pid 0"),
        })?;
        let pidfd = match pidfd_open(raw_pid, PidfdFlags::empty()) {
            Ok(fd) => fd,
            Err(errno) => {
                let mut child = child;
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProcessError::Pidfd {
                    role: spec.role,
                    pid,
                    source: errno.into(),
                });
            }
        };
        if let Err(errno) = forbid_core_dumps(raw_pid) {
            let mut child = child;
            let _ = child.kill();
            let _ = child.wait();
            return Err(ProcessError::Limit {
                role: spec.role,
                pid,
                source: errno.into(),
            });
        }
        Ok(SupervisedChild {
            child,
            pidfd,
            role: spec.role,
            session: spec.session,
            rank: spec.rank,
            exit: None,
        })
    }

    /// The child's pid (it cannot be recycled while the child is unreaped).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The pipe to the child's stdin, once.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.stdin.take()
    }

    /// The pipe from the child's stdout, once.
    pub fn take_stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// The exit, if the child has been reaped.
    pub fn exit_record(&self) -> Option<&ExitRecord> {
        self.exit.as_ref()
    }

    /// Sends `signal` through the pidfd. A child already reaped is not signalled.
    pub fn signal(&self, signal: Signal) -> Result<(), ProcessError> {
        if self.exit.is_some() {
            return Ok(());
        }
        match pidfd_send_signal(self.pidfd.as_fd(), signal) {
            Ok(()) => Ok(()),
            // ESRCH: it has exited but is not reaped yet; nothing to signal.
            Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(errno) => Err(ProcessError::Signal {
                role: self.role,
                pid: self.pid(),
                source: errno.into(),
            }),
        }
    }

    /// Sends `signal` to the child's whole process group (every child leads its own), so
    /// that the processes it started go too. The group id stays reserved while any member
    /// lives, so this reaches the child's group even after the child itself was reaped; an
    /// empty group (ESRCH) is nothing to signal.
    pub fn signal_group(&self, signal: Signal) -> Result<(), ProcessError> {
        let Some(group) = Pid::from_raw(self.pid() as i32) else {
            return Ok(());
        };
        match rustix::process::kill_process_group(group, signal) {
            Ok(()) | Err(rustix::io::Errno::SRCH) => Ok(()),
            Err(errno) => Err(ProcessError::Signal {
                role: self.role,
                pid: self.pid(),
                source: errno.into(),
            }),
        }
    }

    /// Waits up to `timeout_ms` for the child to exit, then reaps it. `Ok(None)` if it is
    /// still running at the deadline; `Interrupted` (the child left running, for its
    /// owner's teardown) as soon as this process is asked to stop.
    pub fn wait_timeout(&mut self, timeout_ms: u64) -> Result<Option<&ExitRecord>, ProcessError> {
        self.wait_for_exit(timeout_ms, true)
    }

    /// [`Self::wait_timeout`], honouring an interruption only when `interruptible`
    /// (teardown's own waits are not: they are how an interrupted command stops).
    fn wait_for_exit(
        &mut self,
        timeout_ms: u64,
        interruptible: bool,
    ) -> Result<Option<&ExitRecord>, ProcessError> {
        if self.exit.is_some() {
            return Ok(self.exit.as_ref());
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        loop {
            if let (true, Some(signal)) = (interruptible, interrupt::requested()) {
                return Err(ProcessError::Interrupted {
                    role: self.role,
                    signal,
                });
            }
            let mut remaining = deadline.saturating_duration_since(Instant::now());
            if interruptible {
                remaining = remaining.min(Duration::from_millis(interrupt::POLL_SLICE_MS));
            }
            let timespec = Timespec {
                tv_sec: remaining.as_secs() as i64,
                tv_nsec: i64::from(remaining.subsec_nanos()),
            };
            let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec)) {
                Ok(0) if Instant::now() >= deadline => return Ok(None),
                Ok(0) => continue,
                Ok(_) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(errno) => {
                    return Err(ProcessError::Wait {
                        role: self.role,
                        pid: self.pid(),
                        source: errno.into(),
                    })
                }
            }
        }
        let status = self.child.wait().map_err(|source| ProcessError::Wait {
            role: self.role,
            pid: self.child.id(),
            source,
        })?;
        let outcome = match (status.code(), status.signal()) {
            (Some(code), _) => ExitOutcome::Code(code),
            (None, Some(signal)) => ExitOutcome::Signal(signal),
            (None, None) => ExitOutcome::Code(-1),
        };
        self.exit = Some(ExitRecord {
            role: self.role,
            session: self.session.clone(),
            rank: self.rank,
            outcome,
        });
        Ok(self.exit.as_ref())
    }

    /// Waits for the child, failing with `Deadline` (the child still running) after `timeout_ms`.
    pub fn wait_deadline(&mut self, timeout_ms: u64) -> Result<ExitRecord, ProcessError> {
        match self.wait_timeout(timeout_ms)? {
            Some(record) => Ok(record.clone()),
            None => Err(ProcessError::Deadline {
                role: self.role,
                timeout_ms,
            }),
        }
    }

    /// SIGKILL now, then reap (even when this process has been asked to stop).
    pub fn kill_and_reap(&mut self) -> Result<ExitRecord, ProcessError> {
        self.signal(Signal::KILL)?;
        // SIGKILL cannot be caught; the bound only guards against a wedged kernel.
        let timeout_ms = 30_000;
        match self.wait_for_exit(timeout_ms, false)? {
            Some(record) => Ok(record.clone()),
            None => Err(ProcessError::Deadline {
                role: self.role,
                timeout_ms,
            }),
        }
    }

    /// SIGTERM, wait `grace_ms`, then SIGKILL; always reaps.
    pub fn terminate(&mut self, grace_ms: u64) -> Result<ExitRecord, ProcessError> {
        if let Some(record) = &self.exit {
            return Ok(record.clone());
        }
        self.signal(Signal::TERM)?;
        if let Some(record) = self.wait_for_exit(grace_ms, false)? {
            return Ok(record.clone());
        }
        self.kill_and_reap()
    }
}

impl Drop for SupervisedChild {
    fn drop(&mut self) {
        if self.exit.is_none() {
            let _ = self.signal(Signal::KILL);
            let _ = self.wait_for_exit(30_000, false);
        }
    }
}

/// Owns a group of children (e.g. one coordinator session's workers) and the record of
/// every exit. Dropping it tears the group down.
#[derive(Debug, Default)]
pub struct Supervisor {
    children: Vec<SupervisedChild>,
    /// Indices of reaped children, in the order they were reaped.
    reaped_order: Vec<usize>,
}

impl Supervisor {
    /// An empty supervisor.
    pub fn new() -> Self {
        Supervisor::default()
    }

    /// Starts a child and returns its index in this supervisor.
    pub fn spawn(&mut self, spec: ChildSpec) -> Result<usize, ProcessError> {
        let child = SupervisedChild::spawn(spec)?;
        self.children.push(child);
        Ok(self.children.len() - 1)
    }

    /// The child at `index` (as [`Supervisor::spawn`] returned it).
    pub fn child(&mut self, index: usize) -> Option<&mut SupervisedChild> {
        self.children.get_mut(index)
    }

    /// Every child started, reaped or not, in spawn order.
    pub fn children(&self) -> &[SupervisedChild] {
        &self.children
    }

    /// Pids of the children not yet reaped (for SO_PEERCRED checks).
    pub fn live_pids(&self) -> Vec<u32> {
        self.children
            .iter()
            .filter(|c| c.exit.is_none())
            .map(|c| c.pid())
            .collect()
    }

    fn note_reaped(&mut self, index: usize) {
        if self.children[index].exit.is_some() && !self.reaped_order.contains(&index) {
            self.reaped_order.push(index);
        }
    }

    /// Reaps the first child that has exited, without blocking.
    pub fn poll_exited(&mut self) -> Result<Option<ExitRecord>, ProcessError> {
        for index in 0..self.children.len() {
            if self.children[index].exit.is_none()
                && self.children[index].wait_timeout(0)?.is_some()
            {
                self.note_reaped(index);
                return Ok(self.children[index].exit.clone());
            }
        }
        Ok(None)
    }

    /// Waits for every child to exit on its own within `timeout_ms` in total; on the
    /// deadline, tears the rest down and reports `Deadline` for the first laggard.
    pub fn wait_all(&mut self, timeout_ms: u64) -> Result<(), ProcessError> {
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let mut laggard = None;
        for index in 0..self.children.len() {
            let remaining = deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64;
            if self.children[index].wait_timeout(remaining)?.is_none() {
                laggard.get_or_insert(self.children[index].role);
            }
            self.note_reaped(index);
        }
        if let Some(role) = laggard {
            self.teardown(TEARDOWN_GRACE_MS);
            return Err(ProcessError::Deadline { role, timeout_ms });
        }
        Ok(())
    }

    /// SIGTERM every live child, wait `grace_ms`, SIGKILL the rest, reap all.
    pub fn teardown(&mut self, grace_ms: u64) {
        for child in &self.children {
            let _ = child.signal(Signal::TERM);
        }
        let deadline = Instant::now() + Duration::from_millis(grace_ms);
        for index in 0..self.children.len() {
            let remaining = deadline
                .saturating_duration_since(Instant::now())
                .as_millis() as u64;
            let child = &mut self.children[index];
            if !matches!(child.wait_for_exit(remaining, false), Ok(Some(_))) {
                let _ = child.kill_and_reap();
            }
            self.note_reaped(index);
        }
    }

    /// Every exit recorded so far, in the order reaped.
    pub fn exits(&self) -> Vec<ExitRecord> {
        self.reaped_order
            .iter()
            .filter_map(|&i| self.children[i].exit.clone())
            .collect()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        if self.children.iter().any(|c| c.exit.is_none()) {
            self.teardown(TEARDOWN_GRACE_MS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_allocator_settings_are_read_whole_from_its_environment() {
        let spawn = |tunables: Option<&str>| {
            let mut command = Command::new("/bin/sleep");
            command.arg("30").env_remove(MALLOC_TUNABLES_VARIABLE);
            if let Some(value) = tunables {
                command.env(MALLOC_TUNABLES_VARIABLE, value);
            }
            command.spawn().expect("spawn sleep")
        };
        // Two settings: glibc 2.36 cuts the value at the ':' in place.
        let cases = [
            (Some(WORKER_MALLOC_TUNABLES), Some(WORKER_MALLOC_TUNABLES)),
            (Some(""), Some("")),
            (None, None),
        ];
        for (given, expected) in cases {
            let mut child = spawn(given);
            // /proc/PID/environ is the parent's until the child has exec'd, and reads
            // empty for a moment after `exe` changes (the new stack is not laid out yet):
            // wait for both. Whether ld.so has cut the value at ':' yet does not matter,
            // as `glibc_tunables_of` reads it whole either way.
            let deadline = Instant::now() + Duration::from_secs(10);
            let observed = loop {
                let exe = std::fs::read_link(format!("/proc/{}/exe", child.id()));
                let environ = std::fs::read(format!("/proc/{}/environ", child.id()));
                let ready = exe.is_ok_and(|exe| exe.ends_with("sleep"))
                    && environ.is_ok_and(|bytes| !bytes.is_empty());
                if ready || Instant::now() > deadline {
                    break glibc_tunables_of(child.id()).expect("environ");
                }
                std::thread::sleep(Duration::from_millis(5));
            };
            child.kill().expect("kill");
            child.wait().expect("reap");
            assert_eq!(observed.as_deref(), expected, "{given:?}");
        }
    }

    #[test]
    fn workers_get_the_allocator_settings_unless_this_process_has_its_own() {
        assert_eq!(
            worker_malloc_tunables(None),
            Some(("GLIBC_TUNABLES", WORKER_MALLOC_TUNABLES))
        );
        assert_eq!(worker_malloc_tunables(Some("".into())), None);
        assert_eq!(
            worker_malloc_tunables(Some("glibc.malloc.arena_max=1".into())),
            None
        );
        let spec = ChildSpec::shardlift(
            Path::new("/bin/true"),
            "s",
            ShardliftChild::Worker {
                socket: Path::new("/tmp/s.sock"),
                rank: 0,
                engine: "fake",
            },
        );
        let given: Vec<_> = spec
            .env
            .iter()
            .filter(|(key, _)| key == MALLOC_TUNABLES_VARIABLE)
            .map(|(_, value)| value.clone())
            .collect();
        match std::env::var_os(MALLOC_TUNABLES_VARIABLE) {
            None => assert_eq!(given, [OsString::from(WORKER_MALLOC_TUNABLES)]),
            Some(_) => assert!(given.is_empty(), "{given:?}"),
        }
    }

    #[test]
    fn records_exit_code_and_signal() {
        let mut ok = SupervisedChild::spawn(
            ChildSpec::new("/bin/sh", Role::Recovery, "s")
                .arg("-c")
                .arg("exit 7"),
        )
        .expect("spawn sh");
        assert_eq!(
            ok.wait_deadline(10_000).expect("exits").outcome,
            ExitOutcome::Code(7)
        );

        let mut sleeper = SupervisedChild::spawn(
            ChildSpec::new("/bin/sleep", Role::Worker, "s")
                .arg("30")
                .rank(2),
        )
        .expect("spawn sleep");
        assert!(sleeper.wait_timeout(50).expect("poll").is_none());
        let record = sleeper.kill_and_reap().expect("killed");
        assert_eq!(record.outcome, ExitOutcome::Signal(9));
        assert_eq!(record.rank, Some(2));
        // Signalling a reaped child is a no-op, not an error.
        sleeper.signal(Signal::KILL).expect("no-op");
    }

    #[test]
    fn teardown_escalates_past_an_ignored_sigterm() {
        let mut supervisor = Supervisor::new();
        supervisor
            .spawn(
                ChildSpec::new("/bin/sh", Role::Worker, "s")
                    .rank(0)
                    .arg("-c")
                    .arg("trap '' TERM; sleep 30"),
            )
            .expect("spawn");
        supervisor
            .spawn(
                ChildSpec::new("/bin/sleep", Role::Worker, "s")
                    .rank(1)
                    .arg("30"),
            )
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        supervisor.teardown(300);
        assert!(started.elapsed() < Duration::from_secs(20));
        let exits = supervisor.exits();
        let outcomes: Vec<_> = exits.iter().map(|e| (e.rank, e.outcome)).collect();
        // Rank 0 ignores SIGTERM, rank 1 does not.
        assert_eq!(
            outcomes,
            vec![
                (Some(0), ExitOutcome::Signal(9)),
                (Some(1), ExitOutcome::Signal(15))
            ]
        );
        assert!(supervisor.live_pids().is_empty());
    }

    #[test]
    fn wait_all_deadline_tears_down() {
        let mut supervisor = Supervisor::new();
        supervisor
            .spawn(ChildSpec::new("/bin/sleep", Role::Worker, "s").arg("30"))
            .expect("spawn");
        let error = supervisor.wait_all(100).expect_err("deadline");
        assert!(matches!(error, ProcessError::Deadline { .. }));
        assert_eq!(supervisor.exits().len(), 1);
    }

    #[test]
    fn roles_are_recorded_by_their_old_names() {
        let record = ExitRecord {
            role: Role::Worker,
            session: "train".into(),
            rank: Some(3),
            outcome: ExitOutcome::Signal(9),
        };
        assert_eq!(
            serde_json::to_string(&record).expect("serialise"),
            r#"{"role":"worker","session":"train","rank":3,"outcome":{"signal":9}}"#
        );
        for (role, name) in [
            (Role::Worker, "worker"),
            (Role::Publisher, "publisher"),
            (Role::Recovery, "recovery"),
            (Role::Launcher, "launcher"),
        ] {
            assert_eq!(role.as_str(), name);
            assert_eq!(role.to_string(), name);
            assert_eq!(
                serde_json::to_string(&role).expect("serialise"),
                format!("\"{name}\"")
            );
        }
    }

    #[test]
    fn supervised_children_dump_no_core() {
        // The limit lands right after the spawn, so the shell looks a moment later.
        let check = r#"sleep 0.2; test "$(ulimit -c)" = 0 && test "$(ulimit -H -c)" = 0"#;
        let mut child = SupervisedChild::spawn(
            ChildSpec::new("/bin/sh", Role::Worker, "s")
                .arg("-c")
                .arg(check),
        )
        .expect("spawn sh");
        assert_eq!(
            child.wait_deadline(10_000).expect("exits").outcome,
            ExitOutcome::Code(0)
        );
    }
}
