//! One training step's torch-free arithmetic: planning logical micro-batches from the
//! global cursor, summing their gradients in logical order, applying AdamW chunk by chunk
//! and advancing step, cursor and ledger.
//!
//! A step is: plan the L logical micro-batches from the global cursor; compute each
//! micro-batch's gradient with a [`GradientEngine`] (the tch engine, or a test engine);
//! sum them in logical order m = 0..L-1 in plain FP32; apply AdamW chunk by chunk; advance
//! step, cursor and ledger. Only *who* computes a micro-batch or updates a chunk depends
//! on the topology, never *how*, so the bytes are the same for every W.
use wide::f32x8;

use crate::core::adamw;
use crate::core::ledger::extend_ledger;
use crate::core::logical::{LogicalState, INPUT_FEATURES, PARAMETER_COUNT};
use crate::core::sampling::SampleStream;

/// Pixels per image.
pub const IMAGE_BYTES: usize = INPUT_FEATURES;
/// Test images whose logits form the frozen probe.
pub const LOGIT_PROBE_IMAGES: usize = 128;

/// Why a step's arithmetic failed (outside the gradient engine itself).
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// AdamW refused the update.
    #[error("optimizer: {0}")]
    Adamw(#[from] adamw::AdamwError),
    /// The gradients do not cover every micro-batch exactly once.
    #[error("micro-batch results do not cover 0..{expected} exactly once (got {got:?})")]
    MicroBatchCoverage {
        /// The number of logical micro-batches.
        expected: u32,
        /// The micro-batch indices received.
        got: Vec<u32>,
    },
    /// A micro-batch gradient has the wrong length.
    #[error(
        "gradient of micro-batch {micro_batch} holds {found} values, expected {PARAMETER_COUNT}"
    )]
    GradientLength {
        /// The micro-batch index.
        micro_batch: u32,
        /// Values its gradient holds.
        found: usize,
    },
    /// A split's byte counts disagree with its sample count (or it is empty).
    #[error("split holds {count} samples but {images} image bytes and {labels} labels")]
    SplitShape {
        /// Samples the split claims.
        count: usize,
        /// Image bytes it holds.
        images: usize,
        /// Labels it holds.
        labels: usize,
    },
    /// A sample id is past the end of the split (the id).
    #[error("sample id {0} is outside the split")]
    SampleOutOfRange(u32),
    /// The flat parameter vector has the wrong length (its length).
    #[error("parameter vector holds {0} values, expected {PARAMETER_COUNT}")]
    ParameterLength(usize),
    /// The gradient engine failed (its message).
    #[error("gradient engine: {0}")]
    Engine(String),
}

/// Refuses a flat parameter vector of the wrong length (every engine's first check).
pub fn check_parameter_count(flat_parameters: &[f32]) -> Result<(), StepError> {
    if flat_parameters.len() != PARAMETER_COUNT {
        return Err(StepError::ParameterLength(flat_parameters.len()));
    }
    Ok(())
}

/// Receives one micro-batch's result: its index, its loss and its gradient (lent only for
/// the call, so an engine can reuse one buffer for every micro-batch).
pub type GradientSink<'a> = dyn FnMut(u32, f32, &[f32]) -> Result<(), StepError> + 'a;

/// One engine call's work: micro-batches all differentiated at the same parameters, each
/// gradient the micro-batch's summed loss divided by the step's global batch size.
#[derive(Clone, Copy, Debug)]
pub struct GradientRequest<'a> {
    /// The flat parameter vector (`PARAMETER_COUNT` values).
    pub flat_parameters: &'a [f32],
    /// The micro-batches, in the order their results go to the sink.
    pub batches: &'a [MicroBatch],
    /// The step's global batch size (the divisor of every summed loss).
    pub global_batch_size: u64,
}

/// Computes the gradients of logical micro-batches. Implementations must be pure: the
/// same parameters and micro-batch give the same bits in every process, in every call
/// shape, whatever the topology (the tch engine pins torch to one thread for this).
pub trait GradientEngine {
    /// The gradients of `request.batches`, handed to `sink` one by one in the order given.
    /// A micro-batch's bits must not depend on the others in the call; an engine may set
    /// the parameters up once per call and reuse its buffers across micro-batches.
    fn micro_batch_gradients(
        &self,
        request: GradientRequest<'_>,
        sink: &mut GradientSink<'_>,
    ) -> Result<(), StepError>;

    /// The summed loss and gradient of `request.batches`, which must be the micro-batches
    /// 0..`logical_micro_batches` in logical order: exactly what [`LogicalSum`] makes of
    /// [`Self::micro_batch_gradients`], bit for bit (the default does just that). An engine
    /// may sum inside its own tensors instead, with the same FP32 adds in the same order,
    /// and hand out only the total.
    fn summed_gradients(
        &self,
        request: GradientRequest<'_>,
        logical_micro_batches: u32,
    ) -> Result<(f32, Vec<f32>), StepError> {
        let mut sum = LogicalSum::new(logical_micro_batches);
        self.micro_batch_gradients(request, &mut |index, loss, gradient| {
            sum.add(index, loss, gradient)
        })?;
        sum.finish()
    }
}

/// Refuses micro-batches that are not exactly 0..`logical_micro_batches` in logical order
/// (the error variant [`LogicalSum`] gives): what an engine checks before summing in its own
/// way.
pub fn check_logical_order(
    batches: &[MicroBatch],
    logical_micro_batches: u32,
) -> Result<(), StepError> {
    let in_order = batches.len() == logical_micro_batches as usize
        && batches.iter().zip(0..).all(|(batch, m)| batch.index == m);
    if in_order {
        return Ok(());
    }
    Err(StepError::MicroBatchCoverage {
        expected: logical_micro_batches,
        got: batches.iter().map(|b| b.index).collect(),
    })
}

/// Images and labels of one split, borrowed (row-major 28×28 u8 images).
#[derive(Clone, Copy, Debug)]
pub struct SplitView<'a> {
    /// `count` images of 784 bytes each.
    pub images: &'a [u8],
    /// One label per image.
    pub labels: &'a [u8],
    /// The number of samples.
    pub count: usize,
}

impl SplitView<'_> {
    /// Refuses a split whose byte counts disagree with its sample count.
    pub fn check(&self) -> Result<(), StepError> {
        if self.images.len() != self.count * IMAGE_BYTES
            || self.labels.len() != self.count
            || self.count == 0
        {
            return Err(StepError::SplitShape {
                count: self.count,
                images: self.images.len(),
                labels: self.labels.len(),
            });
        }
        Ok(())
    }
}

/// One logical micro-batch with the exact bytes it trains on.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroBatch {
    /// The micro-batch's logical index m.
    pub index: u32,
    /// The ids of its samples, in order.
    pub sample_ids: Vec<u32>,
    /// Their images, concatenated.
    pub pixels: Vec<u8>,
    /// Their labels.
    pub labels: Vec<u8>,
}

/// The gradient of one micro-batch.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroBatchGradient {
    /// The micro-batch's logical index m.
    pub index: u32,
    /// Sum of the micro-batch's cross-entropy divided by the global batch size.
    pub loss: f32,
    /// The gradient over the flat parameter vector.
    pub gradient: Vec<f32>,
}

/// Plans the micro-batches of the step that starts at `state.cursor`.
pub fn plan_step(
    state: &LogicalState,
    stream: &mut SampleStream,
    train: SplitView<'_>,
) -> Result<Vec<MicroBatch>, StepError> {
    train.check()?;
    let plan = stream.step_micro_batches(state.hyperparameters(), state.cursor());
    plan.into_iter()
        .enumerate()
        .map(|(index, sample_ids)| {
            let mut pixels = Vec::with_capacity(sample_ids.len() * IMAGE_BYTES);
            let mut labels = Vec::with_capacity(sample_ids.len());
            for &id in &sample_ids {
                let i = id as usize;
                if i >= train.count {
                    return Err(StepError::SampleOutOfRange(id));
                }
                pixels.extend_from_slice(&train.images[i * IMAGE_BYTES..(i + 1) * IMAGE_BYTES]);
                labels.push(train.labels[i]);
            }
            Ok(MicroBatch {
                index: index as u32,
                sample_ids,
                pixels,
                labels,
            })
        })
        .collect()
}

/// A running sum of micro-batch gradients and losses that accepts them only in logical
/// order m = 0, 1, …, L-1 (plain FP32 adds onto a zeroed vector, one micro-batch at a time).
#[derive(Debug)]
pub struct LogicalSum {
    total: Vec<f32>,
    loss: f32,
    next: u32,
    expected: u32,
}

impl LogicalSum {
    /// An empty sum of `logical_micro_batches` micro-batches.
    pub fn new(logical_micro_batches: u32) -> Self {
        LogicalSum {
            total: vec![0f32; PARAMETER_COUNT],
            loss: 0f32,
            next: 0,
            expected: logical_micro_batches,
        }
    }

    /// Adds the next micro-batch; refuses one out of order or of the wrong length.
    pub fn add(&mut self, index: u32, loss: f32, gradient: &[f32]) -> Result<(), StepError> {
        self.check_next(index, gradient.len())?;
        // Eight sums at a time (`wide::f32x8`, vector adds in every profile): each
        // element's sum is still its own chain of FP32 adds in logical order, so the bits
        // are the plain loop's.
        let (sums, sums_tail) = self.total.as_chunks_mut::<SUM_LANES>();
        let (values, values_tail) = gradient.as_chunks::<SUM_LANES>();
        for (sum, block) in sums.iter_mut().zip(values) {
            *sum = (f32x8::new(*sum) + f32x8::new(*block)).to_array();
        }
        for (sum, value) in sums_tail.iter_mut().zip(values_tail) {
            *sum += *value;
        }
        self.loss += loss;
        self.next += 1;
        Ok(())
    }

    /// [`Self::add`] for a gradient given as little-endian FP32 bytes (4 per value, as an
    /// IPC frame carries it): the same values, so the same sum, without decoding a copy.
    pub fn add_le_bytes(
        &mut self,
        index: u32,
        loss: f32,
        gradient: &[u8],
    ) -> Result<(), StepError> {
        let values = gradient.len() / 4;
        let length = if gradient.len().is_multiple_of(4) {
            values
        } else {
            usize::MAX
        };
        self.check_next(index, length)?;
        let (sums, sums_tail) = self.total.as_chunks_mut::<SUM_LANES>();
        let (blocks, bytes_tail) = gradient.as_chunks::<{ SUM_LANES * 4 }>();
        for (sum, block) in sums.iter_mut().zip(blocks) {
            *sum = (f32x8::new(*sum) + f32x8::new(le_block(block))).to_array();
        }
        for (sum, bytes) in sums_tail.iter_mut().zip(bytes_tail.chunks_exact(4)) {
            *sum += f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        }
        self.loss += loss;
        self.next += 1;
        Ok(())
    }

    fn check_next(&self, index: u32, length: usize) -> Result<(), StepError> {
        if index != self.next || index >= self.expected {
            return Err(StepError::MicroBatchCoverage {
                expected: self.expected,
                got: (0..self.next).chain([index]).collect(),
            });
        }
        if length != PARAMETER_COUNT {
            return Err(StepError::GradientLength {
                micro_batch: index,
                found: length,
            });
        }
        Ok(())
    }

    /// The summed loss and gradient, once every micro-batch was added.
    pub fn finish(self) -> Result<(f32, Vec<f32>), StepError> {
        if self.next != self.expected {
            return Err(StepError::MicroBatchCoverage {
                expected: self.expected,
                got: (0..self.next).collect(),
            });
        }
        Ok((self.loss, self.total))
    }
}

/// Values per vector add of [`LogicalSum`].
const SUM_LANES: usize = 8;

/// Eight little-endian FP32 values (an IPC frame's bytes, at any alignment).
#[inline(always)]
fn le_block(bytes: &[u8; SUM_LANES * 4]) -> [f32; SUM_LANES] {
    #[cfg(target_endian = "little")]
    {
        bytemuck::pod_read_unaligned(bytes)
    }
    #[cfg(not(target_endian = "little"))]
    {
        std::array::from_fn(|lane| {
            let at = lane * 4;
            f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        })
    }
}

/// Sums micro-batch gradients and losses in logical order m = 0..L-1 (plain FP32 adds).
pub fn reduce_in_logical_order(
    mut results: Vec<MicroBatchGradient>,
    logical_micro_batches: u32,
) -> Result<(f32, Vec<f32>), StepError> {
    results.sort_by_key(|r| r.index);
    let indices: Vec<u32> = results.iter().map(|r| r.index).collect();
    if indices != (0..logical_micro_batches).collect::<Vec<_>>() {
        return Err(StepError::MicroBatchCoverage {
            expected: logical_micro_batches,
            got: indices,
        });
    }
    let mut sum = LogicalSum::new(logical_micro_batches);
    for result in &results {
        sum.add(result.index, result.loss, &result.gradient)?;
    }
    sum.finish()
}

/// Advances step, cursor and ledger after the update of the step planned as `batches`.
pub fn advance_counters(state: &mut LogicalState, batches: &[MicroBatch]) {
    let step = state.step() + 1;
    let cursor = state.cursor() + state.hyperparameters().global_batch_size();
    let ids: Vec<Vec<u32>> = batches.iter().map(|b| b.sample_ids.clone()).collect();
    let ledger_digest = extend_ledger(state.ledger_digest(), step, &ids);
    state.set_counters(step, cursor, ledger_digest);
}

/// What one step produced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    /// The step count after the update.
    pub step: u64,
    /// The step's loss: the sum of its micro-batches' losses.
    pub loss: f32,
}

/// Applies AdamW chunk by chunk with the reduced `gradient` for the step after `state.step`.
pub fn apply_update(state: &mut LogicalState, gradient: &[f32]) -> Result<(), StepError> {
    let next_step = state.step() + 1;
    let hyperparameters = *state.hyperparameters();
    for chunk in state.slots_mut() {
        let range = hyperparameters.chunk_range(chunk.id as usize);
        adamw::update_chunk(&hyperparameters, next_step, chunk, &gradient[range])?;
    }
    Ok(())
}

/// One whole step in this process with `engine` (the reference arithmetic, no workers).
pub fn in_process_step(
    engine: &dyn GradientEngine,
    state: &mut LogicalState,
    stream: &mut SampleStream,
    train: SplitView<'_>,
) -> Result<StepOutcome, StepError> {
    let batches = plan_step(state, stream, train)?;
    let flat = state.flat_parameters();
    let request = GradientRequest {
        flat_parameters: &flat,
        batches: &batches,
        global_batch_size: state.hyperparameters().global_batch_size(),
    };
    // The micro-batches are planned in logical order, so the engine may add each gradient
    // to the sum as it comes (inside its own tensors, for the tch engine).
    let (loss, gradient) =
        engine.summed_gradients(request, state.hyperparameters().logical_micro_batches)?;
    apply_update(state, &gradient)?;
    advance_counters(state, &batches);
    Ok(StepOutcome {
        step: state.step(),
        loss,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Gradient values of every magnitude and sign, with zeros, subnormals, infinities
    /// and NaNs mixed in.
    fn gradient(micro_batch: u32) -> Vec<f32> {
        (0..PARAMETER_COUNT as u32)
            .map(|i| {
                let x = i
                    .wrapping_mul(2_654_435_761)
                    .wrapping_add(micro_batch.wrapping_mul(40_503));
                match x % 97 {
                    0 => 0.0,
                    1 => -0.0,
                    2 => f32::from_bits(x % 0x007f_ffff),
                    3 => f32::INFINITY,
                    4 => f32::NAN,
                    _ => {
                        f32::from_bits(0x2000_0000 + (x % 0x3000_0000))
                            * if x & 2 == 0 { 1.0 } else { -1.0 }
                    }
                }
            })
            .collect()
    }

    #[test]
    fn the_vector_sum_has_the_bits_of_the_plain_loop_from_values_and_from_bytes() {
        let micro_batches = 12u32;
        let mut plain = vec![0f32; PARAMETER_COUNT];
        let mut from_values = LogicalSum::new(micro_batches);
        let mut from_bytes = LogicalSum::new(micro_batches);
        for m in 0..micro_batches {
            let g = gradient(m);
            for (sum, value) in plain.iter_mut().zip(&g) {
                *sum += *value;
            }
            from_values.add(m, 0.5, &g).expect("in order");
            // A frame's gradient starts at any byte offset: misalign it on purpose.
            let mut frame = vec![0u8; 1];
            frame.extend(g.iter().flat_map(|v| v.to_le_bytes()));
            from_bytes
                .add_le_bytes(m, 0.5, &frame[1..])
                .expect("in order");
        }
        // NaN payloads are unspecified in Rust: NaNs compare by class, the rest by bits.
        let bits = |values: &[f32]| {
            values
                .iter()
                .map(|v| if v.is_nan() { None } else { Some(v.to_bits()) })
                .collect::<Vec<_>>()
        };
        let (_, values_total) = from_values.finish().expect("complete");
        let (_, bytes_total) = from_bytes.finish().expect("complete");
        assert_eq!(bits(&values_total), bits(&plain));
        assert_eq!(bits(&bytes_total), bits(&plain));
    }
}
