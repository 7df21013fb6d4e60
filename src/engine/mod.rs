//! The tch engine (feature `torch`): one micro-batch's gradient and the evaluation, on
//! libtorch with one thread. Everything else about a step is torch-free (`core::step`).
//!
//! The micro-batch's tensors have the same shapes whoever computes it, and torch runs
//! with one intra-op and one inter-op thread, so its gradient has the same bits in every
//! process.
//!
//! The backward pass is explicit (`forward_backward`): the libtorch operations autograd
//! runs for this graph (`addmm`, `relu`, `_log_softmax`, `nll_loss` forward; their
//! backward kernels and the `mm`/`sum` calls of `addmm`'s backward, with autograd's
//! operand layouts), called directly. Same kernels, same operands, so the same bits —
//! `tests/ml_engine.rs` compares every gradient with autograd's
//! ([`reference::autograd_gradients`]) bit for bit — without recording a graph and running
//! autograd's engine for each of the twelve 16-sample micro-batches (about a quarter of the
//! engine's time).
use tch::{Device, Kind, Reduction, Tensor};

use crate::core::digest::Digest;
use crate::core::logical::{
    f32_le_bytes, LogicalState, CLASSES, HIDDEN_UNITS, INPUT_FEATURES, PARAMETER_COUNT,
};
use crate::core::sampling::SampleStream;
use crate::core::step::{
    self, GradientEngine, GradientRequest, GradientSink, MicroBatch, SplitView, StepError,
    StepOutcome, IMAGE_BYTES, LOGIT_PROBE_IMAGES,
};

pub mod reference;

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

    fn summed_gradients(
        &self,
        request: GradientRequest<'_>,
        logical_micro_batches: u32,
    ) -> Result<(f32, Vec<f32>), StepError> {
        step::check_logical_order(request.batches, logical_micro_batches)?;
        summed_micro_batch_gradients(
            request.flat_parameters,
            request.batches,
            request.global_batch_size,
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
pub(crate) fn pixels_to_tensor_with(
    pixels: &[u8],
    values: &mut Vec<f32>,
) -> Result<Tensor, EngineError> {
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

/// The labels of a micro-batch as the Int64 class indices `nll_loss` takes.
fn targets_tensor(labels: &[u8]) -> Result<Tensor, EngineError> {
    let targets: Vec<i64> = labels.iter().map(|&label| i64::from(label)).collect();
    Ok(Tensor::f_from_slice(&targets)?)
}

/// `nll_loss`'s `ignore_index` (PyTorch's default; no label is negative).
const IGNORE_INDEX: i64 = -100;

pub(crate) struct ModelTensors {
    pub(crate) fc1_weight: Tensor,
    pub(crate) fc1_bias: Tensor,
    pub(crate) fc2_weight: Tensor,
    pub(crate) fc2_bias: Tensor,
}

impl ModelTensors {
    pub(crate) fn from_flat(flat: &[f32], requires_grad: bool) -> Result<Self, EngineError> {
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

    pub(crate) fn logits(&self, input: &Tensor) -> Result<Tensor, EngineError> {
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

/// One micro-batch's loss (the summed cross-entropy divided by the global batch size, a
/// 0-dimensional tensor) and its gradients (`fc1.weight`, `fc1.bias`, `fc2.weight`,
/// `fc2.bias`), by an explicit backward pass: what autograd computes for `linear`, `relu`,
/// `linear`, summed `cross_entropy`, division — the same operations on the same operands,
/// so the same bits (see the module doc).
fn forward_backward(
    model: &ModelTensors,
    input: &Tensor,
    targets: &Tensor,
    global_batch_size: u64,
) -> Result<(Tensor, [Tensor; 4]), EngineError> {
    let divisor = global_batch_size as f64;
    // Forward, as `linear` (addmm with the transposed weight), `relu`, `linear` and
    // `cross_entropy` (log_softmax, then nll_loss) decompose.
    let hidden = model
        .fc1_bias
        .f_addmm(input, &model.fc1_weight.f_tr()?)?
        .f_relu()?;
    let logits = model.fc2_bias.f_addmm(&hidden, &model.fc2_weight.f_tr()?)?;
    let log_probs = logits.f_internal_log_softmax(1, false)?;
    let summed = log_probs.f_nll_loss::<Tensor>(targets, None, Reduction::Sum, IGNORE_INDEX)?;
    let loss = summed.f_div_scalar(divisor)?;
    // Backward, in autograd's order. The seed is ones_like(loss), through the division.
    let d_summed = loss.f_ones_like()?.f_div_scalar(divisor)?;
    // nll_loss_forward's total weight: the count of targets not ignored (all of them). A
    // summed loss's backward checks its shape and never reads its value.
    let total_weight =
        Tensor::f_scalar_tensor(targets.size()[0] as f64, (Kind::Float, Device::Cpu))?;
    let d_log_probs = log_probs.f_nll_loss_backward::<Tensor>(
        &d_summed,
        targets,
        None,
        Reduction::Sum,
        IGNORE_INDEX,
        &total_weight,
    )?;
    let d_logits =
        Tensor::f_internal_log_softmax_backward_data(&d_log_probs, &log_probs, 1, Kind::Float)?;
    // addmm's backward: the broadcast bias reduced over the batch (keepdim, then a view),
    // and, the transposed weight being column-major, its gradient as (grad^T · mat1).
    let fc2_bias = bias_gradient(&d_logits)?;
    let fc2_weight = d_logits.f_tr()?.f_mm(&hidden)?;
    let d_hidden = d_logits.f_mm(&model.fc2_weight)?;
    let d_pre_activation = hidden.f_threshold_backward(&d_hidden, 0.0)?;
    let fc1_bias = bias_gradient(&d_pre_activation)?;
    let fc1_weight = d_pre_activation.f_tr()?.f_mm(input)?;
    Ok((loss, [fc1_weight, fc1_bias, fc2_weight, fc2_bias]))
}

/// The gradient of a bias broadcast over the batch: autograd's `sum_to` (a sum over dim 0
/// keeping it, then a view to the bias's shape).
fn bias_gradient(gradient: &Tensor) -> Result<Tensor, EngineError> {
    let width = gradient.size()[1];
    Ok(gradient
        .f_sum_dim_intlist([0i64].as_slice(), true, None)?
        .f_view([width])?)
}

/// Copies the four gradient tensors into `out` (`PARAMETER_COUNT` values, in flat
/// parameter order).
fn copy_gradients(gradients: &[Tensor], out: &mut [f32]) -> Result<(), EngineError> {
    let mut offset = 0;
    for tensor in gradients {
        let count = tensor.numel();
        let target = out
            .get_mut(offset..offset + count)
            .ok_or(EngineError::ParameterLength(offset + count))?;
        tensor.f_copy_data(target, count)?;
        offset += count;
    }
    if offset != PARAMETER_COUNT {
        return Err(EngineError::ParameterLength(offset));
    }
    Ok(())
}

/// The value of a 0-dimensional FP32 tensor.
fn scalar_value(tensor: &Tensor) -> Result<f32, EngineError> {
    let mut value = [f32::NAN];
    tensor.f_copy_data(&mut value, 1)?;
    Ok(value[0])
}

/// The gradients of several micro-batches at the same parameters, each handed to `sink`
/// in turn. The parameter tensors are made once per call and every gradient is copied
/// straight out of torch into one reused buffer; each micro-batch runs its own forward and
/// backward (`forward_backward`), so its bits do not depend on the other micro-batches
/// of the call.
pub fn micro_batch_gradients(
    flat_parameters: &[f32],
    batches: &[MicroBatch],
    global_batch_size: u64,
    sink: &mut GradientSink<'_>,
) -> Result<(), EngineError> {
    pin_single_thread();
    let model = ModelTensors::from_flat(flat_parameters, false)?;
    let mut gradient = vec![0f32; PARAMETER_COUNT];
    let mut values = Vec::with_capacity(IMAGE_BYTES * 16);
    for batch in batches {
        let input = pixels_to_tensor_with(&batch.pixels, &mut values)?;
        let targets = targets_tensor(&batch.labels)?;
        let (loss, gradients) = forward_backward(&model, &input, &targets, global_batch_size)?;
        copy_gradients(&gradients, &mut gradient)?;
        sink(batch.index, scalar_value(&loss)?, &gradient)?;
    }
    Ok(())
}

/// The logical-order sum of the gradients and losses of `batches` (the caller checked that
/// they are micro-batches 0..L-1 in order), summed inside torch: each gradient tensor is
/// added to a running total that starts at +0.0, one FP32 add per element per micro-batch
/// in logical order, as `core::step::LogicalSum` does (an add is one correctly rounded
/// operation, whoever vectorises it), and only the total is copied out. The losses are
/// summed the same way, in order. `tests/ml_engine.rs` checks the bits against
/// `LogicalSum` over [`micro_batch_gradients`].
pub fn summed_micro_batch_gradients(
    flat_parameters: &[f32],
    batches: &[MicroBatch],
    global_batch_size: u64,
) -> Result<(f32, Vec<f32>), EngineError> {
    pin_single_thread();
    let model = ModelTensors::from_flat(flat_parameters, false)?;
    let mut totals = [
        model.fc1_weight.f_zeros_like()?,
        model.fc1_bias.f_zeros_like()?,
        model.fc2_weight.f_zeros_like()?,
        model.fc2_bias.f_zeros_like()?,
    ];
    let mut loss_total = 0f32;
    let mut values = Vec::with_capacity(IMAGE_BYTES * 16);
    for batch in batches {
        let input = pixels_to_tensor_with(&batch.pixels, &mut values)?;
        let targets = targets_tensor(&batch.labels)?;
        let (loss, gradients) = forward_backward(&model, &input, &targets, global_batch_size)?;
        for (total, gradient) in totals.iter_mut().zip(&gradients) {
            let _ = total.f_add_(gradient)?;
        }
        loss_total += scalar_value(&loss)?;
    }
    let mut gradient = vec![0f32; PARAMETER_COUNT];
    copy_gradients(&totals, &mut gradient)?;
    Ok((loss_total, gradient))
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
