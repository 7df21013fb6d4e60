//! The global data cursor: which samples each logical micro-batch of a step reads.
//!
//! The cursor is the global index of the next unconsumed sample in an endless stream
//! made of per-epoch permutations: position `c` is sample `perm_e[c mod N]` with
//! `e = c div N`, and `perm_e` is a Fisher–Yates shuffle keyed by (seed, e). Logical
//! micro-batch `m` of a step starting at cursor `c` takes stream positions
//! `c + m·B .. c + (m+1)·B`. No rank appears anywhere, so every topology reads the same
//! samples for the same micro-batch.
//!
//! The ledger (`core::ledger`) is a hash chain: each step folds in, per logical micro-batch in order, the
//! digest of the sample ids it consumed. Its digest is therefore topology-normalised by
//! construction and equal for any path that consumed the same samples in the same steps.
use crate::core::logical::Hyperparameters;
use crate::core::rng::SplitMix64;

/// Seeded per-epoch permutations of `0..sample_count`, one epoch cached.
#[derive(Debug)]
pub struct SampleStream {
    seed: u64,
    sample_count: u32,
    cached_epoch: Option<(u64, Vec<u32>)>,
}

impl SampleStream {
    /// `sample_count` must be non-zero.
    pub fn new(seed: u64, sample_count: u32) -> Self {
        assert!(
            sample_count > 0,
            "a sample stream needs at least one sample"
        );
        SampleStream {
            seed,
            sample_count,
            cached_epoch: None,
        }
    }

    fn permutation(&mut self, epoch: u64) -> &[u32] {
        if self.cached_epoch.as_ref().map(|(e, _)| *e) != Some(epoch) {
            let mut order: Vec<u32> = (0..self.sample_count).collect();
            let mut rng = SplitMix64::keyed(self.seed, "epoch-permutation", epoch);
            for i in (1..order.len()).rev() {
                let j = rng.below(i as u64 + 1) as usize;
                order.swap(i, j);
            }
            self.cached_epoch = Some((epoch, order));
        }
        match &self.cached_epoch {
            Some((_, order)) => order,
            None => unreachable!("cache filled above"),
        }
    }

    /// Sample ids at stream positions `start .. start + count`.
    pub fn samples(&mut self, start: u64, count: u64) -> Vec<u32> {
        let n = u64::from(self.sample_count);
        (start..start + count)
            .map(|position| {
                let epoch = position / n;
                self.permutation(epoch)[(position % n) as usize]
            })
            .collect()
    }

    /// Sample ids of every logical micro-batch of the step that starts at `cursor`.
    pub fn step_micro_batches(
        &mut self,
        hyperparameters: &Hyperparameters,
        cursor: u64,
    ) -> Vec<Vec<u32>> {
        let size = u64::from(hyperparameters.micro_batch_size);
        (0..u64::from(hyperparameters.logical_micro_batches))
            .map(|m| self.samples(cursor + m * size, size))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_epoch_is_a_permutation_and_epochs_differ() {
        let mut stream = SampleStream::new(9, 100);
        let mut first = stream.samples(0, 100);
        let second = stream.samples(100, 100);
        assert_ne!(first, second);
        first.sort_unstable();
        assert_eq!(first, (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn positions_do_not_depend_on_how_they_are_read() {
        let h = Hyperparameters {
            micro_batch_size: 7,
            logical_micro_batches: 12,
            ..Hyperparameters::with_seed(5)
        };
        let mut a = SampleStream::new(5, 50);
        let batches = a.step_micro_batches(&h, 40); // crosses an epoch boundary
        let mut b = SampleStream::new(5, 50);
        let flat = b.samples(40, 84);
        assert_eq!(batches.concat(), flat);
    }
}
