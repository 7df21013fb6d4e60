//! Placement: which worker rank owns which optimizer chunk and logical micro-batch.
//!
//! Invariant: a `Topology` exists only through [`Topology::new`], so its worker count is
//! always in 1..=[`MAX_WORKERS`]. Ownership is `c mod W` / `m mod W`; it never changes a
//! byte of the state, only who holds it.

/// Largest worker count any topology may have (12 logical micro-batches).
pub const MAX_WORKERS: u32 = 12;

/// Which worker owns what, for W workers. Owning is placement only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    workers: u32,
}

/// Why a worker count is not usable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("worker count {0} is outside 1..={MAX_WORKERS}")]
pub struct TopologyError(pub u32);

impl Topology {
    /// A topology of `workers` ranks; refuses 0 and more than [`MAX_WORKERS`].
    pub fn new(workers: u32) -> Result<Self, TopologyError> {
        if workers == 0 || workers > MAX_WORKERS {
            return Err(TopologyError(workers));
        }
        Ok(Topology { workers })
    }

    /// Number of worker ranks (always in 1..=[`MAX_WORKERS`]).
    pub fn workers(&self) -> u32 {
        self.workers
    }

    /// Rank that owns optimizer chunk `chunk_id`.
    pub fn chunk_owner(&self, chunk_id: u32) -> u32 {
        chunk_id % self.workers
    }

    /// Rank that computes logical micro-batch `micro_batch`.
    pub fn micro_batch_owner(&self, micro_batch: u32) -> u32 {
        micro_batch % self.workers
    }

    /// Owner of each chunk, by chunk id.
    pub fn chunk_ownership(&self, chunk_count: usize) -> Vec<u32> {
        (0..chunk_count as u32)
            .map(|c| self.chunk_owner(c))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_bounds() {
        assert!(Topology::new(0).is_err());
        assert!(Topology::new(13).is_err());
        let t = Topology::new(4).expect("valid");
        assert_eq!(t.chunk_ownership(6), vec![0, 1, 2, 3, 0, 1]);
    }
}
