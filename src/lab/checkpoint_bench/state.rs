//! The benchmarked state: one seeded state of about `--state-bytes`, shaped like a real
//! model's state dict — FP32 weight tensors of a few MiB each plus the optimizer's two
//! moments of the same shapes — held in memory as one buffer (the tensors one after
//! another, little-endian) with its layout.
use serde::Serialize;

use crate::core::rng::SplitMix64;

/// FP32 values in one weight tensor (4 MiB), the size of a mid-sized model's layer.
pub const TENSOR_ELEMENTS: u64 = 1 << 20;

/// One tensor of the state: its name, FP32 values and byte offset in the buffer.
#[derive(Clone, Debug, Serialize)]
pub struct TensorEntry {
    /// Its state-dict key, e.g. `model.layers.3.weight` or `optimizer.state.3.exp_avg`.
    pub name: String,
    /// FP32 values it holds.
    pub elements: u64,
    /// Where its bytes start in the buffer.
    pub offset: u64,
}

/// The state: every tensor's bytes in layout order, and the layout.
pub struct BenchState {
    /// The tensors' bytes, one after another.
    pub bytes: Vec<u8>,
    /// The tensors, weights first, then the first moments, then the second.
    pub tensors: Vec<TensorEntry>,
}

/// The layout of a state of `state_bytes` (rounded down to a whole number of FP32
/// weight/moment triples): weights of [`TENSOR_ELEMENTS`] values (the last one shorter),
/// then `exp_avg` and `exp_avg_sq` of the same shapes.
pub fn layout(state_bytes: u64) -> Vec<TensorEntry> {
    let weight_elements = state_bytes / 12;
    let layers = weight_elements.div_ceil(TENSOR_ELEMENTS);
    let mut tensors = Vec::new();
    let mut offset = 0u64;
    for kind in ["weight", "exp_avg", "exp_avg_sq"] {
        for layer in 0..layers {
            let elements = TENSOR_ELEMENTS.min(weight_elements - layer * TENSOR_ELEMENTS);
            let name = match kind {
                "weight" => format!("model.layers.{layer}.weight"),
                moment => format!("optimizer.state.{layer}.{moment}"),
            };
            tensors.push(TensorEntry {
                name,
                elements,
                offset,
            });
            offset += elements * 4;
        }
    }
    tensors
}

/// Generates the state of `state_bytes` seeded by `seed`: weights uniform in [-1, 1),
/// first moments a tenth of them, second moments their squares over a hundred (finite,
/// non-zero, every byte seeded).
pub fn generate(state_bytes: u64, seed: u64) -> BenchState {
    let tensors = layout(state_bytes);
    let total = tensors.last().map_or(0, |t| t.offset + t.elements * 4);
    let mut bytes = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    let layers = tensors.len() / 3;
    for (index, tensor) in tensors.iter().enumerate() {
        let layer = (index % layers.max(1)) as u64;
        let mut rng = SplitMix64::keyed(seed, "shardlift/bench/checkpoint-state/v1", layer);
        let moment = index / layers.max(1);
        for _ in 0..tensor.elements {
            let weight = rng.symmetric_unit_f32();
            let value = match moment {
                0 => weight,
                1 => weight * 0.1,
                _ => weight * weight * 0.01,
            };
            bytes.extend_from_slice(&value.to_le_bytes());
        }
    }
    BenchState { bytes, tensors }
}
