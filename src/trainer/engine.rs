//! The arithmetic of one training step, shared by workers and the in-process trainer.
//!
//! A step is: plan the L logical micro-batches from the global cursor; compute each
//! micro-batch's gradient (one torch thread, same tensor shapes whatever the topology);
//! sum them in logical order m = 0..L-1 in plain FP32; apply AdamW chunk by chunk; advance
//! step, cursor and ledger. Only *who* computes a micro-batch or updates a chunk depends
//! on the topology, never *how*, so the bytes are the same for every W.
use tch::{Kind, Reduction, Tensor};

use crate::adamw;
use crate::digest::Digest;
use crate::logical::{
    f32_le_bytes, LogicalState, CLASSES, HIDDEN_UNITS, INPUT_FEATURES, PARAMETER_COUNT,
};
use crate::sampling::{extend_ledger, SampleStream};

/// Pixels per image.
pub const IMAGE_BYTES: usize = INPUT_FEATURES;
/// Test images whose logits form the frozen probe.
pub const LOGIT_PROBE_IMAGES: usize = 128;

/// Why a training computation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    #[error("optimizer: {0}")]
    Adamw(#[from] adamw::AdamwError),
    #[error("micro-batch results do not cover 0..{expected} exactly once (got {got:?})")]
    MicroBatchCoverage { expected: u32, got: Vec<u32> },
    #[error(
        "gradient of micro-batch {micro_batch} holds {found} values, expected {PARAMETER_COUNT}"
    )]
    GradientLength { micro_batch: u32, found: usize },
    #[error("parameter vector holds {0} values, expected {PARAMETER_COUNT}")]
    ParameterLength(usize),
    #[error("split holds {count} samples but {images} image bytes and {labels} labels")]
    SplitShape {
        count: usize,
        images: usize,
        labels: usize,
    },
    #[error("sample id {0} is outside the split")]
    SampleOutOfRange(u32),
}

/// Images and labels of one split, borrowed (row-major 28×28 u8 images).
#[derive(Clone, Copy, Debug)]
pub struct SplitView<'a> {
    pub images: &'a [u8],
    pub labels: &'a [u8],
    pub count: usize,
}

impl SplitView<'_> {
    fn check(&self) -> Result<(), EngineError> {
        if self.images.len() != self.count * IMAGE_BYTES
            || self.labels.len() != self.count
            || self.count == 0
        {
            return Err(EngineError::SplitShape {
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
    pub index: u32,
    pub sample_ids: Vec<u32>,
    pub pixels: Vec<u8>,
    pub labels: Vec<u8>,
}

/// The gradient of one micro-batch.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroBatchGradient {
    pub index: u32,
    /// Sum of the micro-batch's cross-entropy divided by the global batch size.
    pub loss: f32,
    pub gradient: Vec<f32>,
}

/// Plans the micro-batches of the step that starts at `state.cursor`.
pub fn plan_step(
    state: &LogicalState,
    stream: &mut SampleStream,
    train: SplitView<'_>,
) -> Result<Vec<MicroBatch>, EngineError> {
    train.check()?;
    let plan = stream.step_micro_batches(&state.hyperparameters, state.cursor);
    plan.into_iter()
        .enumerate()
        .map(|(index, sample_ids)| {
            let mut pixels = Vec::with_capacity(sample_ids.len() * IMAGE_BYTES);
            let mut labels = Vec::with_capacity(sample_ids.len());
            for &id in &sample_ids {
                let i = id as usize;
                if i >= train.count {
                    return Err(EngineError::SampleOutOfRange(id));
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

fn pixels_to_tensor(pixels: &[u8]) -> Tensor {
    // Exact: each byte / 255 rounds once, the same in every process.
    let values: Vec<f32> = pixels.iter().map(|&p| f32::from(p) / 255.0).collect();
    Tensor::from_slice(&values).view([(pixels.len() / IMAGE_BYTES) as i64, INPUT_FEATURES as i64])
}

struct ModelTensors {
    fc1_weight: Tensor,
    fc1_bias: Tensor,
    fc2_weight: Tensor,
    fc2_bias: Tensor,
}

impl ModelTensors {
    fn from_flat(flat: &[f32], requires_grad: bool) -> Result<Self, EngineError> {
        if flat.len() != PARAMETER_COUNT {
            return Err(EngineError::ParameterLength(flat.len()));
        }
        let sizes = [
            INPUT_FEATURES * HIDDEN_UNITS,
            HIDDEN_UNITS,
            HIDDEN_UNITS * CLASSES,
            CLASSES,
        ];
        let mut offset = 0;
        let mut take = |size: usize, shape: &[i64]| {
            let tensor = Tensor::from_slice(&flat[offset..offset + size])
                .view(shape)
                .set_requires_grad(requires_grad);
            offset += size;
            tensor
        };
        Ok(ModelTensors {
            fc1_weight: take(sizes[0], &[HIDDEN_UNITS as i64, INPUT_FEATURES as i64]),
            fc1_bias: take(sizes[1], &[HIDDEN_UNITS as i64]),
            fc2_weight: take(sizes[2], &[CLASSES as i64, HIDDEN_UNITS as i64]),
            fc2_bias: take(sizes[3], &[CLASSES as i64]),
        })
    }

    fn logits(&self, input: &Tensor) -> Result<Tensor, EngineError> {
        let hidden = input
            .f_linear(&self.fc1_weight, Some(&self.fc1_bias))?
            .f_relu()?;
        Ok(hidden.f_linear(&self.fc2_weight, Some(&self.fc2_bias))?)
    }

    fn flat_gradient(&self) -> Result<Vec<f32>, EngineError> {
        let mut out = Vec::with_capacity(PARAMETER_COUNT);
        for tensor in [
            &self.fc1_weight,
            &self.fc1_bias,
            &self.fc2_weight,
            &self.fc2_bias,
        ] {
            out.extend(tensor_to_vec(&tensor.f_grad()?)?);
        }
        Ok(out)
    }
}

fn tensor_to_vec(tensor: &Tensor) -> Result<Vec<f32>, EngineError> {
    let flat = tensor.f_contiguous()?.f_view([-1])?;
    let count = flat.numel();
    let mut out = vec![0f32; count];
    flat.f_copy_data(&mut out, count)?;
    Ok(out)
}

/// Gradient of one micro-batch's summed loss, divided by the global batch size.
pub fn micro_batch_gradient(
    flat_parameters: &[f32],
    batch: &MicroBatch,
    global_batch_size: u64,
) -> Result<MicroBatchGradient, EngineError> {
    let model = ModelTensors::from_flat(flat_parameters, true)?;
    let input = pixels_to_tensor(&batch.pixels);
    let targets = Tensor::from_slice(&batch.labels).f_to_kind(Kind::Int64)?;
    let logits = model.logits(&input)?;
    let loss = logits
        .f_cross_entropy_loss::<Tensor>(&targets, None, Reduction::Sum, -100, 0.0)?
        .f_div_scalar(global_batch_size as f64)?;
    loss.f_backward()?;
    let loss_value = tensor_to_vec(&loss)?.first().copied().unwrap_or(f32::NAN);
    Ok(MicroBatchGradient {
        index: batch.index,
        loss: loss_value,
        gradient: model.flat_gradient()?,
    })
}

/// Sums micro-batch gradients and losses in logical order m = 0..L-1 (plain FP32 adds).
pub fn reduce_in_logical_order(
    mut results: Vec<MicroBatchGradient>,
    logical_micro_batches: u32,
) -> Result<(f32, Vec<f32>), EngineError> {
    results.sort_by_key(|r| r.index);
    let indices: Vec<u32> = results.iter().map(|r| r.index).collect();
    if indices != (0..logical_micro_batches).collect::<Vec<_>>() {
        return Err(EngineError::MicroBatchCoverage {
            expected: logical_micro_batches,
            got: indices,
        });
    }
    let mut total = vec![0f32; PARAMETER_COUNT];
    let mut loss = 0f32;
    for result in &results {
        if result.gradient.len() != PARAMETER_COUNT {
            return Err(EngineError::GradientLength {
                micro_batch: result.index,
                found: result.gradient.len(),
            });
        }
        for (sum, value) in total.iter_mut().zip(&result.gradient) {
            *sum += *value;
        }
        loss += result.loss;
    }
    Ok((loss, total))
}

/// Advances step, cursor and ledger after the update of the step planned as `batches`.
pub fn advance_counters(state: &mut LogicalState, batches: &[MicroBatch]) {
    state.step += 1;
    state.cursor += state.hyperparameters.global_batch_size();
    let ids: Vec<Vec<u32>> = batches.iter().map(|b| b.sample_ids.clone()).collect();
    state.ledger_digest = extend_ledger(state.ledger_digest, state.step, &ids);
}

/// What one step produced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepOutcome {
    pub step: u64,
    pub loss: f32,
}

/// One whole step in this process (the reference arithmetic, no workers).
pub fn in_process_step(
    state: &mut LogicalState,
    stream: &mut SampleStream,
    train: SplitView<'_>,
) -> Result<StepOutcome, EngineError> {
    let batches = plan_step(state, stream, train)?;
    let flat = state.flat_parameters();
    let global = state.hyperparameters.global_batch_size();
    let results = batches
        .iter()
        .map(|batch| micro_batch_gradient(&flat, batch, global))
        .collect::<Result<Vec<_>, _>>()?;
    let (loss, gradient) =
        reduce_in_logical_order(results, state.hyperparameters.logical_micro_batches)?;
    let next_step = state.step + 1;
    let hyperparameters = state.hyperparameters;
    for chunk in &mut state.chunks {
        let range = hyperparameters.chunk_range(chunk.id as usize);
        adamw::update_chunk(&hyperparameters, next_step, chunk, &gradient[range])?;
    }
    advance_counters(state, &batches);
    Ok(StepOutcome {
        step: state.step,
        loss,
    })
}

/// Evaluation over a complete split plus the frozen logit probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    pub correct: u64,
    pub total: u64,
    /// Logits of the first 128 images, 128×10 FP32 little-endian, row-major.
    pub logit_probe: Vec<u8>,
    pub logit_probe_sha256: Digest,
}

/// Rows evaluated per forward pass.
const EVALUATION_BATCH: usize = 500;

/// Accuracy over every sample of `test` and the exact bytes of the logit probe.
pub fn evaluate(flat_parameters: &[f32], test: SplitView<'_>) -> Result<Evaluation, EngineError> {
    test.check()?;
    let _guard = tch::no_grad_guard();
    let model = ModelTensors::from_flat(flat_parameters, false)?;
    let mut correct = 0u64;
    let mut start = 0;
    while start < test.count {
        let end = (start + EVALUATION_BATCH).min(test.count);
        let logits = tensor_to_vec(&model.logits(&pixels_to_tensor(
            &test.images[start * IMAGE_BYTES..end * IMAGE_BYTES],
        ))?)?;
        for (row, label) in logits.chunks_exact(CLASSES).zip(&test.labels[start..end]) {
            // First maximum wins: a fixed tie rule.
            let mut best = 0;
            for class in 1..CLASSES {
                if row[class] > row[best] {
                    best = class;
                }
            }
            correct += u64::from(best == usize::from(*label));
        }
        start = end;
    }
    let probe_rows = LOGIT_PROBE_IMAGES.min(test.count);
    let probe =
        tensor_to_vec(&model.logits(&pixels_to_tensor(&test.images[..probe_rows * IMAGE_BYTES]))?)?;
    let logit_probe = f32_le_bytes(&probe);
    let logit_probe_sha256 = Digest::of(&logit_probe);
    Ok(Evaluation {
        correct,
        total: test.count as u64,
        logit_probe,
        logit_probe_sha256,
    })
}

/// Pins torch to one intra-op and one inter-op thread (DESIGN.md: the bits of a gradient
/// change with the thread count). Call before any tensor work in a process.
pub fn pin_single_thread() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    // libtorch refuses a second set_num_interop_threads call, so do it once per process.
    PINNED.call_once(|| {
        tch::set_num_threads(1);
        tch::set_num_interop_threads(1);
    });
}
