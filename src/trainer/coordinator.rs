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
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::core::logical::{ChunkState, LogicalState};
use crate::core::sampling::SampleStream;
use crate::core::topology::{Topology, TopologyError};
use crate::supervise::ipc::{self, FramedStream, IpcError};
use crate::supervise::process::{
    ChildSpec, ExitRecord, ProcessError, ShardliftChild, Supervisor, TEARDOWN_GRACE_MS,
};

use crate::core::step::{self, MicroBatch, SplitView, StepError, StepOutcome};
use crate::trainer::engines::EngineKind;
use crate::trainer::protocol::{self, GradientBytes, GradientsView, Message, ProtocolError};

/// Options of one session.
#[derive(Clone, Debug)]
pub struct SessionOptions {
    /// The `shardlift` binary that runs `worker`.
    pub shardlift_exe: PathBuf,
    /// W, the number of worker processes (and of ranks).
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
    /// Options for `workers` workers of `shardlift_exe` labelled `session`: a 120 s reply
    /// deadline, a 60 s connect deadline and the tch engine.
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
    /// The worker count is not a valid topology.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// The private directory for the session's socket could not be created.
    #[error("cannot prepare the socket directory {path}: {source}")]
    SocketDirectory {
        /// The directory concerned.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Starting, signalling or reaping a worker failed.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// Binding the socket or accepting a worker's connection failed.
    #[error("worker connection: {0}")]
    Accept(IpcError),
    /// Talking to a connected worker failed; `exit` says how it ended, once reaped.
    #[error("worker rank {rank}: {source}{exit}")]
    Ipc {
        /// The worker's rank.
        rank: u32,
        /// The underlying error.
        source: IpcError,
        /// The worker's exit, when the group has been reaped.
        exit: ExitNote,
    },
    /// A worker's frame is not a well-formed message.
    #[error("worker rank {rank} sent an undecodable message: {source}")]
    Protocol {
        /// The worker's rank.
        rank: u32,
        /// Why it could not be decoded.
        source: ProtocolError,
    },
    /// A worker sent a well-formed message of the wrong kind for this point of the step.
    #[error("worker rank {rank} sent {got} where {expected} was expected")]
    UnexpectedMessage {
        /// The worker's rank.
        rank: u32,
        /// The kind of message expected.
        expected: &'static str,
        /// The kind received.
        got: &'static str,
    },
    /// A worker reported that it failed.
    #[error("worker rank {rank} reported a failure: {message}")]
    WorkerFailure {
        /// The worker's rank.
        rank: u32,
        /// Its message.
        message: String,
    },
    /// A worker's reply is well-formed but inconsistent with what it was sent (wrong
    /// micro-batches, chunks or sizes, or a rank claimed from the wrong pid).
    #[error("worker rank {rank} replied inconsistently: {reason}")]
    BadReply {
        /// The worker's rank.
        rank: u32,
        /// What is inconsistent.
        reason: String,
    },
    /// A worker exited before the session finished.
    #[error("a worker exited before the session finished: {role} rank {rank:?} ({outcome})", role = .0.role, rank = .0.rank, outcome = .0.outcome)]
    WorkerExited(ExitRecord),
    /// At shutdown a worker ended other than with exit code 0.
    #[error("worker rank {rank} ended with {outcome} at shutdown", outcome = .record.outcome)]
    UncleanExit {
        /// The worker's rank (`u32::MAX` if its record has none).
        rank: u32,
        /// Its exit record.
        record: ExitRecord,
    },
    /// The step arithmetic refused the gathered gradients or the update.
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

/// Starts one `shardlift worker` per rank; returns each rank's child index.
fn spawn_workers(
    supervisor: &mut Supervisor,
    options: &SessionOptions,
    topology: Topology,
    socket_path: &Path,
) -> Result<Vec<usize>, SessionError> {
    let mut child_of_rank = Vec::new();
    for rank in 0..topology.workers() {
        let worker = ShardliftChild::Worker {
            socket: socket_path,
            rank,
            engine: options.engine.name(),
        };
        let spec = ChildSpec::shardlift(&options.shardlift_exe, &options.session, worker);
        child_of_rank.push(supervisor.spawn(spec)?);
    }
    Ok(child_of_rank)
}

/// Accepts one checked connection per rank, ordered by rank. The caller tears the group
/// down on failure.
fn accept_workers(
    listener: &UnixListener,
    supervisor: &mut Supervisor,
    child_of_rank: &[usize],
    options: &SessionOptions,
) -> Result<Vec<FramedStream>, SessionError> {
    let mut by_rank: Vec<Option<FramedStream>> = child_of_rank.iter().map(|_| None).collect();
    for _ in 0..child_of_rank.len() {
        let (rank, pid, framed) = accept_hello(listener, supervisor, options)?;
        // The rank claimed must be the rank we spawned at that pid.
        let expected_pid = child_of_rank
            .get(rank as usize)
            .and_then(|&index| supervisor.children().get(index))
            .map(|child| child.pid());
        match by_rank.get_mut(rank as usize) {
            Some(slot @ None) if expected_pid == Some(pid) => *slot = Some(framed),
            _ => {
                return Err(SessionError::BadReply {
                    rank,
                    reason: format!("pid {pid} claimed rank {rank}"),
                })
            }
        }
    }
    Ok(by_rank.into_iter().flatten().collect())
}

/// Accepts the next connection from a live worker and reads its `Hello`: the claimed
/// rank, the peer's pid and the connection.
fn accept_hello(
    listener: &UnixListener,
    supervisor: &mut Supervisor,
    options: &SessionOptions,
) -> Result<(u32, u32, FramedStream), SessionError> {
    let live = supervisor.live_pids();
    let (stream, pid) = ipc::accept_checked(
        listener,
        options.connect_timeout_ms,
        |pid| live.contains(&pid),
        || match supervisor.poll_exited() {
            Ok(Some(record)) => Err(IpcError::Malformed {
                peer: format!("worker rank {:?}", record.rank),
                reason: format!("exited before connecting ({})", record.outcome),
            }),
            _ => Ok(()),
        },
    )
    .map_err(SessionError::Accept)?;
    let mut framed =
        FramedStream::new(stream, format!("worker pid {pid}"), options.step_timeout_ms)
            .map_err(SessionError::Accept)?;
    let hello = framed.receive().map_err(SessionError::Accept)?;
    match Message::decode(&hello) {
        Ok(Message::Hello { rank }) => Ok((rank, pid, framed)),
        Ok(other) => Err(SessionError::UnexpectedMessage {
            rank: u32::MAX,
            expected: "hello",
            got: other.kind(),
        }),
        Err(source) => Err(SessionError::Protocol {
            rank: u32::MAX,
            source,
        }),
    }
}

/// Where one step of a session spent its time, as the coordinator and the workers
/// measured it (nanoseconds of wall-clock time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTimings {
    /// The whole step, planning to the last updated chunk taken back.
    pub total_ns: u64,
    /// Planning the micro-batches (gathering their bytes from the split).
    pub plan_ns: u64,
    /// From encoding the first `Compute` to the last micro-batch gradient added to the
    /// logical-order sum (the sum runs as the gradients arrive, inside this phase).
    pub compute_round_trip_ns: u64,
    /// The slowest worker's forward and backward passes (its engine time alone).
    pub compute_max_ns: u64,
    /// All workers' forward and backward time, added up.
    pub compute_sum_ns: u64,
    /// Summing the micro-batch gradients in logical order (the adds alone, made during
    /// the compute round trip as each gradient arrives).
    pub reduction_ns: u64,
    /// From encoding the first `Update` to the last `Chunks` applied.
    pub update_round_trip_ns: u64,
    /// The slowest worker's AdamW.
    pub adamw_max_ns: u64,
    /// All workers' AdamW time, added up.
    pub adamw_sum_ns: u64,
}

impl StepTimings {
    /// The round trips less the slowest worker's own work and the coordinator's adds:
    /// encoding, the socket writes and reads, decoding and waiting to be scheduled.
    pub fn ipc_ns(&self) -> u64 {
        self.compute_round_trip_ns
            .saturating_sub(self.compute_max_ns)
            .saturating_sub(self.reduction_ns)
            + self.update_round_trip_ns.saturating_sub(self.adamw_max_ns)
    }
}

fn elapsed_ns(since: Instant) -> u64 {
    duration_ns(since.elapsed())
}

fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
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
    timings: StepTimings,
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
        let child_of_rank = spawn_workers(&mut supervisor, &options, topology, &socket_path)?;
        let connections = match accept_workers(&listener, &mut supervisor, &child_of_rank, &options)
        {
            Ok(connections) => connections,
            Err(error) => {
                supervisor.teardown(TEARDOWN_GRACE_MS);
                return Err(error);
            }
        };
        let mut session = CoordinatorSession {
            options,
            topology,
            supervisor,
            child_of_rank,
            connections,
            state,
            timings: StepTimings::default(),
            _socket_directory: socket_directory,
        };
        session.send_init()?;
        Ok(session)
    }

    /// Hands each worker the chunks it owns (`c mod W`) and the hyperparameters.
    fn send_init(&mut self) -> Result<(), SessionError> {
        let topology = self.topology;
        for rank in 0..topology.workers() {
            let chunks = self
                .state
                .chunks()
                .iter()
                .filter(|c| topology.chunk_owner(c.id()) == rank)
                .cloned()
                .collect();
            let init = Message::Init {
                workers: topology.workers(),
                hyperparameters: *self.state.hyperparameters(),
                chunks,
            };
            self.send(rank, &init)?;
        }
        Ok(())
    }

    /// The coordinator's mirror of the full logical state, as of the last completed step.
    pub fn state(&self) -> &LogicalState {
        &self.state
    }

    /// The session's topology (its W).
    pub fn topology(&self) -> Topology {
        self.topology
    }

    /// Where the last completed step spent its time.
    pub fn last_step_timings(&self) -> StepTimings {
        self.timings
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
        self.send_with(rank, message.tag(), |e| message.encode_body(e))
    }

    /// Sends one frame to `rank`, built in place in its connection's send buffer.
    fn send_with(
        &mut self,
        rank: u32,
        tag: u8,
        build: impl FnOnce(&mut ipc::Encoder),
    ) -> Result<(), SessionError> {
        let result = self.connections[rank as usize].send_with(tag, build);
        result.map_err(|source| {
            self.fail(SessionError::Ipc {
                rank,
                source,
                exit: ExitNote(None),
            })
        })
    }

    fn receive(&mut self, rank: u32) -> Result<Message, SessionError> {
        let decoded = match self.connections[rank as usize].receive_frame() {
            Ok(bytes) => Message::decode(bytes),
            Err(source) => {
                return Err(self.fail(SessionError::Ipc {
                    rank,
                    source,
                    exit: ExitNote(None),
                }))
            }
        };
        match decoded {
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

    /// Runs one optimizer step across the group: compute, reduce in logical order, update
    /// the owned chunks, advance the counters.
    pub fn step(
        &mut self,
        stream: &mut SampleStream,
        train: SplitView<'_>,
    ) -> Result<StepOutcome, SessionError> {
        let started = Instant::now();
        let batches = match step::plan_step(&self.state, stream, train) {
            Ok(batches) => batches,
            Err(error) => return Err(self.fail(error.into())),
        };
        let mut timings = StepTimings {
            plan_ns: elapsed_ns(started),
            ..StepTimings::default()
        };
        let next_step = self.state.step() + 1;
        let phase = Instant::now();
        self.send_compute(next_step, &batches)?;
        let (loss, gradient) = self.gather_and_reduce(next_step, &mut timings)?;
        timings.compute_round_trip_ns = elapsed_ns(phase);
        let phase = Instant::now();
        self.send_updates(next_step, &gradient)?;
        self.gather_chunks(next_step, &mut timings)?;
        timings.update_round_trip_ns = elapsed_ns(phase);
        step::advance_counters(&mut self.state, &batches);
        timings.total_ns = elapsed_ns(started);
        self.timings = timings;
        Ok(StepOutcome {
            step: self.state.step(),
            loss,
        })
    }

    /// Sends each worker the parameters and the micro-batches it owns (`m mod W`),
    /// encoded straight from the state and the plan (no per-rank copy of either).
    fn send_compute(&mut self, next_step: u64, batches: &[MicroBatch]) -> Result<(), SessionError> {
        let parameters = self.state.flat_parameters();
        let topology = self.topology;
        for rank in 0..topology.workers() {
            let owned: Vec<&MicroBatch> = batches
                .iter()
                .filter(|b| topology.micro_batch_owner(b.index) == rank)
                .collect();
            self.send_with(rank, protocol::TAG_COMPUTE, |e| {
                protocol::encode_compute(e, next_step, &parameters, owned.into_iter());
            })?;
        }
        Ok(())
    }

    /// Receives the micro-batch gradients of `next_step` in logical order m = 0..L-1, each
    /// from its owner (`m mod W`), which sends one `Gradients` frame per micro-batch as
    /// soon as it is computed, and adds each to the logical-order sum straight from its
    /// frame (its bytes are read once, never decoded into a copy). So the sum advances
    /// while later micro-batches are still being computed. A frame must hold exactly the
    /// micro-batch expected next from that worker, for this step.
    fn gather_and_reduce(
        &mut self,
        next_step: u64,
        timings: &mut StepTimings,
    ) -> Result<(f32, Vec<f32>), SessionError> {
        let micro_batches = self.state.hyperparameters().logical_micro_batches;
        let mut sum = step::LogicalSum::new(micro_batches);
        let mut compute_ns_by_rank = vec![0u64; self.topology.workers() as usize];
        let mut reduction = Duration::ZERO;
        for index in 0..micro_batches {
            let rank = self.topology.micro_batch_owner(index);
            if let Err(source) = self.connections[rank as usize].receive_frame() {
                return Err(self.fail(SessionError::Ipc {
                    rank,
                    source,
                    exit: ExitNote(None),
                }));
            }
            let frame = self.connections[rank as usize].last_frame();
            let checked = match GradientsView::decode(frame) {
                Ok(Some(view)) => {
                    match check_gradients_frame(&view, next_step, index, rank, self.topology) {
                        Ok(result) => {
                            let adding = Instant::now();
                            let added = sum.add_le_bytes(index, result.loss, result.gradient);
                            reduction += adding.elapsed();
                            added
                                .map(|()| view.compute_ns)
                                .map_err(|error| GradientsRefusal::Bad(error.to_string()))
                        }
                        Err(reason) => Err(GradientsRefusal::Bad(reason)),
                    }
                }
                Ok(None) => Err(GradientsRefusal::Other(Message::decode(frame))),
                Err(source) => Err(GradientsRefusal::Other(Err(source))),
            };
            match checked {
                Ok(compute_ns) => {
                    let total = &mut compute_ns_by_rank[rank as usize];
                    *total = total.saturating_add(compute_ns);
                }
                Err(GradientsRefusal::Bad(reason)) => return Err(self.bad_reply(rank, reason)),
                Err(GradientsRefusal::Other(Ok(Message::Failure { message }))) => {
                    return Err(self.fail(SessionError::WorkerFailure { rank, message }))
                }
                Err(GradientsRefusal::Other(Ok(other))) => {
                    return Err(self.unexpected(rank, "gradients", &other))
                }
                Err(GradientsRefusal::Other(Err(source))) => {
                    return Err(self.fail(SessionError::Protocol { rank, source }))
                }
            }
        }
        timings.compute_max_ns = compute_ns_by_rank.iter().copied().max().unwrap_or(0);
        timings.compute_sum_ns = compute_ns_by_rank
            .iter()
            .fold(0u64, |total, &ns| total.saturating_add(ns));
        timings.reduction_ns = duration_ns(reduction);
        sum.finish().map_err(|error| self.fail(error.into()))
    }

    /// Sends each worker the reduced gradient slices of the chunks it owns (`c mod W`),
    /// encoded straight from the reduced gradient.
    fn send_updates(&mut self, next_step: u64, gradient: &[f32]) -> Result<(), SessionError> {
        let hyperparameters = *self.state.hyperparameters();
        for rank in 0..self.topology.workers() {
            let ids = self.owned_chunk_ids(rank);
            self.send_with(rank, protocol::TAG_UPDATE, |e| {
                protocol::encode_update(e, next_step, &ids, gradient, |id| {
                    hyperparameters.chunk_range(id as usize)
                });
            })?;
        }
        Ok(())
    }

    /// Takes back every worker's updated chunks; a reply must hold exactly the chunks the
    /// worker owns, each of the right size, before any is applied.
    fn gather_chunks(
        &mut self,
        next_step: u64,
        timings: &mut StepTimings,
    ) -> Result<(), SessionError> {
        for rank in 0..self.topology.workers() {
            match self.receive(rank)? {
                Message::Chunks {
                    step,
                    adamw_ns,
                    chunks,
                } if step == next_step => {
                    timings.adamw_max_ns = timings.adamw_max_ns.max(adamw_ns);
                    timings.adamw_sum_ns = timings.adamw_sum_ns.saturating_add(adamw_ns);
                    let owned = self.owned_chunk_ids(rank);
                    if let Err(reason) = check_chunks_reply(&self.state, &owned, &chunks) {
                        return Err(self.bad_reply(rank, reason));
                    }
                    for chunk in chunks {
                        // Checked above: an owned id, the right length.
                        if let Err(error) = self.state.replace_chunk(chunk) {
                            return Err(self.bad_reply(rank, error.to_string()));
                        }
                    }
                }
                other => return Err(self.unexpected(rank, "chunks", &other)),
            }
        }
        Ok(())
    }

    /// The chunk ids `rank` owns, ascending.
    fn owned_chunk_ids(&self, rank: u32) -> Vec<u32> {
        (0..self.state.hyperparameters().chunk_count() as u32)
            .filter(|&id| self.topology.chunk_owner(id) == rank)
            .collect()
    }

    fn unexpected(&mut self, rank: u32, expected: &'static str, got: &Message) -> SessionError {
        let got = got.kind();
        self.fail(SessionError::UnexpectedMessage {
            rank,
            expected,
            got,
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
                other => return Err(self.unexpected(rank, "bye", &other)),
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

/// Why a gathered `Gradients` frame was refused.
enum GradientsRefusal {
    /// A `Gradients` reply that is wrong (the reason).
    Bad(String),
    /// Another message, or none that decodes.
    Other(Result<Message, ProtocolError>),
}

/// Checks one streamed `Gradients` frame from `rank`: it must be for `step` and hold
/// exactly one result, micro-batch `expected` (the next in logical order, which `rank`
/// owns). Returns that result.
fn check_gradients_frame<'a>(
    view: &GradientsView<'a>,
    step: u64,
    expected: u32,
    rank: u32,
    topology: Topology,
) -> Result<GradientBytes<'a>, String> {
    if view.step != step {
        return Err(format!("gradients for step {}, expected {step}", view.step));
    }
    match view.results.as_slice() {
        [result] if result.index == expected => Ok(*result),
        [result] if topology.micro_batch_owner(result.index) != rank => Err(format!(
            "returned micro-batch {} it does not own",
            result.index
        )),
        [result] => Err(format!(
            "returned micro-batch {}, expected micro-batch {expected} next",
            result.index
        )),
        results => Err(format!(
            "a gradients frame holds {} micro-batches, not one",
            results.len()
        )),
    }
}

/// Checks a `Chunks` reply against the chunk ids the worker owns (`owned`, ascending):
/// every chunk must be owned and of its chunk's size, and the reply must hold each owned
/// chunk exactly once, in that order (the order the update sent them).
fn check_chunks_reply(
    state: &LogicalState,
    owned: &[u32],
    chunks: &[ChunkState],
) -> Result<(), String> {
    for chunk in chunks {
        // A `ChunkState`'s three slots are equal in length by construction.
        let fits = state
            .chunks()
            .get(chunk.id() as usize)
            .is_some_and(|old| old.len() == chunk.len());
        if !owned.contains(&chunk.id()) || !fits {
            return Err(format!(
                "returned chunk {} it does not own or of the wrong size",
                chunk.id()
            ));
        }
    }
    let returned: Vec<u32> = chunks.iter().map(|chunk| chunk.id()).collect();
    if returned != owned {
        return Err(format!(
            "returned chunks {returned:?}, expected exactly its chunks {owned:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::Hyperparameters;

    fn owned_by(state: &LogicalState, topology: Topology, rank: u32) -> Vec<ChunkState> {
        state
            .chunks()
            .iter()
            .filter(|c| topology.chunk_owner(c.id()) == rank)
            .cloned()
            .collect()
    }

    #[test]
    fn a_streamed_gradients_frame_must_hold_the_next_micro_batch_of_its_sender_for_this_step() {
        let topology = Topology::new(4).expect("topology");
        const GRADIENT: &[u8] = &[0u8; 8];
        let result = |index| GradientBytes {
            index,
            loss: 0.5,
            gradient: GRADIENT,
        };
        let view = |step, results: Vec<GradientBytes<'static>>| GradientsView {
            step,
            compute_ns: 1,
            results,
        };
        // Rank 1 owns micro-batches 1, 5, 9; micro-batch 5 expected next at step 7.
        let ok = check_gradients_frame(&view(7, vec![result(5)]), 7, 5, 1, topology);
        assert_eq!(ok.map(|r| r.index), Ok(5));
        let refused = |frame: GradientsView<'static>| {
            check_gradients_frame(&frame, 7, 5, 1, topology).expect_err("refused")
        };
        assert!(refused(view(6, vec![result(5)])).contains("step 6, expected 7"));
        assert!(refused(view(7, vec![result(2)])).contains("micro-batch 2 it does not own"));
        assert!(refused(view(7, vec![result(9)])).contains("expected micro-batch 5 next"));
        assert!(refused(view(7, vec![])).contains("holds 0 micro-batches"));
        assert!(refused(view(7, vec![result(5), result(9)])).contains("holds 2 micro-batches"));
    }

    #[test]
    fn a_chunks_reply_must_return_exactly_the_owned_chunks() {
        let state = LogicalState::genesis(Hyperparameters::with_seed(1));
        let topology = Topology::new(2).expect("topology");
        let ids = |chunks: &[ChunkState]| chunks.iter().map(|c| c.id()).collect::<Vec<_>>();
        let mine = owned_by(&state, topology, 1);
        let owned = ids(&mine);
        assert!(!owned.is_empty());
        assert_eq!(check_chunks_reply(&state, &owned, &mine), Ok(()));

        // None at all, one missing, one twice, out of order: refused.
        let error = check_chunks_reply(&state, &owned, &[]).expect_err("empty reply");
        assert!(error.contains("expected exactly its chunks"), "{error}");
        let error = check_chunks_reply(&state, &owned, &mine[1..]).expect_err("one chunk missing");
        assert!(error.contains("expected exactly its chunks"), "{error}");
        let mut twice = mine.clone();
        twice.push(mine[0].clone());
        check_chunks_reply(&state, &owned, &twice).expect_err("a chunk twice");
        let mut reversed = mine.clone();
        reversed.reverse();
        if reversed.len() > 1 {
            check_chunks_reply(&state, &owned, &reversed).expect_err("out of order");
        }

        // A chunk of another rank, or of the wrong size: refused, naming the chunk.
        let theirs = owned_by(&state, topology, 0);
        let error =
            check_chunks_reply(&state, &owned, &theirs[..1]).expect_err("another rank's chunk");
        assert_eq!(
            error,
            format!(
                "returned chunk {} it does not own or of the wrong size",
                theirs[0].id()
            )
        );
        let mut short = mine.clone();
        let first = &short[0];
        short[0] = ChunkState::new(
            first.id(),
            first.parameters()[1..].to_vec(),
            first.exp_avg()[1..].to_vec(),
            first.exp_avg_sq()[1..].to_vec(),
        )
        .expect("even slots");
        check_chunks_reply(&state, &owned, &short).expect_err("wrong size");
    }
}
