//! The logical training state: the model's parameters and AdamW slots in fixed-size
//! chunks with stable ids, plus step, data cursor, ledger digest and hyper-parameters.
//!
//! Invariants (checked by the only constructors, [`ChunkState::new`] and
//! [`LogicalState::from_parts`], and kept by every method, since no field is public):
//! - chunk `i` has id `i`; every chunk but the last holds exactly `chunk_elements`
//!   values; the chunks cover `PARAMETER_COUNT` values in order;
//! - each chunk's `parameters`, `exp_avg` and `exp_avg_sq` have the same length.
//!
//! Values change (training, and tests that flip bits through [`ChunkSlotsMut`]); lengths,
//! ids and the chunk order never do after construction.
//!
//! Nothing here depends on how many workers exist: ownership is a separate `Topology`
//! (`chunk c` and `micro-batch m` belong to rank `c mod W` and `m mod W`), so moving a
//! chunk between workers never changes a byte of it.
use crate::core::digest::{Digest, FramedHasher};
use crate::core::rng::SplitMix64;

/// Input features of the MLP (28×28 images).
pub const INPUT_FEATURES: usize = 784;
/// Hidden units of the MLP.
pub const HIDDEN_UNITS: usize = 128;
/// Output classes.
pub const CLASSES: usize = 10;

/// The model's tensors in their fixed flat order: (name, shape).
pub const PARAMETER_TENSORS: [(&str, [usize; 2]); 4] = [
    ("fc1.weight", [HIDDEN_UNITS, INPUT_FEATURES]),
    ("fc1.bias", [HIDDEN_UNITS, 1]),
    ("fc2.weight", [CLASSES, HIDDEN_UNITS]),
    ("fc2.bias", [CLASSES, 1]),
];

/// Total number of FP32 parameters (784·128 + 128 + 128·10 + 10).
pub const PARAMETER_COUNT: usize =
    INPUT_FEATURES * HIDDEN_UNITS + HIDDEN_UNITS + HIDDEN_UNITS * CLASSES + CLASSES;

/// Training hyper-parameters; every field enters the logical-state root.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hyperparameters {
    /// Seed of the initial parameters and the data permutations.
    pub seed: u64,
    /// AdamW learning rate.
    pub learning_rate: f32,
    /// AdamW first-moment decay.
    pub beta1: f32,
    /// AdamW second-moment decay.
    pub beta2: f32,
    /// AdamW denominator epsilon.
    pub epsilon: f32,
    /// AdamW decoupled weight decay.
    pub weight_decay: f32,
    /// Samples per logical micro-batch.
    pub micro_batch_size: u32,
    /// Logical micro-batches per global batch (L).
    pub logical_micro_batches: u32,
    /// FP32 values per optimizer chunk (the last chunk may be shorter).
    pub chunk_elements: u32,
}

impl Hyperparameters {
    /// The defaults every command uses unless told otherwise.
    pub fn with_seed(seed: u64) -> Self {
        Hyperparameters {
            seed,
            learning_rate: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-8,
            weight_decay: 1e-2,
            micro_batch_size: 16,
            logical_micro_batches: 12,
            chunk_elements: 8192,
        }
    }

    /// Samples consumed by one optimizer step.
    pub fn global_batch_size(&self) -> u64 {
        u64::from(self.micro_batch_size) * u64::from(self.logical_micro_batches)
    }

    /// Number of chunks the parameter vector is cut into.
    pub fn chunk_count(&self) -> usize {
        PARAMETER_COUNT.div_ceil(self.chunk_elements as usize)
    }

    /// Half-open element range of chunk `id` in the flat parameter vector.
    pub fn chunk_range(&self, id: usize) -> std::ops::Range<usize> {
        let size = self.chunk_elements as usize;
        let start = id * size;
        start..(start + size).min(PARAMETER_COUNT)
    }

    /// Writes every field, in the one fixed order, to `writer`. The logical-state root and
    /// the worker protocol are both written from here, so a new field reaches both.
    pub fn write_fields<W: HyperparameterWriter>(&self, writer: &mut W) {
        writer.u64("seed", self.seed);
        writer.f32("learning_rate", self.learning_rate);
        writer.f32("beta1", self.beta1);
        writer.f32("beta2", self.beta2);
        writer.f32("epsilon", self.epsilon);
        writer.f32("weight_decay", self.weight_decay);
        writer.u32("micro_batch_size", self.micro_batch_size);
        writer.u32("logical_micro_batches", self.logical_micro_batches);
        writer.u32("chunk_elements", self.chunk_elements);
    }

    /// Reads every field in [`Hyperparameters::write_fields`]' order (struct-literal fields
    /// are evaluated in the order written).
    pub fn read_fields<R: HyperparameterReader>(reader: &mut R) -> Result<Self, R::Error> {
        Ok(Hyperparameters {
            seed: reader.u64()?,
            learning_rate: reader.f32()?,
            beta1: reader.f32()?,
            beta2: reader.f32()?,
            epsilon: reader.f32()?,
            weight_decay: reader.f32()?,
            micro_batch_size: reader.u32()?,
            logical_micro_batches: reader.u32()?,
            chunk_elements: reader.u32()?,
        })
    }

    fn hash_into(&self, hasher: &mut FramedHasher) {
        self.write_fields(&mut RootFields(hasher));
    }
}

/// A sink for [`Hyperparameters::write_fields`]: one method per wire kind.
pub trait HyperparameterWriter {
    /// A 64-bit field.
    fn u64(&mut self, name: &'static str, value: u64);
    /// A 32-bit integer field.
    fn u32(&mut self, name: &'static str, value: u32);
    /// An FP32 field.
    fn f32(&mut self, name: &'static str, value: f32);
}

/// A source for [`Hyperparameters::read_fields`].
pub trait HyperparameterReader {
    /// Why a field could not be read.
    type Error;
    /// The next 64-bit field.
    fn u64(&mut self) -> Result<u64, Self::Error>;
    /// The next 32-bit integer field.
    fn u32(&mut self) -> Result<u32, Self::Error>;
    /// The next FP32 field.
    fn f32(&mut self) -> Result<f32, Self::Error>;
}

/// The root's encoding: integers widened to u64, floats as their little-endian bytes.
struct RootFields<'a>(&'a mut FramedHasher);

impl HyperparameterWriter for RootFields<'_> {
    fn u64(&mut self, _name: &'static str, value: u64) {
        self.0.u64(value);
    }
    fn u32(&mut self, _name: &'static str, value: u32) {
        self.0.u64(u64::from(value));
    }
    fn f32(&mut self, _name: &'static str, value: f32) {
        self.0.field(&value.to_le_bytes());
    }
}

/// One optimizer chunk: a contiguous slice of the flat parameter vector and its AdamW
/// moments. The AdamW step count is the state's `step`, shared by every chunk.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkState {
    id: u32,
    parameters: Vec<f32>,
    exp_avg: Vec<f32>,
    exp_avg_sq: Vec<f32>,
}

/// Mutable views of one chunk's three slots: values may change, lengths may not.
pub struct ChunkSlotsMut<'a> {
    /// The chunk's stable id.
    pub id: u32,
    /// The chunk's parameter values.
    pub parameters: &'a mut [f32],
    /// AdamW's first moment, one value per parameter.
    pub exp_avg: &'a mut [f32],
    /// AdamW's second moment, one value per parameter.
    pub exp_avg_sq: &'a mut [f32],
}

impl ChunkState {
    /// A chunk from its three slots, which must hold the same number of values.
    pub fn new(
        id: u32,
        parameters: Vec<f32>,
        exp_avg: Vec<f32>,
        exp_avg_sq: Vec<f32>,
    ) -> Result<Self, LogicalStateError> {
        for (slot, values) in [("exp_avg", &exp_avg), ("exp_avg_sq", &exp_avg_sq)] {
            if values.len() != parameters.len() {
                return Err(LogicalStateError::ChunkLength {
                    id,
                    slot,
                    expected: parameters.len(),
                    found: values.len(),
                });
            }
        }
        Ok(ChunkState {
            id,
            parameters,
            exp_avg,
            exp_avg_sq,
        })
    }

    /// The chunk's stable id: its index in logical order.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Values in each of the three slots.
    pub fn len(&self) -> usize {
        self.parameters.len()
    }

    /// Whether the chunk holds no values (never, in a valid state).
    pub fn is_empty(&self) -> bool {
        self.parameters.is_empty()
    }

    /// The chunk's parameter values.
    pub fn parameters(&self) -> &[f32] {
        &self.parameters
    }

    /// AdamW's first moment, one value per parameter.
    pub fn exp_avg(&self) -> &[f32] {
        &self.exp_avg
    }

    /// AdamW's second moment, one value per parameter.
    pub fn exp_avg_sq(&self) -> &[f32] {
        &self.exp_avg_sq
    }

    /// The three slots, mutable in value only.
    pub fn slots_mut(&mut self) -> ChunkSlotsMut<'_> {
        ChunkSlotsMut {
            id: self.id,
            parameters: &mut self.parameters,
            exp_avg: &mut self.exp_avg,
            exp_avg_sq: &mut self.exp_avg_sq,
        }
    }
}

/// Why a logical state is malformed.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LogicalStateError {
    /// `chunk_elements` is 0.
    #[error("chunk_elements must be at least 1")]
    ZeroChunkElements,
    /// The state holds the wrong number of chunks.
    #[error("expected {expected} chunks, found {found}")]
    ChunkCount {
        /// Chunks the parameter count needs.
        expected: usize,
        /// Chunks the state holds.
        found: usize,
    },
    /// A chunk's id is not its position.
    #[error("chunk at position {position} has id {id}")]
    ChunkId {
        /// Where the chunk stands in the list.
        position: usize,
        /// The id it carries (it must equal its position).
        id: u32,
    },
    /// A chunk's slot holds the wrong number of values.
    #[error("chunk {id}: {slot} holds {found} values, expected {expected}")]
    ChunkLength {
        /// The chunk's id.
        id: u32,
        /// The slot: `parameters`, `exp_avg` or `exp_avg_sq`.
        slot: &'static str,
        /// Values the chunk should hold.
        expected: usize,
        /// Values it holds.
        found: usize,
    },
    /// A batch dimension is 0.
    #[error("micro_batch_size and logical_micro_batches must be at least 1")]
    EmptyBatch,
}

/// The complete logical training state at an optimizer step boundary.
#[derive(Clone, Debug, PartialEq)]
pub struct LogicalState {
    hyperparameters: Hyperparameters,
    step: u64,
    cursor: u64,
    ledger_digest: Digest,
    chunks: Vec<ChunkState>,
}

impl LogicalState {
    /// The state at step 0: parameters from the seeded initialiser, zero moments.
    pub fn genesis(hyperparameters: Hyperparameters) -> Self {
        let flat = initial_parameters(hyperparameters.seed);
        let chunks = (0..hyperparameters.chunk_count())
            .map(|id| {
                let values = flat[hyperparameters.chunk_range(id)].to_vec();
                let zeros = vec![0.0f32; values.len()];
                ChunkState {
                    id: id as u32,
                    parameters: values,
                    exp_avg: zeros.clone(),
                    exp_avg_sq: zeros,
                }
            })
            .collect();
        LogicalState {
            hyperparameters,
            step: 0,
            cursor: 0,
            ledger_digest: crate::core::ledger::genesis_ledger_digest(hyperparameters.seed),
            chunks,
        }
    }

    /// A state from its parts, checked against the invariants in the module docs.
    pub fn from_parts(
        hyperparameters: Hyperparameters,
        step: u64,
        cursor: u64,
        ledger_digest: Digest,
        chunks: Vec<ChunkState>,
    ) -> Result<Self, LogicalStateError> {
        let state = LogicalState {
            hyperparameters,
            step,
            cursor,
            ledger_digest,
            chunks,
        };
        state.validate()?;
        Ok(state)
    }

    /// The hyper-parameters the state trains under.
    pub fn hyperparameters(&self) -> &Hyperparameters {
        &self.hyperparameters
    }

    /// Optimizer steps taken so far (AdamW's `t`).
    pub fn step(&self) -> u64 {
        self.step
    }

    /// Global index of the next unconsumed sample in the per-epoch permutation stream.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Running digest of the data ledger up to `step` (see `sampling`).
    pub fn ledger_digest(&self) -> Digest {
        self.ledger_digest
    }

    /// Every chunk, in logical order (id = index).
    pub fn chunks(&self) -> &[ChunkState] {
        &self.chunks
    }

    /// Chunk `id`'s slots, mutable in value only (`None` past the last chunk).
    pub fn chunk_slots_mut(&mut self, id: usize) -> Option<ChunkSlotsMut<'_>> {
        self.chunks.get_mut(id).map(ChunkState::slots_mut)
    }

    /// Every chunk's slots in logical order, mutable in value only.
    pub fn slots_mut(&mut self) -> impl Iterator<Item = ChunkSlotsMut<'_>> {
        self.chunks.iter_mut().map(ChunkState::slots_mut)
    }

    /// Puts `chunk` in the place its id names; it must hold that place's length.
    pub fn replace_chunk(&mut self, chunk: ChunkState) -> Result<(), LogicalStateError> {
        let found = self.chunks.len();
        let Some(place) = self.chunks.get_mut(chunk.id as usize) else {
            return Err(LogicalStateError::ChunkCount {
                expected: chunk.id as usize + 1,
                found,
            });
        };
        if place.len() != chunk.len() {
            return Err(LogicalStateError::ChunkLength {
                id: chunk.id,
                slot: "parameters",
                expected: place.len(),
                found: chunk.len(),
            });
        }
        *place = chunk;
        Ok(())
    }

    /// Sets the counters (no invariant ties them to the chunks).
    pub fn set_counters(&mut self, step: u64, cursor: u64, ledger_digest: Digest) {
        self.step = step;
        self.cursor = cursor;
        self.ledger_digest = ledger_digest;
    }

    /// Checks the invariants in the module docs.
    fn validate(&self) -> Result<(), LogicalStateError> {
        let h = &self.hyperparameters;
        if h.chunk_elements == 0 {
            return Err(LogicalStateError::ZeroChunkElements);
        }
        if h.micro_batch_size == 0 || h.logical_micro_batches == 0 {
            return Err(LogicalStateError::EmptyBatch);
        }
        if self.chunks.len() != h.chunk_count() {
            return Err(LogicalStateError::ChunkCount {
                expected: h.chunk_count(),
                found: self.chunks.len(),
            });
        }
        for (position, chunk) in self.chunks.iter().enumerate() {
            if chunk.id as usize != position {
                return Err(LogicalStateError::ChunkId {
                    position,
                    id: chunk.id,
                });
            }
            let expected = h.chunk_range(position).len();
            for (slot, values) in [
                ("parameters", &chunk.parameters),
                ("exp_avg", &chunk.exp_avg),
                ("exp_avg_sq", &chunk.exp_avg_sq),
            ] {
                if values.len() != expected {
                    return Err(LogicalStateError::ChunkLength {
                        id: chunk.id,
                        slot,
                        expected,
                        found: values.len(),
                    });
                }
            }
        }
        Ok(())
    }

    /// The flat parameter vector in the model's fixed tensor order.
    pub fn flat_parameters(&self) -> Vec<f32> {
        let mut flat = Vec::with_capacity(PARAMETER_COUNT);
        for chunk in &self.chunks {
            flat.extend_from_slice(&chunk.parameters);
        }
        flat
    }

    /// The projected logical-state root: SHA-256 over hyper-parameters, step, cursor and
    /// every chunk's parameter and slot bytes in chunk-id order. Placement (which worker
    /// owns a chunk) is deliberately absent, so W4 and W3 agree at the same step.
    pub fn logical_state_root(&self) -> Digest {
        let payloads: Vec<[Vec<u8>; 3]> = self
            .chunks
            .iter()
            .map(|c| {
                [
                    f32_le_bytes(&c.parameters),
                    f32_le_bytes(&c.exp_avg),
                    f32_le_bytes(&c.exp_avg_sq),
                ]
            })
            .collect();
        logical_state_root_of_payloads(&self.hyperparameters, self.step, self.cursor, &payloads)
    }
}

/// The logical-state root from stored payload bytes: `payloads[i]` holds chunk `i`'s
/// parameter, `exp_avg` and `exp_avg_sq` bytes (FP32 little-endian). The one definition of
/// the root: `LogicalState::logical_state_root` and store recovery both call it, so the
/// store can check a root without decoding values.
pub fn logical_state_root_of_payloads(
    hyperparameters: &Hyperparameters,
    step: u64,
    cursor: u64,
    payloads: &[[Vec<u8>; 3]],
) -> Digest {
    let mut hasher = FramedHasher::new("shardlift/logical-state-root/v1");
    hyperparameters.hash_into(&mut hasher);
    hasher.u64(step).u64(cursor);
    hasher.u64(payloads.len() as u64);
    for (id, [parameters, exp_avg, exp_avg_sq]) in payloads.iter().enumerate() {
        hasher.u64(id as u64);
        hasher.field(parameters).field(exp_avg).field(exp_avg_sq);
    }
    hasher.finish()
}

/// Little-endian bytes of FP32 values (the on-disk and on-wire chunk payload format).
pub fn f32_le_bytes(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * 4);
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}

/// Why bytes are not a whole number of FP32 values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0} bytes is not a multiple of 4 (FP32)")]
pub struct F32LengthError(pub usize);

/// Parses little-endian FP32 values.
pub fn f32_from_le_bytes(bytes: &[u8]) -> Result<Vec<f32>, F32LengthError> {
    if !bytes.len().is_multiple_of(4) {
        return Err(F32LengthError(bytes.len()));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

/// Seeded initial parameters: U(-k, k) with k = 1/sqrt(fan_in), as PyTorch's `Linear`
/// default does, but from our own generator so no hidden torch RNG is involved.
pub fn initial_parameters(seed: u64) -> Vec<f32> {
    let mut flat = Vec::with_capacity(PARAMETER_COUNT);
    for (index, (name, shape)) in PARAMETER_TENSORS.iter().enumerate() {
        let fan_in = if name.starts_with("fc1") {
            INPUT_FEATURES
        } else {
            HIDDEN_UNITS
        };
        let bound = 1.0f32 / (fan_in as f32).sqrt();
        let mut rng = SplitMix64::keyed(seed, name, index as u64);
        for _ in 0..shape[0] * shape[1] {
            flat.push(rng.symmetric_unit_f32() * bound);
        }
    }
    debug_assert_eq!(flat.len(), PARAMETER_COUNT);
    flat
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn genesis_is_valid_and_seeded() {
        let a = LogicalState::genesis(Hyperparameters::with_seed(7));
        a.validate().expect("valid");
        assert_eq!(a.flat_parameters().len(), PARAMETER_COUNT);
        let b = LogicalState::genesis(Hyperparameters::with_seed(7));
        assert_eq!(a.logical_state_root(), b.logical_state_root());
        let c = LogicalState::genesis(Hyperparameters::with_seed(8));
        assert_ne!(a.logical_state_root(), c.logical_state_root());
    }

    #[test]
    fn root_sees_every_slot_bit() {
        let a = LogicalState::genesis(Hyperparameters::with_seed(1));
        let mut b = a.clone();
        let last = b.chunks.len() - 1;
        let value = b.chunks[last].exp_avg_sq[0];
        b.chunks[last].exp_avg_sq[0] = f32::from_bits(value.to_bits() ^ 1);
        assert_ne!(a.logical_state_root(), b.logical_state_root());
    }

    #[test]
    fn the_constructors_name_bad_chunks() {
        let good = LogicalState::genesis(Hyperparameters::with_seed(1));
        let parts = |chunks: Vec<ChunkState>| {
            LogicalState::from_parts(
                *good.hyperparameters(),
                good.step(),
                good.cursor(),
                good.ledger_digest(),
                chunks,
            )
        };
        assert_eq!(parts(good.chunks().to_vec()).as_ref(), Ok(&good));
        let short = ChunkState::new(2, vec![0.0; 3], vec![0.0; 2], vec![0.0; 3]);
        assert!(matches!(
            short,
            Err(LogicalStateError::ChunkLength {
                id: 2,
                slot: "exp_avg",
                expected: 3,
                found: 2
            })
        ));
        let mut chunks = good.chunks().to_vec();
        chunks.pop();
        assert!(matches!(
            parts(chunks),
            Err(LogicalStateError::ChunkCount { .. })
        ));
        let mut chunks = good.chunks().to_vec();
        chunks.swap(0, 1);
        assert!(matches!(
            parts(chunks),
            Err(LogicalStateError::ChunkId { position: 0, id: 1 })
        ));
        let mut chunks = good.chunks().to_vec();
        chunks[3] = ChunkState::new(3, vec![0.0; 5], vec![0.0; 5], vec![0.0; 5]).expect("even");
        assert!(matches!(
            parts(chunks),
            Err(LogicalStateError::ChunkLength { id: 3, .. })
        ));
    }

    #[test]
    fn replace_chunk_keeps_ids_and_lengths() {
        let mut state = LogicalState::genesis(Hyperparameters::with_seed(1));
        let before = state.clone();
        let count = state.chunks().len();
        let wrong_length = ChunkState::new(1, vec![0.0; 5], vec![0.0; 5], vec![0.0; 5]);
        assert!(state.replace_chunk(wrong_length.expect("even")).is_err());
        let past_the_end = ChunkState::new(count as u32, vec![0.0], vec![0.0], vec![0.0]);
        assert!(state.replace_chunk(past_the_end.expect("even")).is_err());
        assert_eq!(state, before);
        let mut chunk = state.chunks()[1].clone();
        chunk.slots_mut().parameters[0] = 42.0;
        state.replace_chunk(chunk).expect("same id and length");
        assert_eq!(state.chunks()[1].parameters()[0], 42.0);
        assert_ne!(state.logical_state_root(), before.logical_state_root());
    }

    #[test]
    fn f32_bytes_round_trip() {
        let values = [1.5f32, -0.0, f32::MIN_POSITIVE];
        let bytes = f32_le_bytes(&values);
        assert_eq!(f32_from_le_bytes(&bytes).expect("whole"), values.to_vec());
        assert_eq!(f32_from_le_bytes(&bytes[..5]), Err(F32LengthError(5)));
    }
}
