//! Coordinator ↔ worker messages, encoded with `ipc::Encoder` and decoded strictly.
use crate::core::logical::{ChunkState, Hyperparameters};
use crate::supervise::ipc::{DecodeError, Decoder, Encoder};

use crate::core::step::{MicroBatch, MicroBatchGradient};

const TAG_HELLO: u8 = 1;
const TAG_INIT: u8 = 2;
/// The tag of a `Compute` message (sent encoded in place).
pub const TAG_COMPUTE: u8 = 3;
/// The tag of a `Gradients` message (for replies encoded in place).
pub const TAG_GRADIENTS: u8 = 4;
/// The tag of an `Update` message (sent encoded in place).
pub const TAG_UPDATE: u8 = 5;
/// The tag of a `Chunks` message (for replies encoded in place).
pub const TAG_CHUNKS: u8 = 6;
const TAG_SHUTDOWN: u8 = 7;
const TAG_BYE: u8 = 8;
const TAG_FAILURE: u8 = 9;

/// Largest element count in any one message list (chunks, micro-batches).
const MAX_LIST: u64 = 4096;

/// Every message either side sends.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// Worker → coordinator, first frame: who I am.
    Hello {
        /// The rank it was started with (checked against the pid that connected).
        rank: u32,
    },
    /// Coordinator → worker: the topology, the hyper-parameters and the chunks it owns.
    Init {
        /// W, the number of workers in the session.
        workers: u32,
        /// The AdamW hyper-parameters.
        hyperparameters: Hyperparameters,
        /// The chunks this worker owns (`c mod W`), with their optimizer state.
        chunks: Vec<ChunkState>,
    },
    /// Coordinator → worker: compute these micro-batches' gradients at these parameters.
    Compute {
        /// The step the gradients are for.
        step: u64,
        /// The full parameter vector, in logical order.
        parameters: Vec<f32>,
        /// The micro-batches this worker owns this step (`m mod W`).
        batches: Vec<MicroBatch>,
    },
    /// Worker → coordinator: a micro-batch's gradient, sent the moment it is computed
    /// (one message per micro-batch of a `Compute`, in the order sent, so the coordinator
    /// sums while the rest are computed), and the nanoseconds the worker spent computing
    /// it (forward and backward; for `bench train`'s split). The coordinator accepts
    /// exactly one result per message.
    Gradients {
        /// The step, echoed from `Compute`.
        step: u64,
        /// Nanoseconds of forward and backward since the previous message.
        compute_ns: u64,
        /// The micro-batch's result (exactly one).
        results: Vec<MicroBatchGradient>,
    },
    /// Coordinator → worker: apply AdamW step `step` with these reduced gradient slices.
    Update {
        /// The AdamW step to apply.
        step: u64,
        /// For each chunk this worker owns: its index and its slice of the reduced
        /// gradient.
        gradients: Vec<(u32, Vec<f32>)>,
    },
    /// Worker → coordinator: the updated chunks, and the nanoseconds its AdamW took.
    Chunks {
        /// The step, echoed from `Update`.
        step: u64,
        /// Nanoseconds of its AdamW update.
        adamw_ns: u64,
        /// The updated chunks, with their optimizer state.
        chunks: Vec<ChunkState>,
    },
    /// Coordinator → worker: the session is over; reply `Bye` and exit 0.
    Shutdown,
    /// Worker → coordinator: the answer to `Shutdown`, its last frame.
    Bye,
    /// Either side: a reason for giving up.
    Failure {
        /// What went wrong.
        message: String,
    },
}

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    /// The payload is truncated, empty or has trailing bytes.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The tag byte names no message.
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    /// A list is longer than any message needs (4096 elements); refused before allocating.
    #[error("list of {0} elements exceeds the cap of {MAX_LIST}")]
    ListTooLong(u64),
    /// A `Failure` message's text is not UTF-8.
    #[error("text is not UTF-8")]
    Text,
    /// A chunk whose three slots differ in length.
    #[error("malformed chunk: {0}")]
    Chunk(#[from] crate::core::logical::LogicalStateError),
}

fn list_length(decoder: &mut Decoder<'_>) -> Result<usize, ProtocolError> {
    let count = decoder.u64()?;
    if count > MAX_LIST {
        return Err(ProtocolError::ListTooLong(count));
    }
    Ok(count as usize)
}

fn put_chunks<'a>(encoder: &mut Encoder, chunks: impl ExactSizeIterator<Item = &'a ChunkState>) {
    encoder.u64(chunks.len() as u64);
    for chunk in chunks {
        encoder
            .u32(chunk.id())
            .f32s(chunk.parameters())
            .f32s(chunk.exp_avg())
            .f32s(chunk.exp_avg_sq());
    }
}

fn get_chunks(decoder: &mut Decoder<'_>) -> Result<Vec<ChunkState>, ProtocolError> {
    let count = list_length(decoder)?;
    (0..count)
        .map(|_| {
            let id = decoder.u32()?;
            let parameters = decoder.f32s()?;
            let exp_avg = decoder.f32s()?;
            let exp_avg_sq = decoder.f32s()?;
            Ok(ChunkState::new(id, parameters, exp_avg, exp_avg_sq)?)
        })
        .collect()
}

/// Writes the body of a `Compute` message straight from borrowed parameters and
/// micro-batches (the coordinator sends it this way, without building a [`Message`]).
pub fn encode_compute<'a>(
    e: &mut Encoder,
    step: u64,
    parameters: &[f32],
    batches: impl ExactSizeIterator<Item = &'a MicroBatch>,
) {
    e.u64(step).f32s(parameters).u64(batches.len() as u64);
    for batch in batches {
        e.u32(batch.index)
            .u32s(&batch.sample_ids)
            .bytes(&batch.pixels)
            .bytes(&batch.labels);
    }
}

/// Writes the body of a `Chunks` message straight from borrowed chunks.
pub fn encode_chunks<'a>(
    e: &mut Encoder,
    step: u64,
    adamw_ns: u64,
    chunks: impl ExactSizeIterator<Item = &'a ChunkState>,
) {
    e.u64(step).u64(adamw_ns);
    put_chunks(e, chunks);
}

/// Writes the body of an `Update` message straight from the reduced gradient: the slice
/// `range(id)` for each chunk id.
pub fn encode_update(
    e: &mut Encoder,
    step: u64,
    ids: &[u32],
    gradient: &[f32],
    range: impl Fn(u32) -> std::ops::Range<usize>,
) {
    e.u64(step).u64(ids.len() as u64);
    for &id in ids {
        e.u32(id).f32s(&gradient[range(id)]);
    }
}

/// Writes the head of a `Gradients` body; `count` results follow, each written with
/// [`encode_gradient`].
pub fn encode_gradients_head(e: &mut Encoder, step: u64, compute_ns: u64, count: usize) {
    e.u64(step).u64(compute_ns).u64(count as u64);
}

/// Writes one micro-batch's result of a `Gradients` body.
pub fn encode_gradient(e: &mut Encoder, index: u32, loss: f32, gradient: &[f32]) {
    e.u32(index).f32(loss).f32s(gradient);
}

/// One micro-batch's result in a `Gradients` frame, read in place.
#[derive(Clone, Copy, Debug)]
pub struct GradientBytes<'a> {
    /// The micro-batch's logical index m.
    pub index: u32,
    /// Its loss.
    pub loss: f32,
    /// Its gradient as little-endian FP32 bytes, 4 per value.
    pub gradient: &'a [u8],
}

/// A `Gradients` message read in place: nothing of its gradients is copied.
#[derive(Clone, Debug)]
pub struct GradientsView<'a> {
    /// The step the gradients are for.
    pub step: u64,
    /// The worker's engine time for them.
    pub compute_ns: u64,
    /// Each micro-batch's result, in the order sent.
    pub results: Vec<GradientBytes<'a>>,
}

impl<'a> GradientsView<'a> {
    /// Reads a `Gradients` payload strictly (as [`Message::decode`] would); `Ok(None)` when
    /// the payload is another message.
    pub fn decode(payload: &'a [u8]) -> Result<Option<Self>, ProtocolError> {
        let (tag, mut d) = Decoder::new(payload)?;
        if tag != TAG_GRADIENTS {
            return Ok(None);
        }
        let step = d.u64()?;
        let compute_ns = d.u64()?;
        let count = list_length(&mut d)?;
        let results = (0..count)
            .map(|_| {
                Ok(GradientBytes {
                    index: d.u32()?,
                    loss: d.f32()?,
                    gradient: d.f32_bytes()?,
                })
            })
            .collect::<Result<_, ProtocolError>>()?;
        d.finish()?;
        Ok(Some(GradientsView {
            step,
            compute_ns,
            results,
        }))
    }
}

impl Message {
    /// The message's tag byte.
    pub fn tag(&self) -> u8 {
        match self {
            Message::Hello { .. } => TAG_HELLO,
            Message::Init { .. } => TAG_INIT,
            Message::Compute { .. } => TAG_COMPUTE,
            Message::Gradients { .. } => TAG_GRADIENTS,
            Message::Update { .. } => TAG_UPDATE,
            Message::Chunks { .. } => TAG_CHUNKS,
            Message::Shutdown => TAG_SHUTDOWN,
            Message::Bye => TAG_BYE,
            Message::Failure { .. } => TAG_FAILURE,
        }
    }

    /// The whole payload: the tag, then the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Encoder::new(self.tag());
        self.encode_body(&mut e);
        e.finish()
    }

    /// Writes everything after the tag (for `FramedStream::send_with`).
    pub fn encode_body(&self, e: &mut Encoder) {
        match self {
            Message::Hello { rank } => {
                e.u32(*rank);
            }
            Message::Init {
                workers,
                hyperparameters,
                chunks,
            } => {
                e.u32(*workers);
                hyperparameters.write_fields(e);
                put_chunks(e, chunks.iter());
            }
            Message::Compute {
                step,
                parameters,
                batches,
            } => encode_compute(e, *step, parameters, batches.iter()),
            Message::Gradients {
                step,
                compute_ns,
                results,
            } => {
                encode_gradients_head(e, *step, *compute_ns, results.len());
                for result in results {
                    encode_gradient(e, result.index, result.loss, &result.gradient);
                }
            }
            Message::Update { step, gradients } => {
                e.u64(*step).u64(gradients.len() as u64);
                for (id, gradient) in gradients {
                    e.u32(*id).f32s(gradient);
                }
            }
            Message::Chunks {
                step,
                adamw_ns,
                chunks,
            } => encode_chunks(e, *step, *adamw_ns, chunks.iter()),
            Message::Shutdown | Message::Bye => {}
            Message::Failure { message } => {
                e.bytes(message.as_bytes());
            }
        }
    }

    /// Decodes one frame's payload, strictly: every byte read, every list capped.
    pub fn decode(payload: &[u8]) -> Result<Self, ProtocolError> {
        let (tag, mut d) = Decoder::new(payload)?;
        let message = match tag {
            TAG_HELLO => Message::Hello { rank: d.u32()? },
            TAG_INIT => {
                let workers = d.u32()?;
                let hyperparameters = Hyperparameters::read_fields(&mut d)?;
                Message::Init {
                    workers,
                    hyperparameters,
                    chunks: get_chunks(&mut d)?,
                }
            }
            TAG_COMPUTE => {
                let step = d.u64()?;
                let parameters = d.f32s()?;
                let count = list_length(&mut d)?;
                let batches = (0..count)
                    .map(|_| {
                        Ok(MicroBatch {
                            index: d.u32()?,
                            sample_ids: d.u32s()?,
                            pixels: d.bytes()?.to_vec(),
                            labels: d.bytes()?.to_vec(),
                        })
                    })
                    .collect::<Result<_, ProtocolError>>()?;
                Message::Compute {
                    step,
                    parameters,
                    batches,
                }
            }
            TAG_GRADIENTS => {
                let step = d.u64()?;
                let compute_ns = d.u64()?;
                let count = list_length(&mut d)?;
                let results = (0..count)
                    .map(|_| {
                        Ok(MicroBatchGradient {
                            index: d.u32()?,
                            loss: d.f32()?,
                            gradient: d.f32s()?,
                        })
                    })
                    .collect::<Result<_, ProtocolError>>()?;
                Message::Gradients {
                    step,
                    compute_ns,
                    results,
                }
            }
            TAG_UPDATE => {
                let step = d.u64()?;
                let count = list_length(&mut d)?;
                let gradients = (0..count)
                    .map(|_| Ok((d.u32()?, d.f32s()?)))
                    .collect::<Result<_, ProtocolError>>()?;
                Message::Update { step, gradients }
            }
            TAG_CHUNKS => Message::Chunks {
                step: d.u64()?,
                adamw_ns: d.u64()?,
                chunks: get_chunks(&mut d)?,
            },
            TAG_SHUTDOWN => Message::Shutdown,
            TAG_BYE => Message::Bye,
            TAG_FAILURE => {
                let text = std::str::from_utf8(d.bytes()?).map_err(|_| ProtocolError::Text)?;
                Message::Failure {
                    message: text.to_owned(),
                }
            }
            other => return Err(ProtocolError::UnknownTag(other)),
        };
        d.finish()?;
        Ok(message)
    }

    /// A short name for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "hello",
            Message::Init { .. } => "init",
            Message::Compute { .. } => "compute",
            Message::Gradients { .. } => "gradients",
            Message::Update { .. } => "update",
            Message::Chunks { .. } => "chunks",
            Message::Shutdown => "shutdown",
            Message::Bye => "bye",
            Message::Failure { .. } => "failure",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::LogicalStateError;

    #[test]
    fn every_message_round_trips() {
        let chunk = ChunkState::new(3, vec![1.0], vec![0.5], vec![0.25]).expect("even");
        let messages = vec![
            Message::Hello { rank: 2 },
            Message::Init {
                workers: 4,
                hyperparameters: Hyperparameters::with_seed(1),
                chunks: vec![chunk.clone()],
            },
            Message::Compute {
                step: 1,
                parameters: vec![0.1, 0.2],
                batches: vec![MicroBatch {
                    index: 5,
                    sample_ids: vec![7],
                    pixels: vec![1, 2],
                    labels: vec![3],
                }],
            },
            Message::Gradients {
                step: 1,
                compute_ns: 17,
                results: vec![MicroBatchGradient {
                    index: 5,
                    loss: 0.3,
                    gradient: vec![1.0],
                }],
            },
            Message::Update {
                step: 1,
                gradients: vec![(3, vec![0.5])],
            },
            Message::Chunks {
                step: 1,
                adamw_ns: 4,
                chunks: vec![chunk],
            },
            Message::Shutdown,
            Message::Bye,
            Message::Failure {
                message: "x".into(),
            },
        ];
        for message in messages {
            let bytes = message.encode();
            assert_eq!(Message::decode(&bytes).expect("decodes"), message);
            let view = GradientsView::decode(&bytes).expect("decodes in place");
            match (&message, view) {
                (
                    Message::Gradients {
                        step,
                        compute_ns,
                        results,
                    },
                    Some(view),
                ) => {
                    assert_eq!((view.step, view.compute_ns), (*step, *compute_ns));
                    assert_eq!(view.results.len(), results.len());
                    for (seen, result) in view.results.iter().zip(results) {
                        assert_eq!((seen.index, seen.loss), (result.index, result.loss));
                        assert_eq!(seen.gradient.len(), result.gradient.len() * 4);
                    }
                }
                (Message::Gradients { .. }, None) => panic!("gradients not read in place"),
                (_, view) => assert!(view.is_none(), "{} read as gradients", message.kind()),
            }
            let mut extended = bytes.clone();
            extended.push(0);
            assert!(
                Message::decode(&extended).is_err(),
                "trailing byte accepted for {}",
                message.kind()
            );
        }
        assert!(matches!(
            Message::decode(&[42]),
            Err(ProtocolError::UnknownTag(42))
        ));
    }

    /// A well-framed `Chunks` message whose chunk has a short slot is refused at decode,
    /// before the coordinator could apply it.
    #[test]
    fn a_chunk_with_uneven_slots_is_refused() {
        // step, adamw_ns, one chunk: id, then its three slots.
        let frame = |exp_avg: &[f32]| {
            let mut e = Encoder::new(TAG_CHUNKS);
            e.u64(1)
                .u64(0)
                .u64(1)
                .u32(3)
                .f32s(&[1.0, 2.0])
                .f32s(exp_avg)
                .f32s(&[0.25, 0.5]);
            e.finish()
        };
        // Control: the same frame with even slots decodes.
        assert!(Message::decode(&frame(&[0.5, 0.5])).is_ok());
        assert!(matches!(
            Message::decode(&frame(&[0.5])),
            Err(ProtocolError::Chunk(LogicalStateError::ChunkLength {
                id: 3,
                slot: "exp_avg",
                ..
            }))
        ));
    }
}
