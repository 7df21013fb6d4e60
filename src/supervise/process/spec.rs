//! What a child is started from: its program, argv, environment and role.
use std::ffi::OsString;
use std::path::PathBuf;

use super::*;

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
