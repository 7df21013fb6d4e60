//! A worker process: computes the gradients of the micro-batches it is sent and applies
//! AdamW to the chunks it owns. It holds no other state and trusts nothing it is sent
//! beyond what it checks: chunk ids it does not own and malformed frames end it.
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::core::adamw::{self, AdamwError};
use crate::core::error_chain::error_chain_text;
use crate::core::logical::{ChunkState, Hyperparameters};
use crate::core::step::{GradientEngine, GradientRequest, StepError};
use crate::supervise::ipc::{FramedStream, IpcError};
use crate::supervise::process::{enter_supervised_child, ProcessError};
use crate::trainer::protocol::{self, Message, ProtocolError};

/// How long a worker waits for the coordinator's next message before giving up.
pub const WORKER_IDLE_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// Why a worker stopped before `Shutdown`.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// Could not set itself up as a supervised child (core limit, parent-death signal).
    #[error(transparent)]
    Enter(#[from] ProcessError),
    /// Could not connect to the coordinator's socket.
    #[error("cannot connect to the coordinator at {path}: {source}")]
    Connect {
        /// The socket path.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The connection failed: closed, timed out, an oversized frame, a bad socket path.
    #[error(transparent)]
    Ipc(#[from] IpcError),
    /// A frame from the coordinator did not decode as a message.
    #[error(transparent)]
    Decode(#[from] ProtocolError),
    /// A `Compute` arrived before `Init`.
    #[error("compute before init")]
    ComputeBeforeInit,
    /// An `Update` arrived before `Init`.
    #[error("update before init")]
    UpdateBeforeInit,
    /// An `Update` carried a gradient slice for a chunk this worker does not own.
    #[error("update for chunk {id}, which this worker does not own")]
    ChunkNotOwned {
        /// The chunk's index.
        id: u32,
    },
    /// AdamW refused the update of an owned chunk.
    #[error(transparent)]
    Optimizer(#[from] AdamwError),
    /// The gradient engine failed on a micro-batch.
    #[error(transparent)]
    Engine(#[from] StepError),
    /// The coordinator sent a message a worker never receives (e.g. `Gradients`).
    #[error("unexpected {kind} message from the coordinator")]
    UnexpectedMessage {
        /// The message's kind.
        kind: &'static str,
    },
}

/// Runs the worker loop until `Shutdown`.
pub fn run(socket: &Path, rank: u32, engine: &dyn GradientEngine) -> Result<(), WorkerError> {
    // No core dumps, and if the coordinator dies, so do we: no orphaned workers.
    enter_supervised_child()?;
    crate::supervise::ipc::check_socket_path(socket)?;
    let stream = UnixStream::connect(socket).map_err(|source| WorkerError::Connect {
        path: socket.to_owned(),
        source,
    })?;
    let connection = FramedStream::new(stream, "coordinator", WORKER_IDLE_TIMEOUT_MS)?;
    serve(connection, rank, engine)
}

/// Says hello, then answers the coordinator's messages until `Shutdown`. A failure is
/// reported to the coordinator (as `Failure`) before it is returned.
pub fn serve(
    mut connection: FramedStream,
    rank: u32,
    engine: &dyn GradientEngine,
) -> Result<(), WorkerError> {
    let hello = Message::Hello { rank };
    connection.send_with(hello.tag(), |e| hello.encode_body(e))?;
    let mut worker = Worker {
        engine,
        hyperparameters: None,
        owned: Vec::new(),
    };
    loop {
        let message = Message::decode(connection.receive_frame()?)?;
        match worker.handle(message, &mut connection) {
            Ok(Handled::Continue) => {}
            Ok(Handled::Done) => return Ok(()),
            Err(error) => {
                let failure = Message::Failure {
                    message: error_chain_text(&error),
                };
                let _ = connection.send_with(failure.tag(), |e| failure.encode_body(e));
                return Err(error);
            }
        }
    }
}

/// What a handled message leaves to do.
enum Handled {
    Continue,
    Done,
}

/// A worker's state between messages.
struct Worker<'a> {
    engine: &'a dyn GradientEngine,
    hyperparameters: Option<Hyperparameters>,
    owned: Vec<ChunkState>,
}

impl Worker<'_> {
    /// Handles one message, sending its reply (if any) on `connection`. Replies are
    /// encoded straight into the connection's reused send buffer.
    fn handle(
        &mut self,
        message: Message,
        connection: &mut FramedStream,
    ) -> Result<Handled, WorkerError> {
        match message {
            Message::Init {
                hyperparameters: h,
                chunks,
                ..
            } => {
                self.hyperparameters = Some(h);
                self.owned = chunks;
            }
            Message::Compute {
                step,
                parameters,
                batches,
            } => {
                let h = self.hyperparameters.ok_or(WorkerError::ComputeBeforeInit)?;
                let request = GradientRequest {
                    flat_parameters: &parameters,
                    batches: &batches,
                    global_batch_size: h.global_batch_size(),
                };
                // One `Gradients` frame per micro-batch, sent the moment it is computed,
                // so the coordinator adds it to the logical-order sum while the rest are
                // still being computed. Each frame reports the engine time since the last
                // one was sent (encoding and sending are IPC, not compute).
                let mut computing_since = Instant::now();
                let mut send_failure = None;
                let computed =
                    self.engine
                        .micro_batch_gradients(request, &mut |index, loss, gradient| {
                            let compute_ns = duration_ns(computing_since.elapsed());
                            let mut e = connection.encoder(protocol::TAG_GRADIENTS);
                            protocol::encode_gradients_head(&mut e, step, compute_ns, 1);
                            protocol::encode_gradient(&mut e, index, loss, gradient);
                            let sent = connection.send_encoder(e);
                            computing_since = Instant::now();
                            sent.map_err(|error| {
                                let message = error.to_string();
                                send_failure = Some(error);
                                StepError::Engine(format!("sending micro-batch {index}: {message}"))
                            })
                        });
                if let Some(error) = send_failure {
                    return Err(error.into());
                }
                computed?;
            }
            Message::Update { step, gradients } => {
                let h = self.hyperparameters.ok_or(WorkerError::UpdateBeforeInit)?;
                let started = Instant::now();
                let mut updated = Vec::with_capacity(gradients.len());
                for (id, gradient) in &gradients {
                    let index = self
                        .owned
                        .iter()
                        .position(|c| c.id() == *id)
                        .ok_or(WorkerError::ChunkNotOwned { id: *id })?;
                    adamw::update_chunk(&h, step, self.owned[index].slots_mut(), gradient)?;
                    updated.push(index);
                }
                let adamw_ns = duration_ns(started.elapsed());
                let owned = &self.owned;
                connection.send_with(protocol::TAG_CHUNKS, |e| {
                    protocol::encode_chunks(e, step, adamw_ns, updated.iter().map(|&i| &owned[i]));
                })?;
            }
            Message::Shutdown => {
                let bye = Message::Bye;
                connection.send_with(bye.tag(), |e| bye.encode_body(e))?;
                return Ok(Handled::Done);
            }
            other => return Err(WorkerError::UnexpectedMessage { kind: other.kind() }),
        }
        Ok(Handled::Continue)
    }
}

/// A duration in whole nanoseconds (saturating).
fn duration_ns(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::LogicalState;
    use crate::trainer::engines::FakeEngine;

    /// A worker serving one end of a socket pair in a thread; the test is the coordinator.
    fn start_worker() -> (
        FramedStream,
        std::thread::JoinHandle<Result<(), WorkerError>>,
    ) {
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        let worker = std::thread::spawn(move || {
            let connection = FramedStream::new(theirs, "coordinator", 10_000)?;
            serve(connection, 0, &FakeEngine)
        });
        let mut coordinator = FramedStream::new(ours, "worker", 10_000).expect("framed");
        let hello = Message::decode(&coordinator.receive().expect("hello")).expect("decode");
        assert_eq!(hello, Message::Hello { rank: 0 });
        (coordinator, worker)
    }

    fn failure_text(coordinator: &mut FramedStream) -> String {
        match Message::decode(&coordinator.receive().expect("failure")).expect("decode") {
            Message::Failure { message } => message,
            other => panic!("expected a failure, got {}", other.kind()),
        }
    }

    #[test]
    fn a_malformed_frame_ends_the_worker_with_a_decode_error() {
        let (mut coordinator, worker) = start_worker();
        coordinator.send(&[0xEE, 1, 2, 3]).expect("send garbage");
        let error = worker
            .join()
            .expect("worker thread")
            .expect_err("must fail");
        assert!(matches!(error, WorkerError::Decode(_)), "{error}");
    }

    #[test]
    fn compute_before_init_is_refused_and_reported() {
        let (mut coordinator, worker) = start_worker();
        let compute = Message::Compute {
            step: 1,
            parameters: Vec::new(),
            batches: Vec::new(),
        };
        coordinator.send(&compute.encode()).expect("send");
        assert_eq!(failure_text(&mut coordinator), "compute before init");
        let error = worker
            .join()
            .expect("worker thread")
            .expect_err("must fail");
        assert!(matches!(error, WorkerError::ComputeBeforeInit), "{error}");
    }

    #[test]
    fn an_update_for_a_chunk_it_does_not_own_is_refused() {
        let (mut coordinator, worker) = start_worker();
        let state = LogicalState::genesis(Hyperparameters::with_seed(1));
        let init = Message::Init {
            workers: 2,
            hyperparameters: *state.hyperparameters(),
            chunks: vec![state.chunks()[0].clone()],
        };
        coordinator.send(&init.encode()).expect("send init");
        let update = Message::Update {
            step: 1,
            gradients: vec![(1, vec![0.0; state.chunks()[1].parameters().len()])],
        };
        coordinator.send(&update.encode()).expect("send update");
        assert_eq!(
            failure_text(&mut coordinator),
            "update for chunk 1, which this worker does not own"
        );
        let error = worker
            .join()
            .expect("worker thread")
            .expect_err("must fail");
        assert!(
            matches!(error, WorkerError::ChunkNotOwned { id: 1 }),
            "{error}"
        );
    }

    #[test]
    fn compute_streams_one_gradients_frame_per_micro_batch_in_order() {
        let (mut coordinator, worker) = start_worker();
        let state = LogicalState::genesis(Hyperparameters::with_seed(1));
        let init = Message::Init {
            workers: 4,
            hyperparameters: *state.hyperparameters(),
            chunks: Vec::new(),
        };
        coordinator.send(&init.encode()).expect("send init");
        let batch = |index: u32| crate::core::step::MicroBatch {
            index,
            sample_ids: vec![index],
            pixels: vec![index as u8; crate::core::step::IMAGE_BYTES],
            labels: vec![index as u8],
        };
        let batches = vec![batch(2), batch(6), batch(10)];
        let compute = Message::Compute {
            step: 5,
            parameters: state.flat_parameters(),
            batches: batches.clone(),
        };
        coordinator.send(&compute.encode()).expect("send compute");
        let mut expected = Vec::new();
        let request = GradientRequest {
            flat_parameters: &state.flat_parameters(),
            batches: &batches,
            global_batch_size: state.hyperparameters().global_batch_size(),
        };
        FakeEngine
            .micro_batch_gradients(request, &mut |index, loss, gradient| {
                expected.push((index, loss, gradient.to_vec()));
                Ok(())
            })
            .expect("fake gradients");
        for (index, loss, gradient) in expected {
            match Message::decode(&coordinator.receive().expect("gradients")).expect("decode") {
                Message::Gradients { step, results, .. } => {
                    assert_eq!(step, 5);
                    assert_eq!(results.len(), 1, "one micro-batch per frame");
                    assert_eq!(results[0].index, index);
                    assert_eq!(results[0].loss.to_bits(), loss.to_bits());
                    assert_eq!(results[0].gradient, gradient);
                }
                other => panic!("expected gradients, got {}", other.kind()),
            }
        }
        coordinator
            .send(&Message::Shutdown.encode())
            .expect("send shutdown");
        assert_eq!(
            Message::decode(&coordinator.receive().expect("bye")).expect("decode"),
            Message::Bye
        );
        worker.join().expect("worker thread").expect("clean exit");
    }

    #[test]
    fn an_unexpected_message_is_refused() {
        let (mut coordinator, worker) = start_worker();
        coordinator
            .send(&Message::Hello { rank: 3 }.encode())
            .expect("send");
        assert_eq!(
            failure_text(&mut coordinator),
            "unexpected hello message from the coordinator"
        );
        let error = worker
            .join()
            .expect("worker thread")
            .expect_err("must fail");
        assert!(
            matches!(error, WorkerError::UnexpectedMessage { kind: "hello" }),
            "{error}"
        );
    }

    #[test]
    fn a_failure_says_each_cause_once() {
        let error = WorkerError::Engine(StepError::Adamw(AdamwError::ZeroStep));
        assert_eq!(
            error_chain_text(&error),
            "optimizer: AdamW step must be at least 1"
        );
    }
}
