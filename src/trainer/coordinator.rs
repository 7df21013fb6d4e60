//! A coordinator session: one fixed group of W worker processes for some steps.
//!
//! The session owns its workers (a `Supervisor`), their sockets and a mirror of the full
//! logical state. Per step it plans the micro-batches from the global cursor, sends each
//! worker the micro-batches it owns (`m mod W`), sums the returned gradients in logical
//! order, sends each worker the reduced slices of the chunks it owns (`c mod W`) and
//! takes back the updated chunks. Any failure — a dead worker, a timeout, a malformed or
//! unexpected reply — tears the whole group down (SIGTERM, grace, SIGKILL, reap) and is
//! returned as an error naming the rank; nothing waits without a deadline.
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::core::logical::LogicalState;
use crate::core::sampling::SampleStream;
use crate::core::topology::{Topology, TopologyError};
use crate::supervise::ipc::{self, FramedStream, IpcError};
use crate::supervise::process::{
    ChildSpec, ExitRecord, ProcessError, Supervisor, TEARDOWN_GRACE_MS,
};

use crate::core::step::{self, MicroBatchGradient, SplitView, StepError, StepOutcome};
use crate::trainer::engines::EngineKind;
use crate::trainer::protocol::{Message, ProtocolError};

/// Options of one session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The `shardlift` binary that runs `worker`.
    pub shardlift_exe: PathBuf,
    pub workers: u32,
    /// A label for exit records and messages (e.g. "reference").
    pub session: String,
    /// Deadline for each reply from a worker.
    pub step_timeout_ms: u64,
    /// Deadline for all workers to connect.
    pub connect_timeout_ms: u64,
    /// The gradient engine the workers run.
    pub engine: EngineKind,
}

impl SessionOptions {
    pub fn new(shardlift_exe: impl Into<PathBuf>, workers: u32, session: &str) -> Self {
        SessionOptions {
            shardlift_exe: shardlift_exe.into(),
            workers,
            session: session.to_owned(),
            step_timeout_ms: 120_000,
            connect_timeout_ms: 60_000,
            engine: EngineKind::Tch,
        }
    }

    /// The same options with workers running `engine`.
    pub fn with_engine(mut self, engine: EngineKind) -> Self {
        self.engine = engine;
        self
    }
}

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error(transparent)]
    Topology(#[from] TopologyError),
    #[error("cannot prepare the socket directory {path}: {source}")]
    SocketDirectory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error("worker connection: {0}")]
    Accept(IpcError),
    #[error("worker rank {rank}: {source}{exit}")]
    Ipc {
        rank: u32,
        source: IpcError,
        exit: ExitNote,
    },
    #[error("worker rank {rank} sent an undecodable message: {source}")]
    Protocol { rank: u32, source: ProtocolError },
    #[error("worker rank {rank} sent {got} where {expected} was expected")]
    UnexpectedMessage {
        rank: u32,
        expected: &'static str,
        got: &'static str,
    },
    #[error("worker rank {rank} reported a failure: {message}")]
    WorkerFailure { rank: u32, message: String },
    #[error("worker rank {rank} replied inconsistently: {reason}")]
    BadReply { rank: u32, reason: String },
    #[error("a worker exited before the session finished: {role} rank {rank:?} ({outcome})", role = .0.role, rank = .0.rank, outcome = .0.outcome)]
    WorkerExited(ExitRecord),
    #[error("worker rank {rank} ended with {outcome} at shutdown", outcome = .record.outcome)]
    UncleanExit { rank: u32, record: ExitRecord },
    #[error(transparent)]
    Step(#[from] StepError),
}

/// How a failed worker ended, appended to IPC errors once the group is reaped.
#[derive(Debug, Default)]
pub struct ExitNote(pub Option<ExitRecord>);

impl std::fmt::Display for ExitNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(record) => write!(f, " (the worker ended with {})", record.outcome),
            None => Ok(()),
        }
    }
}

static SOCKET_SERIAL: AtomicU32 = AtomicU32::new(0);

/// A private directory for the session's socket, removed on drop. Kept short: sun_path
/// holds 108 bytes, and run directories can be deep.
#[derive(Debug)]
struct SocketDirectory(PathBuf);

impl SocketDirectory {
    fn create() -> Result<Self, SessionError> {
        let serial = SOCKET_SERIAL.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sl-{}-{serial}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| SessionError::SocketDirectory {
                path: path.clone(),
                source,
            })?;
        Ok(SocketDirectory(path))
    }
}

impl Drop for SocketDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running session.
#[derive(Debug)]
pub struct CoordinatorSession {
    options: SessionOptions,
    topology: Topology,
    supervisor: Supervisor,
    /// Child index in `supervisor` for each rank.
    child_of_rank: Vec<usize>,
    connections: Vec<FramedStream>,
    state: LogicalState,
    _socket_directory: SocketDirectory,
}

impl CoordinatorSession {
    /// Spawns the workers, accepts their checked connections and hands each its chunks.
    pub fn start(options: SessionOptions, state: LogicalState) -> Result<Self, SessionError> {
        let topology = Topology::new(options.workers)?;
        let socket_directory = SocketDirectory::create()?;
        let socket_path = socket_directory.0.join("c");
        let listener = ipc::bind(&socket_path).map_err(SessionError::Accept)?;
        let mut supervisor = Supervisor::new();
        let mut child_of_rank = Vec::new();
        for rank in 0..topology.workers() {
            let spec = ChildSpec::new(&options.shardlift_exe, "worker", &options.session)
                .arg("worker")
                .arg("--socket")
                .arg(socket_path.as_os_str())
                .arg("--rank")
                .arg(rank.to_string())
                .arg("--engine")
                .arg(options.engine.name())
                .env("OMP_NUM_THREADS", "1")
                .env("MKL_NUM_THREADS", "1")
                .rank(rank);
            child_of_rank.push(supervisor.spawn(spec)?);
        }
        let mut by_rank: Vec<Option<FramedStream>> =
            (0..topology.workers()).map(|_| None).collect();
        for _ in 0..topology.workers() {
            let live = supervisor.live_pids();
            let accepted = ipc::accept_checked(
                &listener,
                options.connect_timeout_ms,
                |pid| live.contains(&pid),
                || match supervisor.poll_exited() {
                    Ok(Some(record)) => Err(IpcError::Malformed {
                        peer: format!("worker rank {:?}", record.rank),
                        reason: format!("exited before connecting ({})", record.outcome),
                    }),
                    _ => Ok(()),
                },
            );
            let (stream, pid) = match accepted {
                Ok(pair) => pair,
                Err(error) => {
                    supervisor.teardown(TEARDOWN_GRACE_MS);
                    return Err(SessionError::Accept(error));
                }
            };
            let mut framed =
                FramedStream::new(stream, format!("worker pid {pid}"), options.step_timeout_ms)
                    .map_err(SessionError::Accept)?;
            let hello = framed
                .receive()
                .map_err(SessionError::Accept)
                .and_then(|bytes| {
                    Message::decode(&bytes).map_err(|source| SessionError::Protocol {
                        rank: u32::MAX,
                        source,
                    })
                });
            let rank = match hello {
                Ok(Message::Hello { rank }) => rank,
                Ok(other) => {
                    supervisor.teardown(TEARDOWN_GRACE_MS);
                    return Err(SessionError::UnexpectedMessage {
                        rank: u32::MAX,
                        expected: "hello",
                        got: other.kind(),
                    });
                }
                Err(error) => {
                    supervisor.teardown(TEARDOWN_GRACE_MS);
                    return Err(error);
                }
            };
            // The rank claimed must be the rank we spawned at that pid.
            let expected_pid = child_of_rank
                .get(rank as usize)
                .and_then(|&index| supervisor.children().get(index))
                .map(|child| child.pid());
            if expected_pid != Some(pid) || by_rank[rank as usize].is_some() {
                supervisor.teardown(TEARDOWN_GRACE_MS);
                return Err(SessionError::BadReply {
                    rank,
                    reason: format!("pid {pid} claimed rank {rank}"),
                });
            }
            by_rank[rank as usize] = Some(framed);
        }
        let connections: Vec<FramedStream> = by_rank.into_iter().flatten().collect();
        let mut session = CoordinatorSession {
            options,
            topology,
            supervisor,
            child_of_rank,
            connections,
            state,
            _socket_directory: socket_directory,
        };
        for rank in 0..topology.workers() {
            let chunks = session
                .state
                .chunks
                .iter()
                .filter(|c| topology.chunk_owner(c.id) == rank)
                .cloned()
                .collect();
            let init = Message::Init {
                workers: topology.workers(),
                hyperparameters: session.state.hyperparameters,
                chunks,
            };
            session.send(rank, &init)?;
        }
        Ok(session)
    }

    pub fn state(&self) -> &LogicalState {
        &self.state
    }

    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Every exit reaped so far.
    pub fn exits(&self) -> Vec<ExitRecord> {
        self.supervisor.exits()
    }

    /// Pid of the worker with `rank` (for tests that kill one).
    pub fn worker_pid(&self, rank: u32) -> Option<u32> {
        let index = *self.child_of_rank.get(rank as usize)?;
        self.supervisor.children().get(index).map(|c| c.pid())
    }

    fn fail(&mut self, error: SessionError) -> SessionError {
        self.supervisor.teardown(TEARDOWN_GRACE_MS);
        match error {
            SessionError::Ipc { rank, source, .. } => {
                let record = self
                    .child_of_rank
                    .get(rank as usize)
                    .and_then(|&index| self.supervisor.children().get(index))
                    .and_then(|child| child.exit_record().cloned());
                SessionError::Ipc {
                    rank,
                    source,
                    exit: ExitNote(record),
                }
            }
            other => other,
        }
    }

    fn send(&mut self, rank: u32, message: &Message) -> Result<(), SessionError> {
        let result = self.connections[rank as usize].send(&message.encode());
        result.map_err(|source| {
            self.fail(SessionError::Ipc {
                rank,
                source,
                exit: ExitNote(None),
            })
        })
    }

    fn receive(&mut self, rank: u32) -> Result<Message, SessionError> {
        let bytes = match self.connections[rank as usize].receive() {
            Ok(bytes) => bytes,
            Err(source) => {
                return Err(self.fail(SessionError::Ipc {
                    rank,
                    source,
                    exit: ExitNote(None),
                }))
            }
        };
        match Message::decode(&bytes) {
            Ok(Message::Failure { message }) => {
                Err(self.fail(SessionError::WorkerFailure { rank, message }))
            }
            Ok(message) => Ok(message),
            Err(source) => Err(self.fail(SessionError::Protocol { rank, source })),
        }
    }

    fn bad_reply(&mut self, rank: u32, reason: String) -> SessionError {
        self.fail(SessionError::BadReply { rank, reason })
    }

    /// Runs one optimizer step across the group.
    pub fn step(
        &mut self,
        stream: &mut SampleStream,
        train: SplitView<'_>,
    ) -> Result<StepOutcome, SessionError> {
        let batches = match step::plan_step(&self.state, stream, train) {
            Ok(batches) => batches,
            Err(error) => return Err(self.fail(error.into())),
        };
        let next_step = self.state.step + 1;
        let parameters = self.state.flat_parameters();
        let workers = self.topology.workers();
        for rank in 0..workers {
            let owned = batches
                .iter()
                .filter(|b| self.topology.micro_batch_owner(b.index) == rank)
                .cloned()
                .collect();
            self.send(
                rank,
                &Message::Compute {
                    step: next_step,
                    parameters: parameters.clone(),
                    batches: owned,
                },
            )?;
        }
        let mut results: Vec<MicroBatchGradient> = Vec::new();
        for rank in 0..workers {
            match self.receive(rank)? {
                Message::Gradients {
                    step,
                    results: mine,
                } if step == next_step => {
                    if let Some(bad) = mine
                        .iter()
                        .find(|r| self.topology.micro_batch_owner(r.index) != rank)
                    {
                        let reason = format!("returned micro-batch {} it does not own", bad.index);
                        return Err(self.bad_reply(rank, reason));
                    }
                    results.extend(mine);
                }
                Message::Gradients { step, .. } => {
                    return Err(self.bad_reply(
                        rank,
                        format!("gradients for step {step}, expected {next_step}"),
                    ))
                }
                other => {
                    let got = other.kind();
                    return Err(self.fail(SessionError::UnexpectedMessage {
                        rank,
                        expected: "gradients",
                        got,
                    }));
                }
            }
        }
        let (loss, gradient) = match step::reduce_in_logical_order(
            results,
            self.state.hyperparameters.logical_micro_batches,
        ) {
            Ok(reduced) => reduced,
            Err(error) => return Err(self.fail(error.into())),
        };
        let hyperparameters = self.state.hyperparameters;
        for rank in 0..workers {
            let gradients = (0..hyperparameters.chunk_count() as u32)
                .filter(|&id| self.topology.chunk_owner(id) == rank)
                .map(|id| {
                    (
                        id,
                        gradient[hyperparameters.chunk_range(id as usize)].to_vec(),
                    )
                })
                .collect();
            self.send(
                rank,
                &Message::Update {
                    step: next_step,
                    gradients,
                },
            )?;
        }
        for rank in 0..workers {
            match self.receive(rank)? {
                Message::Chunks { step, chunks } if step == next_step => {
                    for chunk in chunks {
                        let id = chunk.id as usize;
                        let owned = self.topology.chunk_owner(chunk.id) == rank;
                        let fits = self.state.chunks.get(id).is_some_and(|old| {
                            old.parameters.len() == chunk.parameters.len()
                                && old.exp_avg.len() == chunk.exp_avg.len()
                                && old.exp_avg_sq.len() == chunk.exp_avg_sq.len()
                        });
                        if !owned || !fits {
                            return Err(self.bad_reply(
                                rank,
                                format!("returned chunk {id} it does not own or of the wrong size"),
                            ));
                        }
                        self.state.chunks[id] = chunk;
                    }
                }
                other => {
                    let got = other.kind();
                    return Err(self.fail(SessionError::UnexpectedMessage {
                        rank,
                        expected: "chunks",
                        got,
                    }));
                }
            }
        }
        step::advance_counters(&mut self.state, &batches);
        Ok(StepOutcome {
            step: self.state.step,
            loss,
        })
    }

    /// Shuts every worker down, waits for each to exit 0, and returns the state and the
    /// session's exit records.
    pub fn finish(mut self) -> Result<(LogicalState, Vec<ExitRecord>), SessionError> {
        for rank in 0..self.topology.workers() {
            self.send(rank, &Message::Shutdown)?;
        }
        for rank in 0..self.topology.workers() {
            match self.receive(rank)? {
                Message::Bye => {}
                other => {
                    let got = other.kind();
                    return Err(self.fail(SessionError::UnexpectedMessage {
                        rank,
                        expected: "bye",
                        got,
                    }));
                }
            }
        }
        if let Err(error) = self.supervisor.wait_all(self.options.step_timeout_ms) {
            return Err(self.fail(error.into()));
        }
        let exits = self.supervisor.exits();
        if let Some(record) = exits.iter().find(|record| !record.outcome.success()) {
            return Err(SessionError::UncleanExit {
                rank: record.rank.unwrap_or(u32::MAX),
                record: record.clone(),
            });
        }
        Ok((self.state.clone(), exits))
    }
}
