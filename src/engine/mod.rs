//! The tch engine (feature `torch`): one micro-batch's gradient and the evaluation, on
//! libtorch with one thread. Everything else about a step is torch-free (`core::step`).
//!
//! The micro-batch's tensors have the same shapes whoever computes it, and torch runs
//! with one intra-op and one inter-op thread, so its gradient has the same bits in every
//! process.
use tch::{Kind, Reduction, Tensor};

use crate::core::digest::Digest;
use crate::core::logical::{
    f32_le_bytes, LogicalState, CLASSES, HIDDEN_UNITS, INPUT_FEATURES, PARAMETER_COUNT,
};
use crate::core::sampling::SampleStream;
use crate::core::step::{
    self, GradientEngine, GradientRequest, GradientSink, MicroBatch, SplitView, StepError,
    StepOutcome, IMAGE_BYTES, LOGIT_PROBE_IMAGES,
};

/// Why a tch computation failed.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// libtorch raised an error.
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    /// A parameter vector of the wrong length (the length given).
    #[error("parameter vector holds {0} values, expected {PARAMETER_COUNT}")]
    ParameterLength(usize),
    /// An in-process step failed (its gradients, their sum or the AdamW update).
    #[error(transparent)]
    Step(#[from] StepError),
}

/// The tch engine: one micro-batch's gradient through libtorch on one thread.
#[derive(Clone, Copy, Debug, Default)]
pub struct TchEngine;

impl GradientEngine for TchEngine {
    fn micro_batch_gradients(
        &self,
        request: GradientRequest<'_>,
        sink: &mut GradientSink<'_>,
    ) -> Result<(), StepError> {
        micro_batch_gradients(
            request.flat_parameters,
            request.batches,
            request.global_batch_size,
            sink,
        )
        .map_err(into_step_error)
    }
}

/// A sink's own error passes through; a torch failure becomes the engine's message.
fn into_step_error(error: EngineError) -> StepError {
    match error {
        EngineError::Step(error) => error,
        other => StepError::Engine(other.to_string()),
    }
}

/// The images of a micro-batch as an N×784 FP32 tensor, converted through `values` (a
/// buffer reused across micro-batches; the tensor owns a copy).
fn pixels_to_tensor_with(pixels: &[u8], values: &mut Vec<f32>) -> Result<Tensor, EngineError> {
    values.clear();
    // Exact: each byte / 255 rounds once, the same in every process.
    values.extend(pixels.iter().map(|&p| f32::from(p) / 255.0));
    Ok(Tensor::f_from_slice(values)?
        .f_view([(pixels.len() / IMAGE_BYTES) as i64, INPUT_FEATURES as i64])?)
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
}

fn tensor_to_vec(tensor: &Tensor) -> Result<Vec<f32>, EngineError> {
    let flat = tensor.f_contiguous()?.f_view([-1])?;
    let count = flat.numel();
    let mut out = vec![0f32; count];
    flat.f_copy_data(&mut out, count)?;
    Ok(out)
}

/// The gradients of several micro-batches at the same parameters, each handed to `sink`
/// in turn. The parameter tensors are made once per call and every gradient is copied
/// straight out of torch into one reused buffer; each micro-batch runs its own graph (linear,
/// relu, linear, summed cross-entropy, division, backward), so its bits do not depend on
/// the other micro-batches of the call. The gradients are taken
/// with `autograd::grad` (returned, never accumulated into `.grad`), so no micro-batch
/// sees another's.
pub fn micro_batch_gradients(
    flat_parameters: &[f32],
    batches: &[MicroBatch],
    global_batch_size: u64,
    sink: &mut GradientSink<'_>,
) -> Result<(), EngineError> {
    pin_single_thread();
    let model = ModelTensors::from_flat(flat_parameters, true)?;
    let leaves = [
        &model.fc1_weight,
        &model.fc1_bias,
        &model.fc2_weight,
        &model.fc2_bias,
    ];
    let mut gradient = vec![0f32; PARAMETER_COUNT];
    let mut values = Vec::with_capacity(IMAGE_BYTES * 16);
    for batch in batches {
        let input = pixels_to_tensor_with(&batch.pixels, &mut values)?;
        let targets = Tensor::f_from_slice(&batch.labels)?.f_to_kind(Kind::Int64)?;
        let logits = model.logits(&input)?;
        let loss = logits
            .f_cross_entropy_loss::<Tensor>(&targets, None, Reduction::Sum, -100, 0.0)?
            .f_div_scalar(global_batch_size as f64)?;
        let gradients = Tensor::f_run_backward(&[&loss], &leaves, false, false)?;
        let mut offset = 0;
        for tensor in &gradients {
            let count = tensor.numel();
            let target = gradient
                .get_mut(offset..offset + count)
                .ok_or(EngineError::ParameterLength(offset + count))?;
            tensor.f_copy_data(target, count)?;
            offset += count;
        }
        if offset != PARAMETER_COUNT {
            return Err(EngineError::ParameterLength(offset));
        }
        let mut loss_value = [f32::NAN];
        loss.f_copy_data(&mut loss_value, 1)?;
        sink(batch.index, loss_value[0], &gradient)?;
    }
    Ok(())
}

/// One whole step in this process with the tch engine (the reference arithmetic).
pub fn in_process_step(
    state: &mut LogicalState,
    stream: &mut SampleStream,
    train: SplitView<'_>,
) -> Result<StepOutcome, EngineError> {
    pin_single_thread();
    Ok(step::in_process_step(&TchEngine, state, stream, train)?)
}

/// Evaluation over a complete split plus the frozen logit probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Evaluation {
    /// Images whose highest logit (the first, on a tie) is their label.
    pub correct: u64,
    /// Images evaluated (the whole split).
    pub total: u64,
    /// Logits of the first 128 images, 128×10 FP32 little-endian, row-major.
    pub logit_probe: Vec<u8>,
    /// SHA-256 of `logit_probe`.
    pub logit_probe_sha256: Digest,
}

/// Rows evaluated per forward pass.
const EVALUATION_BATCH: usize = 500;

/// Accuracy over every sample of `test` and the exact bytes of the logit probe.
pub fn evaluate(flat_parameters: &[f32], test: SplitView<'_>) -> Result<Evaluation, EngineError> {
    pin_single_thread();
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

/// Pins torch to one intra-op and one inter-op thread (docs/architecture.md: the bits of a gradient
/// change with the thread count). Call before any tensor work in a process; every entry
/// point of this module that computes ([`micro_batch_gradients`], [`in_process_step`],
/// [`evaluate`]) calls it first, so no process computes unpinned.
pub fn pin_single_thread() {
    static PINNED: std::sync::Once = std::sync::Once::new();
    // libtorch refuses a second set_num_interop_threads call, so do it once per process.
    PINNED.call_once(|| {
        tch::set_num_threads(1);
        tch::set_num_interop_threads(1);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::{Hyperparameters, LogicalState};

    #[test]
    fn evaluating_pins_torch_to_one_thread_first() {
        let state = LogicalState::genesis(Hyperparameters::with_seed(3));
        let images = vec![0u8; 2 * IMAGE_BYTES];
        let labels = [1u8, 2];
        let split = SplitView {
            images: &images,
            labels: &labels,
            count: 2,
        };
        let evaluation = evaluate(&state.flat_parameters(), split).expect("evaluate");
        assert_eq!(evaluation.total, 2);
        assert_eq!(tch::get_num_threads(), 1);
        assert_eq!(tch::get_num_interop_threads(), 1);
    }
}
