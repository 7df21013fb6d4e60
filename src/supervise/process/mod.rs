//! Child-process supervision: spawn, signal exactly, wait with a deadline, reap, record.
//!
//! Every child runs in its own process group and is addressed through a pidfd, so a
//! signal can never reach a recycled pid. Every wait has a deadline. A `Supervisor` owns
//! its children: `teardown` (and `Drop`) sends SIGTERM, waits a grace period, sends
//! SIGKILL and reaps, so no child outlives its owner or is left a zombie. Each exit is
//! recorded once as an `ExitRecord` (role, session, rank, code or signal) in one event
//! list, from which reports are built. Every child is started from a [`ChildSpec`]; the
//! rooms that own a kind of child build its argv (the trainer its workers, the crash
//! harness its publishers and recoveries).
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
use std::time::{Duration, Instant};

pub use rustix::process::Signal;

mod child;
mod error;
mod spec;

pub use child::*;
pub use error::*;
pub use spec::*;

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
    use std::process::Command;

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
