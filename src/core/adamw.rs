//! AdamW over one logical chunk at a time.
//!
//! Why our own optimizer: tch's cannot export its moments, and the bytes of a chunk must
//! not depend on where the chunk lives. Each call touches exactly one chunk with plain
//! IEEE-754 FP32 operations in a fixed order (no fused multiply-add, no reductions), so
//! the result is the same whichever worker runs it and whatever its neighbours are.
use wide::f32x8;

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

/// Values per block of the vectorised body (eight FP32 lanes: one AVX register, two SSE).
const LANES: usize = 8;

/// The step's scalar constants, computed once per chunk.
struct Constants {
    beta1: f32,
    beta2: f32,
    one_minus_beta1: f32,
    one_minus_beta2: f32,
    bias_correction2_sqrt: f32,
    epsilon: f32,
    step_size: f32,
    decay: f32,
}

impl Constants {
    /// One element's update: the fixed per-element operation order of this module.
    #[inline(always)]
    fn element(&self, parameter: &mut f32, exp_avg: &mut f32, exp_avg_sq: &mut f32, g: f32) {
        let m = self.beta1 * *exp_avg + self.one_minus_beta1 * g;
        let v = self.beta2 * *exp_avg_sq + self.one_minus_beta2 * (g * g);
        let denominator = v.sqrt() / self.bias_correction2_sqrt + self.epsilon;
        let p = *parameter * self.decay;
        *parameter = p - self.step_size * (m / denominator);
        *exp_avg = m;
        *exp_avg_sq = v;
    }
}

/// [`Constants`] in every lane.
struct VectorConstants {
    beta1: f32x8,
    beta2: f32x8,
    one_minus_beta1: f32x8,
    one_minus_beta2: f32x8,
    bias_correction2_sqrt: f32x8,
    epsilon: f32x8,
    step_size: f32x8,
    decay: f32x8,
}

impl VectorConstants {
    fn of(c: &Constants) -> Self {
        VectorConstants {
            beta1: f32x8::splat(c.beta1),
            beta2: f32x8::splat(c.beta2),
            one_minus_beta1: f32x8::splat(c.one_minus_beta1),
            one_minus_beta2: f32x8::splat(c.one_minus_beta2),
            bias_correction2_sqrt: f32x8::splat(c.bias_correction2_sqrt),
            epsilon: f32x8::splat(c.epsilon),
            step_size: f32x8::splat(c.step_size),
            decay: f32x8::splat(c.decay),
        }
    }

    /// [`Constants::element`] on eight lanes: the same operations in the same order.
    #[inline(always)]
    fn block(
        &self,
        parameter: &mut [f32; LANES],
        exp_avg: &mut [f32; LANES],
        exp_avg_sq: &mut [f32; LANES],
        g: &[f32; LANES],
    ) {
        let g = f32x8::new(*g);
        let m = self.beta1 * f32x8::new(*exp_avg) + self.one_minus_beta1 * g;
        let v = self.beta2 * f32x8::new(*exp_avg_sq) + self.one_minus_beta2 * (g * g);
        let denominator = v.sqrt() / self.bias_correction2_sqrt + self.epsilon;
        let p = f32x8::new(*parameter) * self.decay;
        *parameter = (p - self.step_size * (m / denominator)).to_array();
        *exp_avg = m.to_array();
        *exp_avg_sq = v.to_array();
    }
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
    let constants = Constants {
        beta1: h.beta1,
        beta2: h.beta2,
        one_minus_beta1: 1.0f32 - h.beta1,
        one_minus_beta2: 1.0f32 - h.beta2,
        bias_correction2_sqrt: (1.0f32 - h.beta2.powi(exponent)).sqrt(),
        epsilon: h.epsilon,
        step_size: h.learning_rate / bias_correction1,
        decay: 1.0f32 - h.learning_rate * h.weight_decay,
    };
    // The body in blocks of eight contiguous values as `wide::f32x8` (SSE or AVX
    // `addps`/`mulps`/`divps`/`sqrtps` in every profile, the dev one included), then the
    // scalar tail. Every element goes through the same IEEE-754 operations in the same
    // order either way (add, mul, div and sqrt are correctly rounded per lane, and
    // neither Rust nor `wide`'s operators contract them into FMA), so vector lanes and the
    // tail give the bits the plain scalar loop gives (checked by the tests
    // `blocked_update_has_the_bits_of_the_scalar_loop` and its special-values twin).
    let (parameters, parameters_tail) = chunk.parameters.as_chunks_mut::<LANES>();
    let (exp_avg, exp_avg_tail) = chunk.exp_avg.as_chunks_mut::<LANES>();
    let (exp_avg_sq, exp_avg_sq_tail) = chunk.exp_avg_sq.as_chunks_mut::<LANES>();
    let (gradient, gradient_tail) = gradient.as_chunks::<LANES>();
    let vector = VectorConstants::of(&constants);
    let blocks = parameters
        .iter_mut()
        .zip(exp_avg.iter_mut())
        .zip(exp_avg_sq.iter_mut())
        .zip(gradient);
    for (((p, m), v), g) in blocks {
        vector.block(p, m, v, g);
    }
    let tail = parameters_tail
        .iter_mut()
        .zip(exp_avg_tail.iter_mut())
        .zip(exp_avg_sq_tail.iter_mut())
        .zip(gradient_tail);
    for (((p, m), v), &g) in tail {
        constants.element(p, m, v, g);
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

    /// The scalar loop this module shipped before it was written in blocks.
    fn reference_update(
        h: &Hyperparameters,
        step: u64,
        chunk: ChunkSlotsMut<'_>,
        gradient: &[f32],
    ) {
        let exponent = i32::try_from(step).unwrap_or(i32::MAX);
        let bias_correction1 = 1.0f32 - h.beta1.powi(exponent);
        let bias_correction2_sqrt = (1.0f32 - h.beta2.powi(exponent)).sqrt();
        let step_size = h.learning_rate / bias_correction1;
        let decay = 1.0f32 - h.learning_rate * h.weight_decay;
        let one_minus_beta1 = 1.0f32 - h.beta1;
        let one_minus_beta2 = 1.0f32 - h.beta2;
        for (i, &g) in gradient.iter().enumerate() {
            let m = h.beta1 * chunk.exp_avg[i] + one_minus_beta1 * g;
            let v = h.beta2 * chunk.exp_avg_sq[i] + one_minus_beta2 * (g * g);
            let denominator = v.sqrt() / bias_correction2_sqrt + h.epsilon;
            let p = chunk.parameters[i] * decay;
            chunk.parameters[i] = p - step_size * (m / denominator);
            chunk.exp_avg[i] = m;
            chunk.exp_avg_sq[i] = v;
        }
    }

    #[test]
    fn blocked_update_has_the_bits_of_the_scalar_loop() {
        let h = Hyperparameters::with_seed(5);
        // Lengths with and without a tail, values of every sign and many magnitudes.
        for length in [1usize, 7, 8, 9, 63, 8192, 8195] {
            let value = |i: usize, salt: u32| {
                let x = (i as u32).wrapping_mul(2_654_435_761).wrapping_add(salt);
                f32::from_bits(0x3000_0000 + (x % 0x1800_0000))
                    * if x & 1 == 0 { 1.0 } else { -1.0 }
            };
            let mut blocked = ChunkState::new(
                0,
                (0..length).map(|i| value(i, 1)).collect(),
                (0..length).map(|i| value(i, 2) * 1e-3).collect(),
                (0..length).map(|i| value(i, 3).abs() * 1e-6).collect(),
            )
            .expect("even slots");
            let mut scalar = blocked.clone();
            for step in 1..=3u64 {
                let gradient: Vec<f32> = (0..length).map(|i| value(i, 10 + step as u32)).collect();
                update_chunk(&h, step, blocked.slots_mut(), &gradient).expect("update");
                reference_update(&h, step, scalar.slots_mut(), &gradient);
                let bits = |values: &[f32]| values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(
                    bits(blocked.parameters()),
                    bits(scalar.parameters()),
                    "{length}"
                );
                assert_eq!(bits(blocked.exp_avg()), bits(scalar.exp_avg()), "{length}");
                assert_eq!(
                    bits(blocked.exp_avg_sq()),
                    bits(scalar.exp_avg_sq()),
                    "{length}"
                );
            }
        }
    }

    #[test]
    fn blocked_update_has_the_bits_of_the_scalar_loop_on_special_values() {
        // Zeros of both signs, subnormals, the extremes, infinities and NaNs, in every
        // lane position of the vector body and in the tail.
        let specials = [
            0.0f32,
            -0.0,
            f32::from_bits(1),
            -f32::from_bits(0x007f_ffff),
            f32::MIN_POSITIVE,
            f32::MAX,
            -f32::MAX,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            f32::from_bits(0xffc0_0001),
            1e-30,
            3e19,
        ];
        let h = Hyperparameters::with_seed(5);
        let length = specials.len() * 3 + 5;
        let pick = |i: usize, salt: usize| specials[(i * 7 + salt) % specials.len()];
        let mut blocked = ChunkState::new(
            0,
            (0..length).map(|i| pick(i, 0)).collect(),
            (0..length).map(|i| pick(i, 3)).collect(),
            (0..length).map(|i| pick(i, 5).abs()).collect(),
        )
        .expect("even slots");
        let mut scalar = blocked.clone();
        let gradient: Vec<f32> = (0..length).map(|i| pick(i, 11)).collect();
        update_chunk(&h, 2, blocked.slots_mut(), &gradient).expect("update");
        reference_update(&h, 2, scalar.slots_mut(), &gradient);
        // NaNs compare by class: Rust leaves a NaN result's payload unspecified, and
        // topology independence does not need it (an element takes the vector body or
        // the tail by its position in its chunk, never by placement). Every other value
        // compares bit for bit.
        let bits = |values: &[f32]| {
            values
                .iter()
                .map(|v| if v.is_nan() { None } else { Some(v.to_bits()) })
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(blocked.parameters()), bits(scalar.parameters()));
        assert_eq!(bits(blocked.exp_avg()), bits(scalar.exp_avg()));
        assert_eq!(bits(blocked.exp_avg_sq()), bits(scalar.exp_avg_sq()));
        assert!(
            blocked.parameters().iter().any(|v| v.is_nan())
                && blocked
                    .parameters()
                    .iter()
                    .any(|v| !v.is_nan() && *v != 0.0),
            "the specials reach both NaN and ordinary results"
        );
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
