//! Coordinator ↔ worker messages, encoded with `ipc::Encoder` and decoded strictly.
use crate::core::logical::{ChunkState, Hyperparameters};
use crate::supervise::ipc::{DecodeError, Decoder, Encoder};

use crate::core::step::{MicroBatch, MicroBatchGradient};

const TAG_HELLO: u8 = 1;
const TAG_INIT: u8 = 2;
const TAG_COMPUTE: u8 = 3;
const TAG_GRADIENTS: u8 = 4;
const TAG_UPDATE: u8 = 5;
const TAG_CHUNKS: u8 = 6;
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
        rank: u32,
    },
    /// Coordinator → worker: the topology, the hyper-parameters and the chunks it owns.
    Init {
        workers: u32,
        hyperparameters: Hyperparameters,
        chunks: Vec<ChunkState>,
    },
    /// Coordinator → worker: compute these micro-batches' gradients at these parameters.
    Compute {
        step: u64,
        parameters: Vec<f32>,
        batches: Vec<MicroBatch>,
    },
    /// Worker → coordinator: the gradients of its micro-batches.
    Gradients {
        step: u64,
        results: Vec<MicroBatchGradient>,
    },
    /// Coordinator → worker: apply AdamW step `step` with these reduced gradient slices.
    Update {
        step: u64,
        gradients: Vec<(u32, Vec<f32>)>,
    },
    /// Worker → coordinator: the updated chunks.
    Chunks {
        step: u64,
        chunks: Vec<ChunkState>,
    },
    Shutdown,
    Bye,
    /// Either side: a reason for giving up.
    Failure {
        message: String,
    },
}

/// Why a message could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("unknown message tag {0}")]
    UnknownTag(u8),
    #[error("list of {0} elements exceeds the cap of {MAX_LIST}")]
    ListTooLong(u64),
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

fn put_chunks(encoder: &mut Encoder, chunks: &[ChunkState]) {
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

impl Message {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Message::Hello { rank } => {
                let mut e = Encoder::new(TAG_HELLO);
                e.u32(*rank);
                e.finish()
            }
            Message::Init {
                workers,
                hyperparameters,
                chunks,
            } => {
                let mut e = Encoder::new(TAG_INIT);
                e.u32(*workers);
                hyperparameters.write_fields(&mut e);
                put_chunks(&mut e, chunks);
                e.finish()
            }
            Message::Compute {
                step,
                parameters,
                batches,
            } => {
                let mut e = Encoder::new(TAG_COMPUTE);
                e.u64(*step).f32s(parameters).u64(batches.len() as u64);
                for batch in batches {
                    e.u32(batch.index)
                        .u32s(&batch.sample_ids)
                        .bytes(&batch.pixels)
                        .bytes(&batch.labels);
                }
                e.finish()
            }
            Message::Gradients { step, results } => {
                let mut e = Encoder::new(TAG_GRADIENTS);
                e.u64(*step).u64(results.len() as u64);
                for result in results {
                    e.u32(result.index).f32(result.loss).f32s(&result.gradient);
                }
                e.finish()
            }
            Message::Update { step, gradients } => {
                let mut e = Encoder::new(TAG_UPDATE);
                e.u64(*step).u64(gradients.len() as u64);
                for (id, gradient) in gradients {
                    e.u32(*id).f32s(gradient);
                }
                e.finish()
            }
            Message::Chunks { step, chunks } => {
                let mut e = Encoder::new(TAG_CHUNKS);
                e.u64(*step);
                put_chunks(&mut e, chunks);
                e.finish()
            }
            Message::Shutdown => Encoder::new(TAG_SHUTDOWN).finish(),
            Message::Bye => Encoder::new(TAG_BYE).finish(),
            Message::Failure { message } => {
                let mut e = Encoder::new(TAG_FAILURE);
                e.bytes(message.as_bytes());
                e.finish()
            }
        }
    }

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
                Message::Gradients { step, results }
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
        let mut e = Encoder::new(TAG_CHUNKS);
        e.u64(1)
            .u64(1)
            .u32(3)
            .f32s(&[1.0, 2.0])
            .f32s(&[0.5])
            .f32s(&[0.25, 0.5]);
        assert!(matches!(
            Message::decode(&e.finish()),
            Err(ProtocolError::Chunk(LogicalStateError::ChunkLength {
                id: 3,
                slot: "exp_avg",
                ..
            }))
        ));
    }
}
