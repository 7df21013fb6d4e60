//! The store's own writer on the kernel (`crash-matrix --file-system ext4`): what each
//! scenario's starting store holds (made on the host, the durable starting image) and
//! what the writer does in the guest (`shardlift kernel-store-writer`, with a named
//! writer mutant's faults or none).
//!
//! The writer prints one acknowledgement line when its candidate's `commits/` fsync
//! (RFC 0001 §4 step 12) completed and one when LATEST's `refs/` fsync (step 16) did;
//! the guest agent marks each on the disk, so a crash state knows which of the two
//! durability promises it must keep.
use std::path::Path;

use serde::Serialize;

use crate::core::logical::LogicalState;
use crate::core::progress::NoProgress;
use crate::core::topology::Topology;
use crate::durable::fs::RealFs;
use crate::lab::error::LabError;
use crate::lab::mutants::{Mutant, MutantScenario};
use crate::lab::writer_mutants::{MutantFs, WriterFaults};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, HookStop};
use crate::store::layout::synthetic_state;
use crate::store::writer::{publish_with, reshard_with, Writer, LATEST_REL_PATH};
use crate::store::ObjectCheck;

/// The acknowledgement pattern of the store writer's lines.
pub const ACK_PATTERN: &str = "^ack ";
/// The line printed once the candidate's `commits/` fsync completed.
pub const ACK_COMMIT_DURABLE: &str = "ack commit-durable";
/// The line printed once LATEST's `refs/` fsync completed.
pub const ACK_LATEST_DURABLE: &str = "ack latest-durable";
/// The store's directory name in the file system under test (a bare relative root: the
/// writer runs in the file system's root, which it must fsync as the root's parent).
pub const STORE_DIR: &str = "store";
/// Elements per chunk of the kernel scenarios' states (12 objects a state).
pub const KERNEL_CHUNK_ELEMENTS: u32 = 32_768;

/// One writer run of the store on the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelScenario {
    /// A genesis publish into an empty file system.
    Genesis,
    /// A publish over generation 0.
    OverGeneration,
    /// Generation 0 resharded from four workers to two.
    Reshard,
    /// LATEST rewritten for generation 0 of a store that lost it.
    RepairLatest,
    /// A publish over generation 0 into a killed writer's leftovers: in the same guest a
    /// writer of the same state stops at its commit record (its objects installed, none
    /// of it synced by anything but its own fsyncs), then the publish runs.
    OverKilledWriter,
}

/// Every kernel scenario, in order.
pub const KERNEL_SCENARIOS: [KernelScenario; 5] = [
    KernelScenario::Genesis,
    KernelScenario::OverGeneration,
    KernelScenario::Reshard,
    KernelScenario::RepairLatest,
    KernelScenario::OverKilledWriter,
];

impl KernelScenario {
    /// Its kebab-case name.
    pub fn name(self) -> &'static str {
        match self {
            KernelScenario::Genesis => "genesis",
            KernelScenario::OverGeneration => "over-generation",
            KernelScenario::Reshard => "reshard",
            KernelScenario::RepairLatest => "repair-latest",
            KernelScenario::OverKilledWriter => "over-killed-writer",
        }
    }

    /// The scenario called `name`.
    pub fn find(name: &str) -> Option<KernelScenario> {
        KERNEL_SCENARIOS.into_iter().find(|s| s.name() == name)
    }

    /// The kernel scenario that runs a model scenario's writer step, if any (a racing
    /// writer, planted wrong bytes and a killed commit are the model's alone).
    pub fn for_model(scenario: MutantScenario) -> Option<KernelScenario> {
        match scenario {
            MutantScenario::Genesis | MutantScenario::GenesisBareRelativeRoot => {
                Some(KernelScenario::Genesis)
            }
            MutantScenario::OverGeneration0 => Some(KernelScenario::OverGeneration),
            MutantScenario::OverKilledLayout | MutantScenario::OverKilledObjects(_) => {
                Some(KernelScenario::OverKilledWriter)
            }
            MutantScenario::OverWrongBytes
            | MutantScenario::TwoWritersRacing
            | MutantScenario::RepairAfterKilledCommit => None,
        }
    }

    /// The kernel scenarios a writer mutant runs on: its model scenarios' kernel
    /// counterparts, each once, in order.
    pub fn for_mutant(mutant: &Mutant) -> Vec<KernelScenario> {
        let mut out: Vec<KernelScenario> = Vec::new();
        for scenario in mutant.scenarios.iter().filter_map(|&s| Self::for_model(s)) {
            if !out.contains(&scenario) {
                out.push(scenario);
            }
        }
        out
    }
}

/// Generation 0's state (four workers) and the state published over it.
pub fn kernel_states(seed: u64) -> (LogicalState, LogicalState) {
    (
        synthetic_state(seed, 3, KERNEL_CHUNK_ELEMENTS),
        synthetic_state(seed, 4, KERNEL_CHUNK_ELEMENTS),
    )
}

fn workers(count: u32) -> Result<Topology, LabError> {
    Ok(Topology::new(count)?)
}

/// Makes the scenario's starting store under `dir` (the directory the file system is
/// made from): nothing for a genesis, else generation 0 (without LATEST for a repair).
pub fn prepare_store(dir: &Path, scenario: KernelScenario, seed: u64) -> Result<(), LabError> {
    if scenario == KernelScenario::Genesis {
        return Ok(());
    }
    let root = dir.join(STORE_DIR);
    let (a, _) = kernel_states(seed);
    crate::store::publish(&root, &a, workers(4)?, &mut crate::store::NoHooks)?;
    if scenario == KernelScenario::RepairLatest {
        std::fs::remove_file(root.join(LATEST_REL_PATH))?;
    }
    Ok(())
}

/// Prints an acknowledgement line (through `ack`) at the two durability barriers.
struct AckHook<'a> {
    ack: &'a mut dyn FnMut(&str),
}

impl BarrierHook for AckHook<'_> {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        match event.barrier {
            Barrier::CommitAfterDirectoryFsync => (self.ack)(ACK_COMMIT_DURABLE),
            Barrier::LatestAfterDirectoryFsync => (self.ack)(ACK_LATEST_DURABLE),
            _ => {}
        }
        Ok(())
    }
}

/// Runs the scenario's writer on the store `root` with `faults`, acknowledging through
/// `ack`; returns the generation it committed (or, for a repair, named in LATEST).
pub fn run_scenario(
    root: &Path,
    scenario: KernelScenario,
    faults: WriterFaults,
    seed: u64,
    ack: &mut dyn FnMut(&str),
) -> Result<u64, LabError> {
    let (_, b) = kernel_states(seed);
    let mut hook = AckHook { ack };
    let mutant = MutantFs::new(&RealFs, root, faults);
    let generation = match scenario {
        KernelScenario::Genesis => {
            let (a, _) = kernel_states(seed);
            publish_with(&mutant, root, &a, workers(4)?, &mut hook)?
                .committed
                .generation
        }
        KernelScenario::OverGeneration => {
            publish_with(&mutant, root, &b, workers(4)?, &mut hook)?
                .committed
                .generation
        }
        KernelScenario::OverKilledWriter => {
            crate::lab::matrix::publish_killed_at_commit(root, &b, workers(4)?)?;
            publish_with(&mutant, root, &b, workers(4)?, &mut hook)?
                .committed
                .generation
        }
        KernelScenario::Reshard => {
            reshard_with(
                &RealFs,
                root,
                0,
                workers(2)?,
                ObjectCheck::Lengths,
                &mut hook,
                &mut NoProgress,
            )?
            .committed
            .generation
        }
        KernelScenario::RepairLatest => {
            let report = crate::store::recover(root)?;
            let selected = report.selected.ok_or_else(|| {
                LabError::Model("a LATEST repair needs a valid generation".into())
            })?;
            Writer::repair_latest(
                &mutant,
                root,
                &mut hook,
                selected.generation,
                selected.commit_digest,
            )?;
            selected.generation
        }
    };
    Ok(generation)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_names_round_trip_and_mutants_map_to_kernel_scenarios() {
        for scenario in KERNEL_SCENARIOS {
            assert_eq!(KernelScenario::find(scenario.name()), Some(scenario));
        }
        assert_eq!(KernelScenario::find("nope"), None);
        let scenarios = |name: &str| {
            let mutant = crate::lab::mutants::find(name).expect("registered");
            KernelScenario::for_mutant(mutant)
        };
        assert_eq!(
            scenarios("skip-object-file-fsync"),
            [KernelScenario::Genesis, KernelScenario::OverGeneration]
        );
        // The bare relative root and the plain genesis are one kernel run.
        assert_eq!(
            scenarios("skip-root-parent-fsync"),
            [KernelScenario::Genesis]
        );
        assert_eq!(
            scenarios("skip-found-object-fsync"),
            [
                KernelScenario::Genesis,
                KernelScenario::OverGeneration,
                KernelScenario::OverKilledWriter
            ]
        );
        assert!(scenarios("commit-rename-replaces").is_empty());
    }
}
