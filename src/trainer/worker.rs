//! A worker process: computes the gradients of the micro-batches it is sent and applies
//! AdamW to the chunks it owns. It holds no other state and trusts nothing it is sent
//! beyond what it checks: chunk ids it does not own and malformed frames end it.
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::core::adamw;
use crate::core::logical::{ChunkState, Hyperparameters};
use crate::supervise::ipc::FramedStream;

use crate::core::step::{GradientEngine, MicroBatchGradient};
use crate::trainer::protocol::Message;

/// How long a worker waits for the coordinator's next message before giving up.
pub const WORKER_IDLE_TIMEOUT_MS: u64 = 30 * 60 * 1000;

/// Runs the worker loop until `Shutdown`.
pub fn run(socket: &Path, rank: u32, engine: &dyn GradientEngine) -> anyhow::Result<()> {
    // If the coordinator dies, so do we: no orphaned workers.
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
    crate::supervise::ipc::check_socket_path(socket)?;
    let stream = UnixStream::connect(socket)?;
    let mut connection = FramedStream::new(stream, "coordinator", WORKER_IDLE_TIMEOUT_MS)?;
    connection.send(&Message::Hello { rank }.encode())?;
    let mut hyperparameters: Option<Hyperparameters> = None;
    let mut owned: Vec<ChunkState> = Vec::new();
    loop {
        let message = Message::decode(&connection.receive()?)?;
        let reply = match handle(engine, message, &mut hyperparameters, &mut owned) {
            Ok(Some(reply)) => reply,
            Ok(None) => continue,
            Err(error) => {
                let _ = connection.send(
                    &Message::Failure {
                        message: format!("{error:#}"),
                    }
                    .encode(),
                );
                return Err(error);
            }
        };
        let done = reply == Message::Bye;
        connection.send(&reply.encode())?;
        if done {
            return Ok(());
        }
    }
}

fn handle(
    engine: &dyn GradientEngine,
    message: Message,
    hyperparameters: &mut Option<Hyperparameters>,
    owned: &mut Vec<ChunkState>,
) -> anyhow::Result<Option<Message>> {
    match message {
        Message::Init {
            hyperparameters: h,
            chunks,
            ..
        } => {
            *hyperparameters = Some(h);
            *owned = chunks;
            Ok(None)
        }
        Message::Compute {
            step,
            parameters,
            batches,
        } => {
            let h = hyperparameters.ok_or_else(|| anyhow::anyhow!("compute before init"))?;
            let results = batches
                .iter()
                .map(|batch| engine.micro_batch_gradient(&parameters, batch, h.global_batch_size()))
                .collect::<Result<Vec<MicroBatchGradient>, _>>()?;
            Ok(Some(Message::Gradients { step, results }))
        }
        Message::Update { step, gradients } => {
            let h = hyperparameters.ok_or_else(|| anyhow::anyhow!("update before init"))?;
            let mut updated = Vec::with_capacity(gradients.len());
            for (id, gradient) in gradients {
                let chunk = owned.iter_mut().find(|c| c.id == id).ok_or_else(|| {
                    anyhow::anyhow!("update for chunk {id}, which this worker does not own")
                })?;
                adamw::update_chunk(&h, step, chunk, &gradient)?;
                updated.push(chunk.clone());
            }
            Ok(Some(Message::Chunks {
                step,
                chunks: updated,
            }))
        }
        Message::Shutdown => Ok(Some(Message::Bye)),
        other => anyhow::bail!("unexpected {} message from the coordinator", other.kind()),
    }
}
