//! Where one step spent its time.
use std::time::{Duration, Instant};

/// Where one step of a session spent its time, as the coordinator and the workers
/// measured it (nanoseconds of wall-clock time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTimings {
    /// The whole step, planning to the last updated chunk taken back.
    pub total_ns: u64,
    /// Planning the micro-batches (gathering their bytes from the split).
    pub plan_ns: u64,
    /// From encoding the first `Compute` to the last micro-batch gradient added to the
    /// logical-order sum (the sum runs as the gradients arrive, inside this phase).
    pub compute_round_trip_ns: u64,
    /// The slowest worker's forward and backward passes (its engine time alone).
    pub compute_max_ns: u64,
    /// All workers' forward and backward time, added up.
    pub compute_sum_ns: u64,
    /// Summing the micro-batch gradients in logical order (the adds alone, made during
    /// the compute round trip as each gradient arrives).
    pub reduction_ns: u64,
    /// From encoding the first `Update` to the last `Chunks` applied.
    pub update_round_trip_ns: u64,
    /// The slowest worker's AdamW.
    pub adamw_max_ns: u64,
    /// All workers' AdamW time, added up.
    pub adamw_sum_ns: u64,
}

impl StepTimings {
    /// The round trips less the slowest worker's own work and the coordinator's adds:
    /// encoding, the socket writes and reads, decoding and waiting to be scheduled.
    pub fn ipc_ns(&self) -> u64 {
        self.compute_round_trip_ns
            .saturating_sub(self.compute_max_ns)
            .saturating_sub(self.reduction_ns)
            + self.update_round_trip_ns.saturating_sub(self.adamw_max_ns)
    }
}

pub(super) fn elapsed_ns(since: Instant) -> u64 {
    duration_ns(since.elapsed())
}

pub(super) fn duration_ns(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
