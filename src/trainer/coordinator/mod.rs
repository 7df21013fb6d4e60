//! A coordinator session: one fixed group of W worker processes for some steps.
//!
//! The session owns its workers (a `Supervisor`), their sockets and a mirror of the full
//! logical state. Per step it plans the micro-batches from the global cursor, sends each
//! worker the micro-batches it owns (`m mod W`), sums the returned gradients in logical
//! order, sends each worker the reduced slices of the chunks it owns (`c mod W`) and
//! takes back the updated chunks. Any failure — a dead worker, a timeout, a malformed or
//! unexpected reply — tears the whole group down (SIGTERM, grace, SIGKILL, reap) and is
//! returned as an error naming the rank; nothing waits without a deadline.
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::core::logical::LogicalState;
use crate::core::sampling::SampleStream;
use crate::core::topology::Topology;
use crate::supervise::ipc::{self, FramedStream};
use crate::supervise::process::{ExitRecord, Supervisor, TEARDOWN_GRACE_MS};

use crate::core::step::{self, MicroBatch, SplitView, StepOutcome};
use crate::trainer::engines::EngineKind;
use crate::trainer::protocol::{self, GradientsView, Message};

mod error;
mod frames;
mod spawn;
mod timings;

pub use error::*;
use frames::*;
use spawn::*;
pub use timings::*;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::{ChunkState, Hyperparameters};
    use crate::trainer::protocol::GradientBytes;

    #[test]
    fn a_worker_is_started_as_the_binary_parses_it_with_the_allocator_settings() {
        use crate::supervise::process::{MALLOC_TUNABLES_VARIABLE, WORKER_MALLOC_TUNABLES};
        use std::ffi::OsString;
        let options = SessionOptions::new("/bin/true", 2, "s");
        let spec = spawn::worker_spec(&options, std::path::Path::new("/tmp/s.sock"), 1);
        let args: Vec<_> = spec.args.iter().map(|a| a.to_string_lossy()).collect();
        assert_eq!(
            args,
            [
                "worker",
                "--socket",
                "/tmp/s.sock",
                "--rank",
                "1",
                "--engine",
                options.engine.name()
            ]
        );
        assert_eq!(spec.rank, Some(1));
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
