//! Records what an unmodified writer process tree does to its scratch directory, with
//! ptrace: no cooperation from the writer, no kernel module.
//!
//! The writer is started through `shardlift crash-test-exec` (a stub that waits for one
//! byte on stdin, then execs the writer): the recorder seizes the stub first, so the
//! writer runs traced from its first instruction, with every thread and child process
//! (`PTRACE_O_TRACECLONE|TRACEFORK|TRACEVFORK`) and `PTRACE_O_EXITKILL` (the tree dies if
//! the recorder does). No `unsafe` is needed: the stub replaces `pre_exec`.
//!
//! Each system call is seen twice. At entry the recorder resolves its paths (relative to
//! `/proc/TID/cwd` or the directory descriptor) and descriptors (`/proc/TID/fd/N`, whose
//! `stat` names the inode), and decides whether it is in scope; a call that would escape
//! the scratch directory, or that the model cannot represent, is refused there: the whole
//! tree is SIGKILLed before the call runs. At exit, a call that succeeded becomes a
//! [`TraceOp`]; written bytes are read from the writer's memory (`/proc/TID/mem`).
//!
//! A durability call (fsync, fdatasync, sync, syncfs) is stamped at its entry with the
//! number of operations completed so far, and appended at its exit: an operation another
//! thread completes while it runs lands between the two and stays pending, because the
//! kernel does not promise that a call already running covers it. `sync_file_range`
//! promises no durability at all and is not a durability call here.
//!
//! Invariants: operations are appended in completion order; a durability call's entry
//! stamp is the trace length when the recorder saw its entry; every limit (operations,
//! bytes, time) is checked before the trace grows; every tracee is reaped before
//! [`record`] returns.
//!
//! Why the recorder reaps its tracees itself instead of through
//! [`crate::supervise::process::SupervisedChild`]: under ptrace every stop of every tracee
//! is reported through `waitpid`, and the tracer must be the only waiter. A second owner
//! (a pidfd watcher, `SupervisedChild`'s reaper) would consume stops and exits the trace
//! loop needs, or race it for the root's exit status. The whole tree is still ended by
//! `PTRACE_O_EXITKILL`, the watchdog's group kill and the loop's final reap.
use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::libc;
use nix::sys::ptrace::{self, Event, Options};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use crate::lab::external::error::CrashTestError;
use crate::lab::external::trace::{InitialEntry, InodeId, StdoutWrite, Trace, TraceOp};
use crate::supervise::process::ExitOutcome;

/// The system calls the recorder follows, as said in refusals and `--help`.
pub const FOLLOWED: &str = "open/openat/openat2/creat, write/pwrite64/writev/pwritev/pwritev2, \
fsync/fdatasync, sync/syncfs, truncate/ftruncate, mkdir/mkdirat, rename/renameat/renameat2, \
link/linkat, unlink/unlinkat, rmdir; refused in scope: mmap of a file shared and writable, \
O_DIRECT, O_TMPFILE, fallocate, copy_file_range/sendfile/splice into a file, symlinks, \
RENAME_EXCHANGE, directory renames; refused anywhere: io_uring_setup, io_submit";

/// Bounds of one recorded run.
#[derive(Clone, Copy, Debug)]
pub struct RecordLimits {
    /// Most file-system operations a trace may hold.
    pub max_operations: usize,
    /// Most bytes the writer may write in all.
    pub max_written_bytes: u64,
    /// Bytes of the starting image the recorder loads.
    pub max_initial_bytes: u64,
    /// Deadline of the traced run (and of the setup command), in milliseconds.
    pub timeout_ms: u64,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            max_operations: 100_000,
            max_written_bytes: 1 << 30,
            max_initial_bytes: 1 << 30,
            timeout_ms: 600_000,
        }
    }
}

/// Where the writer runs and what it may touch besides its scratch directory.
#[derive(Clone, Debug)]
pub struct WriterSetup<'a> {
    /// The `shardlift` binary (its hidden `crash-test-exec` is the stub).
    pub stub_exe: &'a Path,
    /// The scratch directory: the writer's working directory and what the trace models.
    pub scratch: &'a Path,
    /// The writer's TMPDIR: writes there are allowed and not modelled.
    pub tmpdir: &'a Path,
    /// The writer's argv (run directly, no shell).
    pub argv: &'a [OsString],
    /// The file the writer's stdout goes to.
    pub stdout_log: &'a Path,
    /// The file the writer's stderr goes to.
    pub stderr_log: &'a Path,
}

/// What one recorded run gave.
#[derive(Debug)]
pub struct WriterRun {
    /// What the writer did to its scratch directory.
    pub trace: Trace,
    /// How it exited.
    pub exit: ExitOutcome,
    /// System-call stops seen (entry and exit count once together).
    pub syscalls: u64,
    /// Distinct threads and processes traced.
    pub tasks: u64,
}

/// Records `setup.argv` run in `setup.scratch`.
#[cfg(target_arch = "x86_64")]
pub fn record(setup: &WriterSetup<'_>, limits: RecordLimits) -> Result<WriterRun, CrashTestError> {
    let stdout = std::fs::File::create(setup.stdout_log)
        .map_err(CrashTestError::io("creating the writer's stdout log"))?;
    let stderr = std::fs::File::create(setup.stderr_log)
        .map_err(CrashTestError::io("creating the writer's stderr log"))?;
    let scope = Scope::new(
        setup.scratch,
        &[setup.tmpdir, setup.stdout_log, setup.stderr_log],
    )?;
    let scope = Scope {
        stdout_log: Some(
            setup
                .stdout_log
                .canonicalize()
                .map_err(CrashTestError::io("resolving the writer's stdout log"))?,
        ),
        ..scope
    };
    let mut recorder = Recorder::new(scope, limits);
    recorder.load_initial_image()?;
    let mut child = Command::new(setup.stub_exe)
        .arg("crash-test-exec")
        .arg("--")
        .args(setup.argv)
        .current_dir(setup.scratch)
        .env("TMPDIR", setup.tmpdir)
        // A Python writer would otherwise cache bytecode beside its sources, outside the
        // scratch directory, and be refused as escaping it.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(CrashTestError::io("starting the writer stub"))?;
    let root = Pid::from_raw(child.id() as i32);
    let options = Options::PTRACE_O_TRACESYSGOOD
        | Options::PTRACE_O_TRACECLONE
        | Options::PTRACE_O_TRACEFORK
        | Options::PTRACE_O_TRACEVFORK
        | Options::PTRACE_O_TRACEEXEC
        | Options::PTRACE_O_EXITKILL;
    if let Err(errno) = ptrace::seize(root, options) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(CrashTestError::Ptrace {
            during: "seizing the writer",
            source: errno,
        });
    }
    // Go: the stub execs the writer, which stops at PTRACE_EVENT_EXEC.
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(b"G");
    }
    let watchdog = Watchdog::start(root, recorder.live.clone(), limits.timeout_ms);
    let outcome = recorder.run(root);
    let timed_out = watchdog.stop();
    // The root was reaped by the trace loop; `child` only holds its pid now.
    drop(child);
    let exit = outcome?;
    if timed_out {
        return Err(CrashTestError::WriterTimedOut {
            timeout_ms: limits.timeout_ms,
        });
    }
    if let Some(refusal) = recorder.refusal.take() {
        return Err(refusal);
    }
    Ok(WriterRun {
        syscalls: recorder.syscalls,
        tasks: recorder.tasks,
        trace: recorder.trace,
        exit,
    })
}

/// Records `setup.argv` run in `setup.scratch`.
#[cfg(not(target_arch = "x86_64"))]
pub fn record(
    _setup: &WriterSetup<'_>,
    _limits: RecordLimits,
) -> Result<WriterRun, CrashTestError> {
    Err(CrashTestError::UnsupportedArch)
}

/// Kills the traced tree at the deadline, even when no tracee makes a stop.
struct Watchdog {
    done: std::sync::mpsc::Sender<()>,
    fired: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    fn start(root: Pid, live: Arc<Mutex<HashSet<i32>>>, timeout_ms: u64) -> Self {
        let (done, wait) = std::sync::mpsc::channel::<()>();
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let thread = std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                wait.recv_timeout(Duration::from_millis(timeout_ms))
            {
                flag.store(true, Ordering::SeqCst);
                kill_tree(root, &live);
            }
        });
        Watchdog {
            done,
            fired,
            thread,
        }
    }

    /// Stops the watchdog; whether it fired.
    fn stop(self) -> bool {
        let _ = self.done.send(());
        let _ = self.thread.join();
        self.fired.load(Ordering::SeqCst)
    }
}

fn kill_tree(root: Pid, live: &Mutex<HashSet<i32>>) {
    let _ = killpg(root, Signal::SIGKILL);
    let tids: Vec<i32> = match live.lock() {
        Ok(guard) => guard.iter().copied().collect(),
        Err(poisoned) => poisoned.into_inner().iter().copied().collect(),
    };
    for tid in tids {
        let _ = kill(Pid::from_raw(tid), Signal::SIGKILL);
    }
}

/// The scratch directory and the places outside it that a writer may write to.
struct Scope {
    root: PathBuf,
    allowed_outside: Vec<PathBuf>,
    /// The writer's stdout log, whose writes are stamped in the trace (acknowledgements).
    stdout_log: Option<PathBuf>,
}

enum Place {
    Inside(String),
    Outside(PathBuf),
}

impl Scope {
    /// `also_allowed`: the writer's TMPDIR and its stdout and stderr logs.
    fn new(scratch: &Path, also_allowed: &[&Path]) -> Result<Self, CrashTestError> {
        let root = scratch
            .canonicalize()
            .map_err(CrashTestError::io("resolving the scratch directory"))?;
        let mut allowed_outside = vec![PathBuf::from("/dev"), PathBuf::from("/proc")];
        for path in also_allowed {
            allowed_outside.push(
                path.canonicalize()
                    .map_err(CrashTestError::io("resolving the writer's TMPDIR and logs"))?,
            );
        }
        Ok(Scope {
            root,
            allowed_outside,
            stdout_log: None,
        })
    }

    fn place(&self, path: &Path) -> Place {
        match path.strip_prefix(&self.root) {
            Ok(rel) => Place::Inside(rel.to_string_lossy().trim_end_matches('/').to_owned()),
            Err(_) => Place::Outside(path.to_owned()),
        }
    }

    fn may_write_outside(&self, path: &Path) -> bool {
        self.allowed_outside.iter().any(|dir| path.starts_with(dir))
    }
}

/// The source of a write's bytes in the tracee.
#[derive(Clone, Copy, Debug)]
enum Source {
    Buffer(u64),
    Iovec { address: u64, count: u64 },
}

/// A call seen at entry, completed at exit.
#[derive(Clone, Debug)]
enum Pending {
    /// A call that records nothing (out of scope, or read-only).
    Nothing,
    /// execve: the next stop is its exit.
    Exec,
    Open {
        path: String,
        existed: bool,
        truncate: bool,
    },
    Write {
        inode: InodeId,
        offset: u64,
        source: Source,
    },
    Op(TraceOp),
    /// A write to the writer's stdout log: stamped where it completes.
    Stdout,
}

struct Recorder {
    scope: Scope,
    limits: RecordLimits,
    trace: Trace,
    inode_of: HashMap<(u64, u64), InodeId>,
    written_bytes: u64,
    /// Per traced thread: the call it is inside, if any.
    threads: HashMap<i32, Option<Pending>>,
    live: Arc<Mutex<HashSet<i32>>>,
    refusal: Option<CrashTestError>,
    started: bool,
    syscalls: u64,
    tasks: u64,
}

/// x86_64 system call arguments and number.
struct Call {
    nr: i64,
    args: [u64; 6],
}

const AT_FDCWD: i32 = -100;

impl Recorder {
    fn new(scope: Scope, limits: RecordLimits) -> Self {
        Recorder {
            scope,
            limits,
            trace: Trace::default(),
            inode_of: HashMap::new(),
            written_bytes: 0,
            threads: HashMap::new(),
            live: Arc::new(Mutex::new(HashSet::new())),
            refusal: None,
            started: false,
            syscalls: 0,
            tasks: 0,
        }
    }

    /// The scratch directory before the writer runs: the durable starting image.
    fn load_initial_image(&mut self) -> Result<(), CrashTestError> {
        let mut initial = BTreeMap::new();
        let mut loaded: u64 = 0;
        for entry in walkdir::WalkDir::new(&self.scope.root)
            .min_depth(1)
            .sort_by_file_name()
        {
            let entry = entry.map_err(|e| CrashTestError::Io {
                context: "reading the starting image".to_owned(),
                source: std::io::Error::other(e),
            })?;
            let rel = match self.scope.place(entry.path()) {
                Place::Inside(rel) => rel,
                Place::Outside(path) => {
                    return Err(CrashTestError::UnsupportedInitialEntry {
                        path: path.display().to_string(),
                    })
                }
            };
            let meta = entry.metadata().map_err(|e| CrashTestError::Io {
                context: format!("reading {rel}"),
                source: std::io::Error::other(e),
            })?;
            if meta.is_dir() {
                initial.insert(rel, InitialEntry::Dir);
            } else if meta.is_file() {
                let key = (meta.dev(), meta.ino());
                let inode = match self.inode_of.get(&key) {
                    Some(inode) => *inode,
                    None => {
                        loaded = loaded.saturating_add(meta.len());
                        if loaded > self.limits.max_initial_bytes {
                            return Err(CrashTestError::TraceOverLimits {
                                what: "bytes in the starting image",
                                limit: self.limits.max_initial_bytes,
                            });
                        }
                        let bytes = std::fs::read(entry.path())
                            .map_err(CrashTestError::io(format!("reading {rel}")))?;
                        let inode = self.trace.initial_contents.len();
                        self.trace.initial_contents.push(bytes);
                        self.inode_of.insert(key, inode);
                        inode
                    }
                };
                initial.insert(rel, InitialEntry::File(inode));
            } else {
                return Err(CrashTestError::UnsupportedInitialEntry { path: rel });
            }
        }
        self.trace.initial = initial;
        self.trace.inode_count = self.trace.initial_contents.len();
        Ok(())
    }

    fn track(&mut self, tid: Pid) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.threads.entry(tid.as_raw()) {
            slot.insert(None);
            self.tasks += 1;
            if let Ok(mut live) = self.live.lock() {
                live.insert(tid.as_raw());
            }
        }
    }

    fn untrack(&mut self, tid: Pid) {
        self.threads.remove(&tid.as_raw());
        if let Ok(mut live) = self.live.lock() {
            live.remove(&tid.as_raw());
        }
    }

    /// Resumes a stopped tracee: syscall stops once the writer runs, plain before.
    fn resume(&self, tid: Pid, signal: Option<Signal>) {
        // ESRCH: the tracee was killed meanwhile; its exit is reported by waitpid.
        let _ = if self.started {
            ptrace::syscall(tid, signal)
        } else {
            ptrace::cont(tid, signal)
        };
    }

    /// Refuses the run: remembers the first reason and kills the whole tree.
    fn refuse(&mut self, root: Pid, reason: CrashTestError) {
        if self.refusal.is_none() {
            self.refusal = Some(reason);
        }
        kill_tree(root, &self.live);
    }

    /// The trace loop: until every tracee is gone. Returns the root's exit.
    fn run(&mut self, root: Pid) -> Result<ExitOutcome, CrashTestError> {
        self.track(root);
        let mut root_exit = None;
        loop {
            let status = match waitpid(None, Some(WaitPidFlag::__WALL)) {
                Ok(status) => status,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECHILD) => break,
                Err(errno) => {
                    kill_tree(root, &self.live);
                    return Err(CrashTestError::Ptrace {
                        during: "waiting for the writer",
                        source: errno,
                    });
                }
            };
            match status {
                WaitStatus::PtraceEvent(tid, _, event) => {
                    self.track(tid);
                    if event == Event::PTRACE_EVENT_EXEC as i32 {
                        self.started = true;
                        self.threads.insert(tid.as_raw(), Some(Pending::Exec));
                    }
                    self.resume(tid, None);
                }
                WaitStatus::PtraceSyscall(tid) => {
                    self.track(tid);
                    self.on_syscall_stop(root, tid);
                    self.resume(tid, None);
                }
                WaitStatus::Stopped(tid, signal) => {
                    self.track(tid);
                    self.resume(tid, Some(signal));
                }
                WaitStatus::Exited(tid, code) => {
                    self.untrack(tid);
                    if tid == root {
                        root_exit = Some(ExitOutcome::Code(code));
                    }
                }
                WaitStatus::Signaled(tid, signal, _) => {
                    self.untrack(tid);
                    if tid == root {
                        root_exit = Some(ExitOutcome::Signal(signal as i32));
                    }
                }
                _ => {}
            }
        }
        Ok(root_exit.unwrap_or(ExitOutcome::Code(-1)))
    }

    fn on_syscall_stop(&mut self, root: Pid, tid: Pid) {
        let regs = match ptrace::getregs(tid) {
            Ok(regs) => regs,
            Err(_) => return,
        };
        let call = Call {
            nr: regs.orig_rax as i64,
            args: [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9],
        };
        let pending = self.threads.get_mut(&tid.as_raw()).and_then(Option::take);
        match pending {
            None => {
                self.syscalls += 1;
                match self.on_entry(tid, &call) {
                    Ok(pending) => {
                        self.threads.insert(tid.as_raw(), Some(pending));
                    }
                    Err(reason) => {
                        self.threads.insert(tid.as_raw(), Some(Pending::Nothing));
                        self.refuse(root, reason);
                    }
                }
            }
            Some(pending) => {
                let ret = regs.rax as i64;
                if ret >= 0 && self.refusal.is_none() {
                    if let Err(reason) = self.on_exit(tid, pending, ret as u64) {
                        self.refuse(root, reason);
                    }
                }
            }
        }
    }

    /// A system call's entry, dispatched by family: data (open, write, fsync, truncate),
    /// then the name space (mkdir, unlink, rename, link), then what is refused or ignored.
    fn on_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_open => self.open_entry(tid, AT_FDCWD, a[0], a[1], "open"),
            libc::SYS_creat => self.open_entry(
                tid,
                AT_FDCWD,
                a[0],
                (libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC) as u64,
                "creat",
            ),
            libc::SYS_openat => self.open_entry(tid, a[0] as i32, a[1], a[2], "openat"),
            libc::SYS_openat2 => {
                let how = read_memory(tid, a[2], 8)?;
                let flags = u64::from_ne_bytes(how.try_into().unwrap_or([0; 8]));
                self.open_entry(tid, a[0] as i32, a[1], flags, "openat2")
            }
            libc::SYS_write => self.write_entry(tid, a[0], None, Source::Buffer(a[1]), "write"),
            libc::SYS_pwrite64 => {
                self.write_entry(tid, a[0], Some(a[3]), Source::Buffer(a[1]), "pwrite64")
            }
            libc::SYS_writev => self.write_entry(
                tid,
                a[0],
                None,
                Source::Iovec {
                    address: a[1],
                    count: a[2],
                },
                "writev",
            ),
            libc::SYS_pwritev | libc::SYS_pwritev2 => {
                // pwritev2 with offset -1 writes at the file position, like writev.
                let offset = (a[3] as i64 >= 0).then_some(a[3]);
                self.write_entry(
                    tid,
                    a[0],
                    offset,
                    Source::Iovec {
                        address: a[1],
                        count: a[2],
                    },
                    "pwritev",
                )
            }
            libc::SYS_fsync | libc::SYS_fdatasync => self.fsync_entry(tid, a[0]),
            libc::SYS_sync | libc::SYS_syncfs => Ok(Pending::Op(TraceOp::SyncAll {
                entered_after: self.entry_stamp(),
            })),
            libc::SYS_truncate => {
                let path = self.path_arg(tid, AT_FDCWD, a[0])?;
                match self.scope.place(&path) {
                    Place::Inside(rel) => {
                        let inode = self.inode_at_path(&path, &rel, "truncate")?;
                        Ok(Pending::Op(TraceOp::Truncate { inode, len: a[1] }))
                    }
                    Place::Outside(path) => self.outside_write("truncate", &path),
                }
            }
            libc::SYS_ftruncate => match self.fd_place(tid, a[0])? {
                FdPlace::InsideFile(inode) => {
                    Ok(Pending::Op(TraceOp::Truncate { inode, len: a[1] }))
                }
                FdPlace::OutsideFile(path) => self.outside_write("ftruncate", &path),
                _ => Ok(Pending::Nothing),
            },
            _ => self.namespace_entry(tid, call),
        }
    }

    /// Entries that create, remove or rename names; anything else goes to [`Self::guard_entry`].
    fn namespace_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_mkdir => {
                self.entry_op(tid, AT_FDCWD, a[0], "mkdir", |path| TraceOp::Mkdir { path })
            }
            libc::SYS_mkdirat => self.entry_op(tid, a[0] as i32, a[1], "mkdirat", |path| {
                TraceOp::Mkdir { path }
            }),
            libc::SYS_rmdir => {
                self.entry_op(tid, AT_FDCWD, a[0], "rmdir", |path| TraceOp::Rmdir { path })
            }
            libc::SYS_unlink => self.entry_op(tid, AT_FDCWD, a[0], "unlink", |path| {
                TraceOp::Unlink { path }
            }),
            libc::SYS_unlinkat => {
                let remove_dir = a[2] & libc::AT_REMOVEDIR as u64 != 0;
                self.entry_op(tid, a[0] as i32, a[1], "unlinkat", |path| {
                    if remove_dir {
                        TraceOp::Rmdir { path }
                    } else {
                        TraceOp::Unlink { path }
                    }
                })
            }
            libc::SYS_rename => {
                self.rename_entry(tid, (AT_FDCWD, a[0]), (AT_FDCWD, a[1]), 0, "rename")
            }
            libc::SYS_renameat => {
                self.rename_entry(tid, (a[0] as i32, a[1]), (a[2] as i32, a[3]), 0, "renameat")
            }
            libc::SYS_renameat2 => self.rename_entry(
                tid,
                (a[0] as i32, a[1]),
                (a[2] as i32, a[3]),
                a[4],
                "renameat2",
            ),
            libc::SYS_link => self.link_entry(tid, (AT_FDCWD, a[0]), (AT_FDCWD, a[1])),
            libc::SYS_linkat => self.link_entry(tid, (a[0] as i32, a[1]), (a[2] as i32, a[3])),
            _ => self.guard_entry(tid, call),
        }
    }

    /// Entries the model refuses inside the scope (links it cannot follow, shared writable
    /// mappings, in-kernel copies, asynchronous I/O), `exec`, and everything else, ignored.
    fn guard_entry(&mut self, tid: Pid, call: &Call) -> Result<Pending, CrashTestError> {
        let a = call.args;
        match call.nr {
            libc::SYS_symlink => self.refuse_in_scope(tid, AT_FDCWD, a[1], "symlink"),
            libc::SYS_symlinkat => self.refuse_in_scope(tid, a[1] as i32, a[2], "symlinkat"),
            libc::SYS_mknod => self.refuse_in_scope(tid, AT_FDCWD, a[0], "mknod"),
            libc::SYS_mknodat => self.refuse_in_scope(tid, a[0] as i32, a[1], "mknodat"),
            libc::SYS_mmap => {
                let shared_writable = a[2] & libc::PROT_WRITE as u64 != 0
                    && a[3] & libc::MAP_SHARED as u64 != 0
                    && (a[4] as i32) >= 0;
                if shared_writable {
                    self.refuse_fd_in_scope(tid, a[4], "mmap", "a shared writable mapping")?;
                }
                Ok(Pending::Nothing)
            }
            libc::SYS_fallocate => {
                self.refuse_fd_in_scope(tid, a[0], "fallocate", "allocation")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_copy_file_range => {
                self.refuse_fd_in_scope(tid, a[2], "copy_file_range", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_sendfile => {
                self.refuse_fd_in_scope(tid, a[0], "sendfile", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_splice => {
                self.refuse_fd_in_scope(tid, a[2], "splice", "an in-kernel copy")?;
                Ok(Pending::Nothing)
            }
            libc::SYS_io_uring_setup => Err(unmodelled("io_uring_setup", "asynchronous I/O")),
            libc::SYS_io_submit => Err(unmodelled("io_submit", "asynchronous I/O")),
            libc::SYS_execve | libc::SYS_execveat => Ok(Pending::Exec),
            _ => Ok(Pending::Nothing),
        }
    }

    fn on_exit(&mut self, tid: Pid, pending: Pending, ret: u64) -> Result<(), CrashTestError> {
        match pending {
            Pending::Nothing | Pending::Exec => Ok(()),
            Pending::Open {
                path,
                existed,
                truncate,
            } => {
                let meta = std::fs::metadata(format!("/proc/{tid}/fd/{ret}")).map_err(
                    CrashTestError::io(format!("inspecting the file opened at {path}")),
                )?;
                let key = (meta.dev(), meta.ino());
                if !existed {
                    let inode = self.new_inode(key);
                    self.push(TraceOp::Create { path, inode })
                } else if truncate {
                    let inode = self.known_inode(key, &path, "open")?;
                    self.push(TraceOp::Truncate { inode, len: 0 })
                } else {
                    Ok(())
                }
            }
            Pending::Write {
                inode,
                offset,
                source,
            } => {
                if ret == 0 {
                    return Ok(());
                }
                let total = self.written_bytes.saturating_add(ret);
                if total > self.limits.max_written_bytes {
                    return Err(CrashTestError::TraceOverLimits {
                        what: "bytes written",
                        limit: self.limits.max_written_bytes,
                    });
                }
                self.written_bytes = total;
                let bytes = read_source(tid, source, ret)?;
                let data_at = self.trace.data.len();
                self.trace.data.extend_from_slice(&bytes);
                self.push(TraceOp::Write {
                    inode,
                    offset,
                    len: bytes.len() as u64,
                    data_at,
                })
            }
            Pending::Op(op) => self.push(op),
            Pending::Stdout => {
                if self.trace.stdout_writes.len() >= self.limits.max_operations {
                    return Err(CrashTestError::TraceOverLimits {
                        what: "writes to stdout",
                        limit: self.limits.max_operations as u64,
                    });
                }
                self.trace.stdout_writes.push(StdoutWrite {
                    after_operations: self.trace.ops.len(),
                    len: ret,
                });
                Ok(())
            }
        }
    }

    fn push(&mut self, op: TraceOp) -> Result<(), CrashTestError> {
        if self.trace.ops.len() >= self.limits.max_operations {
            return Err(CrashTestError::TraceOverLimits {
                what: "recorded operations",
                limit: self.limits.max_operations as u64,
            });
        }
        self.trace.ops.push(op);
        Ok(())
    }

    fn new_inode(&mut self, key: (u64, u64)) -> InodeId {
        let inode = self.trace.inode_count;
        self.trace.inode_count += 1;
        self.inode_of.insert(key, inode);
        inode
    }

    fn known_inode(
        &self,
        key: (u64, u64),
        path: &str,
        syscall: &'static str,
    ) -> Result<InodeId, CrashTestError> {
        self.inode_of.get(&key).copied().ok_or_else(|| {
            unmodelled(
                syscall,
                &format!("{path} is a file the recorder did not see created"),
            )
        })
    }

    fn inode_at_path(
        &self,
        path: &Path,
        rel: &str,
        syscall: &'static str,
    ) -> Result<InodeId, CrashTestError> {
        let meta =
            std::fs::metadata(path).map_err(CrashTestError::io(format!("inspecting {rel}")))?;
        self.known_inode((meta.dev(), meta.ino()), rel, syscall)
    }

    fn path_arg(&self, tid: Pid, dirfd: i32, address: u64) -> Result<PathBuf, CrashTestError> {
        let raw = read_c_string(tid, address)?;
        resolve(tid, dirfd, &raw)
    }

    fn outside_write(&self, syscall: &'static str, path: &Path) -> Result<Pending, CrashTestError> {
        if self.scope.may_write_outside(path) {
            Ok(Pending::Nothing)
        } else {
            Err(CrashTestError::Escape {
                syscall,
                path: path.display().to_string(),
            })
        }
    }

    fn open_entry(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        flags: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let flags = flags as i32;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY
            || flags & (libc::O_CREAT | libc::O_TRUNC) != 0;
        if !writes {
            return Ok(Pending::Nothing);
        }
        let path = self.path_arg(tid, dirfd, address)?;
        let rel = match self.scope.place(&path) {
            Place::Inside(rel) => rel,
            Place::Outside(path) => {
                // Opening a device or an existing directory for writing changes no file.
                let special = std::fs::metadata(&path)
                    .map(|m| !m.is_file() && !m.is_dir())
                    .unwrap_or(false);
                if special {
                    return Ok(Pending::Nothing);
                }
                return self.outside_write(syscall, &path);
            }
        };
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            return Err(unmodelled(syscall, "O_TMPFILE (an unnamed file)"));
        }
        if flags & libc::O_DIRECT != 0 {
            return Err(unmodelled(syscall, "O_DIRECT (bypasses the page cache)"));
        }
        let existed = std::fs::symlink_metadata(&path).is_ok();
        Ok(Pending::Open {
            path: rel,
            existed,
            truncate: flags & libc::O_TRUNC != 0,
        })
    }

    fn write_entry(
        &mut self,
        tid: Pid,
        fd: u64,
        offset: Option<u64>,
        source: Source,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(inode) => {
                let info = fd_info(tid, fd)?;
                if info.flags & libc::O_DIRECT as u64 != 0 {
                    return Err(unmodelled(syscall, "a descriptor opened with O_DIRECT"));
                }
                let offset = match offset {
                    Some(offset) => offset,
                    None if info.flags & libc::O_APPEND as u64 != 0 => {
                        std::fs::metadata(format!("/proc/{tid}/fd/{fd}"))
                            .map_err(CrashTestError::io("sizing an O_APPEND file"))?
                            .len()
                    }
                    None => info.position,
                };
                Ok(Pending::Write {
                    inode,
                    offset,
                    source,
                })
            }
            FdPlace::OutsideFile(path) if self.scope.stdout_log.as_deref() == Some(&path) => {
                Ok(Pending::Stdout)
            }
            FdPlace::OutsideFile(path) => self.outside_write(syscall, &path),
            FdPlace::InsideDir(_) | FdPlace::Other => Ok(Pending::Nothing),
        }
    }

    /// The trace length now: what a durability call entered now can make durable.
    fn entry_stamp(&self) -> usize {
        self.trace.ops.len()
    }

    fn fsync_entry(&mut self, tid: Pid, fd: u64) -> Result<Pending, CrashTestError> {
        let entered_after = self.entry_stamp();
        Ok(match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(inode) => Pending::Op(TraceOp::Fsync {
                inode,
                entered_after,
            }),
            FdPlace::InsideDir(path) => Pending::Op(TraceOp::FsyncDir {
                path,
                entered_after,
            }),
            FdPlace::OutsideFile(_) | FdPlace::Other => Pending::Nothing,
        })
    }

    fn entry_op(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        syscall: &'static str,
        op: impl FnOnce(String) -> TraceOp,
    ) -> Result<Pending, CrashTestError> {
        let path = self.path_arg(tid, dirfd, address)?;
        match self.scope.place(&path) {
            Place::Inside(rel) if rel.is_empty() => Err(unmodelled(
                syscall,
                "an operation on the scratch directory itself",
            )),
            Place::Inside(rel) => Ok(Pending::Op(op(rel))),
            Place::Outside(path) => self.outside_write(syscall, &path),
        }
    }

    fn rename_entry(
        &mut self,
        tid: Pid,
        from: (i32, u64),
        to: (i32, u64),
        flags: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let from_path = self.path_arg(tid, from.0, from.1)?;
        let to_path = self.path_arg(tid, to.0, to.1)?;
        let (from_rel, to_rel) = match (self.scope.place(&from_path), self.scope.place(&to_path)) {
            (Place::Inside(a), Place::Inside(b)) => (a, b),
            (Place::Outside(_), Place::Outside(b)) => return self.outside_write(syscall, &b),
            (Place::Outside(a), Place::Inside(_)) => {
                return Err(CrashTestError::Escape {
                    syscall,
                    path: a.display().to_string(),
                })
            }
            (Place::Inside(_), Place::Outside(b)) => {
                return Err(CrashTestError::Escape {
                    syscall,
                    path: b.display().to_string(),
                })
            }
        };
        if flags & !(libc::RENAME_NOREPLACE as u64) != 0 {
            return Err(unmodelled(syscall, "RENAME_EXCHANGE or RENAME_WHITEOUT"));
        }
        if std::fs::symlink_metadata(&from_path)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            return Err(unmodelled(syscall, "a directory rename"));
        }
        Ok(Pending::Op(TraceOp::Rename {
            from: from_rel,
            to: to_rel,
            noreplace: flags & libc::RENAME_NOREPLACE as u64 != 0,
        }))
    }

    fn link_entry(
        &mut self,
        tid: Pid,
        from: (i32, u64),
        to: (i32, u64),
    ) -> Result<Pending, CrashTestError> {
        let from_path = self.path_arg(tid, from.0, from.1)?;
        let to_path = self.path_arg(tid, to.0, to.1)?;
        match (self.scope.place(&from_path), self.scope.place(&to_path)) {
            (Place::Inside(from_rel), Place::Inside(to_rel)) => {
                let inode = self.inode_at_path(&from_path, &from_rel, "link")?;
                Ok(Pending::Op(TraceOp::Link {
                    path: to_rel,
                    inode,
                }))
            }
            (_, Place::Outside(b)) => self.outside_write("link", &b),
            (Place::Outside(a), Place::Inside(_)) => Err(CrashTestError::Escape {
                syscall: "link",
                path: a.display().to_string(),
            }),
        }
    }

    fn refuse_in_scope(
        &mut self,
        tid: Pid,
        dirfd: i32,
        address: u64,
        syscall: &'static str,
    ) -> Result<Pending, CrashTestError> {
        let path = self.path_arg(tid, dirfd, address)?;
        match self.scope.place(&path) {
            Place::Inside(rel) => Err(unmodelled(syscall, &format!("creating {rel}"))),
            Place::Outside(path) => self.outside_write(syscall, &path),
        }
    }

    fn refuse_fd_in_scope(
        &mut self,
        tid: Pid,
        fd: u64,
        syscall: &'static str,
        what: &str,
    ) -> Result<(), CrashTestError> {
        match self.fd_place(tid, fd)? {
            FdPlace::InsideFile(_) => Err(unmodelled(
                syscall,
                &format!("{what} of a file in the scratch directory"),
            )),
            FdPlace::OutsideFile(path) => self.outside_write(syscall, &path).map(drop),
            FdPlace::InsideDir(_) | FdPlace::Other => Ok(()),
        }
    }

    fn fd_place(&self, tid: Pid, fd: u64) -> Result<FdPlace, CrashTestError> {
        let link = format!("/proc/{tid}/fd/{fd}");
        let Ok(target) = std::fs::read_link(&link) else {
            return Ok(FdPlace::Other);
        };
        if !target.as_os_str().as_bytes().starts_with(b"/") {
            return Ok(FdPlace::Other); // pipe:, socket:, anon_inode:
        }
        let Ok(meta) = std::fs::metadata(&link) else {
            return Ok(FdPlace::Other);
        };
        let target = strip_deleted(target);
        match self.scope.place(&target) {
            Place::Inside(rel) if meta.is_dir() => Ok(FdPlace::InsideDir(rel)),
            Place::Inside(rel) if meta.is_file() => Ok(FdPlace::InsideFile(self.known_inode(
                (meta.dev(), meta.ino()),
                &rel,
                "write",
            )?)),
            Place::Outside(path) if meta.is_file() => Ok(FdPlace::OutsideFile(path)),
            _ => Ok(FdPlace::Other),
        }
    }
}

enum FdPlace {
    InsideFile(InodeId),
    InsideDir(String),
    OutsideFile(PathBuf),
    Other,
}

fn unmodelled(syscall: &'static str, detail: &str) -> CrashTestError {
    CrashTestError::Unmodelled {
        syscall,
        detail: detail.to_owned(),
        followed: FOLLOWED,
    }
}

fn strip_deleted(path: PathBuf) -> PathBuf {
    let bytes = path.as_os_str().as_bytes();
    match bytes.strip_suffix(b" (deleted)") {
        Some(stripped) => PathBuf::from(std::ffi::OsStr::from_bytes(stripped)),
        None => path,
    }
}

/// The `pos:` and `flags:` lines of `/proc/TID/fdinfo/FD`.
struct FdInfo {
    position: u64,
    flags: u64,
}

fn fd_info(tid: Pid, fd: u64) -> Result<FdInfo, CrashTestError> {
    let text = std::fs::read_to_string(format!("/proc/{tid}/fdinfo/{fd}"))
        .map_err(CrashTestError::io("reading a descriptor's position"))?;
    let field = |name: &str, radix: u32| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|value| u64::from_str_radix(value.trim(), radix).ok())
    };
    match (field("pos:", 10), field("flags:", 8)) {
        (Some(position), Some(flags)) => Ok(FdInfo { position, flags }),
        _ => Err(CrashTestError::Io {
            context: "reading a descriptor's position".to_owned(),
            source: std::io::Error::other("fdinfo without pos or flags"),
        }),
    }
}

/// Reads `len` bytes of a tracee's memory.
fn read_memory(tid: Pid, address: u64, len: u64) -> Result<Vec<u8>, CrashTestError> {
    let len = usize::try_from(len).map_err(|_| CrashTestError::TraceOverLimits {
        what: "bytes in one call",
        limit: usize::MAX as u64,
    })?;
    let mem = std::fs::File::open(format!("/proc/{tid}/mem"))
        .map_err(CrashTestError::io("opening the writer's memory"))?;
    let mut out = vec![0u8; len];
    mem.read_exact_at(&mut out, address)
        .map_err(CrashTestError::io("reading the writer's memory"))?;
    Ok(out)
}

/// A NUL-terminated path argument (at most PATH_MAX bytes).
fn read_c_string(tid: Pid, address: u64) -> Result<Vec<u8>, CrashTestError> {
    const PATH_MAX: usize = 4096;
    let mem = std::fs::File::open(format!("/proc/{tid}/mem"))
        .map_err(CrashTestError::io("opening the writer's memory"))?;
    let mut out = Vec::new();
    let mut chunk = [0u8; 256];
    while out.len() < PATH_MAX {
        let at = address.saturating_add(out.len() as u64);
        let read = mem
            .read_at(&mut chunk, at)
            .map_err(CrashTestError::io("reading a path argument"))?;
        if read == 0 {
            break;
        }
        if let Some(nul) = chunk[..read].iter().position(|&b| b == 0) {
            out.extend_from_slice(&chunk[..nul]);
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..read]);
    }
    Err(CrashTestError::TraceOverLimits {
        what: "path length",
        limit: PATH_MAX as u64,
    })
}

/// The bytes a write call wrote (`written` of them).
fn read_source(tid: Pid, source: Source, written: u64) -> Result<Vec<u8>, CrashTestError> {
    match source {
        Source::Buffer(address) => read_memory(tid, address, written),
        Source::Iovec { address, count } => {
            const IOV_MAX: u64 = 1024;
            let count = count.min(IOV_MAX);
            let table = read_memory(tid, address, count * 16)?;
            let mut out = Vec::new();
            for entry in table.chunks_exact(16) {
                let remaining = written - out.len() as u64;
                if remaining == 0 {
                    break;
                }
                let base = u64::from_ne_bytes(entry[..8].try_into().unwrap_or([0; 8]));
                let len = u64::from_ne_bytes(entry[8..].try_into().unwrap_or([0; 8]));
                out.extend(read_memory(tid, base, len.min(remaining))?);
            }
            Ok(out)
        }
    }
}

/// An absolute, lexically normalised path for a path argument.
fn resolve(tid: Pid, dirfd: i32, raw: &[u8]) -> Result<PathBuf, CrashTestError> {
    let path = Path::new(std::ffi::OsStr::from_bytes(raw));
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        let base = if dirfd == AT_FDCWD {
            format!("/proc/{tid}/cwd")
        } else {
            format!("/proc/{tid}/fd/{dirfd}")
        };
        let base = std::fs::read_link(&base)
            .map_err(CrashTestError::io("resolving a relative path argument"))?;
        strip_deleted(base).join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => out.push(name),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    Ok(out)
}
