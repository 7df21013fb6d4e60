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

use crate::lab::crash_model::trace::{InitialEntry, InodeId, StdoutWrite, Trace, TraceOp};
use crate::lab::external::error::CrashTestError;
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
}

mod entry;
mod tracee;
use tracee::*;
