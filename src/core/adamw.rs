//! AdamW over one logical chunk at a time.
//!
//! Why our own optimizer: tch's cannot export its moments, and the bytes of a chunk must
//! not depend on where the chunk lives. Each call touches exactly one chunk with plain
//! IEEE-754 FP32 operations in a fixed order (no fused multiply-add, no reductions), so
//! the result is the same whichever worker runs it and whatever its neighbours are.
use crate::core::logical::{ChunkSlotsMut, Hyperparameters};

/// Why an update was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AdamwError {
    /// The gradient slice is not as long as the chunk.
    #[error("chunk {id}: gradient holds {found} values, chunk holds {expected}")]
    GradientLength {
        /// The chunk's id.
        id: u32,
        /// Values the chunk holds.
        expected: usize,
        /// Values the gradient slice holds.
        found: usize,
    },
    /// The step count was 0 (AdamW's bias correction needs t >= 1).
    #[error("AdamW step must be at least 1")]
    ZeroStep,
}

/// Applies one AdamW step (`step` is the 1-based step count after this update) to a chunk.
pub fn update_chunk(
    hyperparameters: &Hyperparameters,
    step: u64,
    chunk: ChunkSlotsMut<'_>,
    gradient: &[f32],
) -> Result<(), AdamwError> {
    if step == 0 {
        return Err(AdamwError::ZeroStep);
    }
    let expected = chunk.parameters.len();
    if gradient.len() != expected
        || chunk.exp_avg.len() != expected
        || chunk.exp_avg_sq.len() != expected
    {
        return Err(AdamwError::GradientLength {
            id: chunk.id,
            expected,
            found: gradient.len(),
        });
    }
    let h = hyperparameters;
    let exponent = i32::try_from(step).unwrap_or(i32::MAX);
    let bias_correction1 = 1.0f32 - h.beta1.powi(exponent);
    let bias_correction2_sqrt = (1.0f32 - h.beta2.powi(exponent)).sqrt();
    let step_size = h.learning_rate / bias_correction1;
    let decay = 1.0f32 - h.learning_rate * h.weight_decay;
    let one_minus_beta1 = 1.0f32 - h.beta1;
    let one_minus_beta2 = 1.0f32 - h.beta2;
    let slots = chunk
        .parameters
        .iter_mut()
        .zip(chunk.exp_avg.iter_mut())
        .zip(chunk.exp_avg_sq.iter_mut());
    for (((parameter, exp_avg), exp_avg_sq), &g) in slots.zip(gradient) {
        let m = h.beta1 * *exp_avg + one_minus_beta1 * g;
        let v = h.beta2 * *exp_avg_sq + one_minus_beta2 * (g * g);
        let denominator = v.sqrt() / bias_correction2_sqrt + h.epsilon;
        let p = *parameter * decay;
        *parameter = p - step_size * (m / denominator);
        *exp_avg = m;
        *exp_avg_sq = v;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::logical::{ChunkState, LogicalState, PARAMETER_COUNT};

    #[test]
    fn update_is_independent_of_chunking() {
        // The same values updated as one chunk or as two halves give identical bits.
        let h = Hyperparameters::with_seed(3);
        let state = LogicalState::genesis(h);
        let whole_values = state.chunks()[0].parameters().to_vec();
        let gradient: Vec<f32> = (0..whole_values.len())
            .map(|i| ((i % 17) as f32 - 8.0) * 1e-3)
            .collect();
        let zeros = vec![0.0; whole_values.len()];
        let mut whole =
            ChunkState::new(0, whole_values.clone(), zeros.clone(), zeros).expect("even");
        update_chunk(&h, 1, whole.slots_mut(), &gradient).expect("update");
        let half = whole_values.len() / 2;
        let mut left = ChunkState::new(
            0,
            whole_values[..half].to_vec(),
            vec![0.0; half],
            vec![0.0; half],
        )
        .expect("even");
        let rest = whole_values.len() - half;
        let mut right = ChunkState::new(
            1,
            whole_values[half..].to_vec(),
            vec![0.0; rest],
            vec![0.0; rest],
        )
        .expect("even");
        update_chunk(&h, 1, left.slots_mut(), &gradient[..half]).expect("update");
        update_chunk(&h, 1, right.slots_mut(), &gradient[half..]).expect("update");
        let joined: Vec<u32> = left
            .parameters()
            .iter()
            .chain(right.parameters())
            .map(|v| v.to_bits())
            .collect();
        let whole_bits: Vec<u32> = whole.parameters().iter().map(|v| v.to_bits()).collect();
        assert_eq!(joined, whole_bits);
        assert!(PARAMETER_COUNT > half);
    }

    #[test]
    fn first_step_moves_against_the_gradient() {
        let h = Hyperparameters::with_seed(3);
        let mut chunk =
            ChunkState::new(0, vec![0.0, 0.0], vec![0.0; 2], vec![0.0; 2]).expect("even");
        update_chunk(&h, 1, chunk.slots_mut(), &[1.0, -1.0]).expect("update");
        assert!(chunk.parameters()[0] < 0.0 && chunk.parameters()[1] > 0.0);
        // Bias-corrected first step has magnitude ≈ lr.
        assert!((chunk.parameters()[0] + h.learning_rate).abs() < 1e-6);
    }

    #[test]
    fn refuses_bad_input() {
        let h = Hyperparameters::with_seed(3);
        let mut chunk = ChunkState::new(4, vec![0.0; 2], vec![0.0; 2], vec![0.0; 2]).expect("even");
        assert_eq!(
            update_chunk(&h, 0, chunk.slots_mut(), &[0.0; 2]),
            Err(AdamwError::ZeroStep)
        );
        assert_eq!(
            update_chunk(&h, 1, chunk.slots_mut(), &[0.0; 3]),
            Err(AdamwError::GradientLength {
                id: 4,
                expected: 2,
                found: 3
            })
        );
    }
}
