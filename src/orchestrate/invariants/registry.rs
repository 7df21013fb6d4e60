//! The registry of the eleven scenarios: what each claims, the violation its negative test
//! injects, and the checks its observation must contain. Pure data, so the scenarios, the
//! elastic case and the evidence all depend on it and it depends on none of them.

/// Checks the elastic observation (scenario 11, `elastic.rs`) must contain.
pub const ELASTIC_REQUIRED_CHECKS: &[&str] = &[
    "completed",
    "launcher_exit",
    "launcher_timed_out",
    "failure_exit_code_from_launcher_log",
    "marker_written_by_rank1_on_attempt0",
    "rank0_saw_marker_before_teardown",
    "final_reports",
    "rank0_restart_count",
    "rank1_restart_count",
    "rank0_max_restarts",
    "rank1_max_restarts",
    "rank0_world_size",
    "rank1_world_size",
    "rank0_loaded_generation",
    "rank1_loaded_generation",
    "rank0_parameters_sha256",
    "rank1_parameters_sha256",
    "rank0_optimizer_sha256",
    "rank1_optimizer_sha256",
    "rank0_cursor",
    "rank1_cursor",
    "rank0_loaded_root",
    "rank1_loaded_root",
    "rank0_next_root",
    "rank1_next_root",
    "rank0_next_ledger_digest",
    "rank1_next_ledger_digest",
    "commit_receipts_sha256",
    "latest_sha256",
    "staging_entries",
    "publish_attempted",
];

/// One registered scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScenarioSpec {
    /// Its number in the evidence (1-based, registry order).
    pub ordinal: u32,
    /// Its id (kebab-case; part of its evidence file names).
    pub id: &'static str,
    /// What a pass shows.
    pub claim: &'static str,
    /// The violation its negative test injects.
    pub violation: &'static str,
    /// Checks an observation must contain to be able to pass.
    pub required_checks: &'static [&'static str],
    /// Whether the scenario spawns child processes (publisher, recovery, workers).
    pub spawns_processes: bool,
    /// Whether a run may record it as skipped (only the elastic case, which needs
    /// Python torch); a skipped observation of any other scenario is a failure.
    pub skippable: bool,
}

/// The registry, in order. The ordinal is the scenario's number in the evidence.
pub const REGISTRY: [ScenarioSpec; 11] = [
    ScenarioSpec {
        ordinal: 1,
        id: "parameter-round-trip",
        claim: "a saved and loaded checkpoint has bit-identical parameters",
        violation: "a loader that flips one bit of one loaded parameter",
        required_checks: &["completed", "chunk_count", "topology_workers", "parameters_sha256"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 2,
        id: "optimizer-slots-and-step",
        claim: "AdamW exp_avg, exp_avg_sq and the step count survive save and load bit for bit",
        violation: "a loader that perturbs one exp_avg_sq value by one ulp",
        required_checks: &["completed", "slots_nonzero", "step", "exp_avg_sha256", "exp_avg_sq_sha256"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 3,
        id: "data-cursor-and-ledger",
        claim: "the global data cursor and ledger survive save and load, so the next batch is the same samples",
        violation: "a loader that advances the cursor by one sample",
        required_checks: &["completed", "cursor", "ledger_digest", "next_batch_sample_ids_sha256"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 4,
        id: "logical-state-root",
        claim: "the projected logical-state root of the loaded state equals the saved state's, the commit record's and recovery's",
        violation: "a loader that changes one hyper-parameter bit",
        required_checks: &["completed", "loaded_root", "commit_record_root", "recovery_selected_root"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 5,
        id: "resumed-next-step",
        claim: "the next step after save and load equals the uninterrupted next step bit for bit",
        violation: "a resume that resets the optimizer step count",
        required_checks: &["completed", "next_step", "next_cursor", "next_ledger_digest", "next_root", "next_loss_bits"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 6,
        id: "pointer-stable-across-failed-attempt",
        claim: "a publish attempt that fails before its commit point (SIGKILL at commit-after-file-fsync) leaves the generation pointer and every receipt digest unchanged",
        violation: "a writer that advances LATEST before renaming the commit record",
        required_checks: &["completed", "attempt_failed", "commit_receipts_sha256", "latest_sha256", "selected_generation", "selected_commit_digest"],
        spawns_processes: true,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 7,
        id: "no-promotion-after-failure",
        claim: "after a failed fsync the generation is aborted: no later generation is promoted and a fresh recovery selects the previous one",
        violation: "an orchestrator that retries and commits after the failed fsync",
        required_checks: &["completed", "failed_publish_refused", "candidate_commit_present", "valid_generations", "selected_generation", "selected_root"],
        spawns_processes: true,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 8,
        id: "reshard-w4-to-w3",
        claim: "an offline W4 to W3 reshard reuses the chunk objects, keeps the root, and the state loaded from the W3 generation continues exactly as the reference",
        violation: "a reshard that rewrites a chunk owned by rank 2, written to disk as a new chunk object with a manifest and commit record consistent with it",
        required_checks: &["completed", "recovery_selected_generation", "resharded_workers", "objects_written", "chunk_objects_sha256", "resharded_root", "w3_next_root", "w3_next_ledger_digest"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 9,
        id: "reshard-w3-to-w4-round-trip",
        claim: "W4 to W3 to W4 resharding returns the same chunk objects, ownership and root",
        violation: "a round trip that re-publishes a perturbed chunk instead of remapping",
        required_checks: &["completed", "objects_written", "chunk_objects_sha256", "ownership_sha256", "round_trip_root"],
        spawns_processes: false,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 10,
        id: "stale-latest-ignored",
        claim: "recovery in a fresh process reports a stale LATEST and selects the highest valid generation, without writing",
        violation: "a recovery policy that trusts LATEST",
        required_checks: &["completed", "latest_status", "selected_generation", "loaded_root", "latest_unchanged"],
        spawns_processes: true,
        skippable: false,
    },
    ScenarioSpec {
        ordinal: 11,
        id: "elastic-restart",
        claim: "under torch.distributed.run (2-to-2, --max-restarts=1) a rank-1 failure with code 91 on attempt 0 restarts the group, which resumes from the same committed generation with identical state and next step and promotes nothing",
        violation: "a restarted rank that resumes from a perturbed state",
        required_checks: ELASTIC_REQUIRED_CHECKS,
        spawns_processes: true,
        skippable: true,
    },
];

/// Looks a scenario up by id.
pub fn spec(id: &str) -> Option<&'static ScenarioSpec> {
    REGISTRY.iter().find(|s| s.id == id)
}
