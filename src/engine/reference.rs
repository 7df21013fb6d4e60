//! The autograd formulation of one micro-batch's gradient: what the engine computed before
//! its backward pass was made explicit, kept as the reference the explicit pass is checked
//! against bit for bit (`tests/ml_engine.rs`). Not used to train.
use tch::{Reduction, Tensor};

use crate::core::logical::PARAMETER_COUNT;
use crate::core::step::MicroBatch;
use crate::engine::{pin_single_thread, pixels_to_tensor_with, EngineError, ModelTensors};

/// One micro-batch's loss and flat gradient through autograd: `linear`, `relu`, `linear`,
/// summed `cross_entropy` divided by `global_batch_size`, then `autograd::grad` of the
/// loss with respect to the four parameter tensors.
pub fn autograd_gradients(
    flat_parameters: &[f32],
    batch: &MicroBatch,
    global_batch_size: u64,
) -> Result<(f32, Vec<f32>), EngineError> {
    pin_single_thread();
    let model = ModelTensors::from_flat(flat_parameters, true)?;
    let input = pixels_to_tensor_with(&batch.pixels, &mut Vec::new())?;
    let targets = Tensor::f_from_slice(&batch.labels)?.f_to_kind(tch::Kind::Int64)?;
    let loss = model
        .logits(&input)?
        .f_cross_entropy_loss::<Tensor>(&targets, None, Reduction::Sum, -100, 0.0)?
        .f_div_scalar(global_batch_size as f64)?;
    let leaves = [
        &model.fc1_weight,
        &model.fc1_bias,
        &model.fc2_weight,
        &model.fc2_bias,
    ];
    let gradients = Tensor::f_run_backward(&[&loss], &leaves, false, false)?;
    let mut flat = Vec::with_capacity(PARAMETER_COUNT);
    for tensor in &gradients {
        let count = tensor.numel();
        let mut values = vec![0f32; count];
        tensor.f_contiguous()?.f_copy_data(&mut values, count)?;
        flat.extend(values);
    }
    if flat.len() != PARAMETER_COUNT {
        return Err(EngineError::ParameterLength(flat.len()));
    }
    let mut loss_value = [f32::NAN];
    loss.f_copy_data(&mut loss_value, 1)?;
    Ok((loss_value[0], flat))
}
