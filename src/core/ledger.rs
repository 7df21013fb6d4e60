//! The data ledger: a hash chain over the sample ids each logical micro-batch consumed,
//! per step, in logical order. Ranks never enter it, so it is topology-normalised.
use crate::core::digest::{Digest, FramedHasher};

/// The ledger digest before any step.
pub fn genesis_ledger_digest(seed: u64) -> Digest {
    let mut hasher = FramedHasher::new("shardlift/ledger/genesis/v1");
    hasher.u64(seed);
    hasher.finish()
}

/// Digest of the sample ids one micro-batch consumed.
pub fn micro_batch_digest(sample_ids: &[u32]) -> Digest {
    let mut hasher = FramedHasher::new("shardlift/ledger/micro-batch/v1");
    for id in sample_ids {
        hasher.field(&id.to_le_bytes());
    }
    hasher.finish()
}

/// Extends the ledger chain by one step (`step` is the step being taken, 1-based).
pub fn extend_ledger(previous: Digest, step: u64, micro_batches: &[Vec<u32>]) -> Digest {
    let mut hasher = FramedHasher::new("shardlift/ledger/step/v1");
    hasher
        .field(&previous.0)
        .u64(step)
        .u64(micro_batches.len() as u64);
    for (m, samples) in micro_batches.iter().enumerate() {
        hasher.u64(m as u64).field(&micro_batch_digest(samples).0);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_chain_sees_order() {
        let g = genesis_ledger_digest(1);
        let a = extend_ledger(g, 1, &[vec![1, 2], vec![3, 4]]);
        let b = extend_ledger(g, 1, &[vec![3, 4], vec![1, 2]]);
        assert_ne!(a, b);
        assert_eq!(a, extend_ledger(g, 1, &[vec![1, 2], vec![3, 4]]));
    }
}
