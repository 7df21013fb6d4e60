//! One supervised child: spawned in its own group, addressed by pidfd, reaped once.
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::core::interrupt;
use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Resource, Rlimit};

use rustix::process::Signal;

use super::*;

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
    pub(super) exit: Option<ExitRecord>,
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
    pub(super) fn wait_for_exit(
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
