//! `crash-matrix --file-system ext4`: the store's own writer on the kernel. Each run
//! boots a guest on a file system made from the scenario's starting store, runs the
//! writer there (`shardlift kernel-store-writer`, the correct one or a named writer
//! mutant) and holds every crash state of its disk to the crash matrix's invariants
//! ([`crate::lab::matrix::check_store_state`]): the store's recovery on the recovered
//! tree, the candidate kept once its `commits/` fsync was acknowledged, LATEST durable
//! once its `refs/` fsync was. Each writer mutant is run in the model too, so the report
//! is a table: caught by the model; caught or masked by the kernel (a journaling file
//! system commits other pending metadata with any fsync, so it masks some dropped
//! directory fsyncs).
//!
//! Output directory: `correct/<scenario>/` and `mutants/<name>/<scenario>/` (each a
//! `crash-test` kernel run's directory, its images removed), `bases/<scenario>/`.
use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::core::digest::Digest;
use crate::lab::external::check::CheckLimits;
use crate::lab::kernel::config::{FileSystem, KernelConfig};
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::run::{self, KernelReport};
use crate::lab::kernel::state_check::StateCheck;
use crate::lab::kernel::states::StateLimits;
use crate::lab::kernel::store_writer::{
    prepare_store, run_scenario, KernelScenario, ACK_COMMIT_DURABLE, ACK_LATEST_DURABLE,
    ACK_PATTERN, STORE_DIR,
};
use crate::lab::matrix::{
    check_store_state, incomplete_bytes, intact_with, recorded_expectation, store_expectations,
    GenerationExpectation, Invariant, MatrixConfig, StoreExpectations, StoreStateView, Violation,
};
use crate::lab::mutants::{run_mutant, Mutant, MUTANTS, MUTANT_VIOLATIONS_REPORTED};
use crate::lab::recovery_mutants::RecoveryFaults;
use crate::lab::writer_mutants::WriterFaults;

/// Violations kept per run in the report (the run's directory keeps every failing state).
pub const VIOLATIONS_REPORTED: usize = 5;

/// How a kernel crash matrix runs.
#[derive(Clone, Debug)]
pub struct KernelMatrixConfig {
    /// The torch-free `shardlift` binary (the guest's agent and writer).
    pub agent_exe: PathBuf,
    /// The kernel install directory (default: the per-user cache).
    pub kernel_dir: Option<PathBuf>,
    /// The file system.
    pub file_system: FileSystem,
    /// The output directory (new or empty).
    pub out: PathBuf,
    /// Seed of the states and of the sampled crash states.
    pub seed: u64,
    /// The scenarios the correct writer runs (and the only ones the mutants run).
    pub scenarios: Vec<KernelScenario>,
    /// The writer mutants run (each on its model scenarios' kernel counterparts).
    pub mutants: Vec<&'static Mutant>,
    /// Bounds of each run's crash states.
    pub states: StateLimits,
    /// Most states checked per run.
    pub max_states: usize,
    /// Deadline of each guest, in milliseconds.
    pub guest_timeout_ms: u64,
    /// The model's bounds for the mutants' model runs.
    pub model: MatrixConfig,
}

/// The writer mutants of the registry (the recovery mutants break recovery, which runs
/// on the host either way).
pub fn writer_mutants() -> Vec<&'static Mutant> {
    MUTANTS
        .iter()
        .filter(|m| m.faults.recovery == RecoveryFaults::NONE)
        .collect()
}

/// One guest run of the store's writer, as reported.
#[derive(Clone, Debug, Serialize)]
pub struct KernelRun {
    /// The scenario.
    pub scenario: KernelScenario,
    /// Log entries, flushes and states of the run.
    pub log_flushes: usize,
    /// Distinct flush-point states.
    pub flush_points: usize,
    /// Distinct seeded reordered states.
    pub reordered_states: usize,
    /// Distinct torn states.
    pub torn_states: usize,
    /// States checked (a mutant's run stops once it has
    /// [`MUTANT_VIOLATIONS_REPORTED`] violations of its expected invariant).
    pub states_checked: usize,
    /// States that failed recovery or broke an invariant.
    pub failing_states: usize,
    /// Acknowledgements the agent marked (the writer's lines, then its exit).
    pub acknowledgements: Vec<String>,
    /// Per invariant broken: the number of states that broke it.
    pub invariants_violated: BTreeMap<Invariant, usize>,
    /// The first violations (and recovery failures, as `check-completed`).
    pub violations: Vec<Violation>,
    /// The run's wall-clock time, in milliseconds.
    pub wall_ms: u64,
}

/// How the kernel judged a mutant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KernelVerdict {
    /// A crash state broke its expected invariant.
    Caught,
    /// No crash state did: the file system masked the bug on these runs.
    Masked,
    /// No scenario of it ran on the kernel (its model scenarios are the model's alone, or
    /// were not among the scenarios run).
    NotRun,
}

/// One row of the table: a mutant, the model's verdict and the kernel's.
#[derive(Clone, Debug, Serialize)]
pub struct MutantRow {
    /// The mutant.
    pub name: &'static str,
    /// The rule of RFC 0001 it breaks.
    pub breaks: &'static str,
    /// The invariant it must be seen to break.
    pub expected_invariant: Invariant,
    /// The file system.
    pub file_system: FileSystem,
    /// Whether the model caught it (a violation of its expected invariant).
    pub model_caught: bool,
    /// Distinct model states checked.
    pub model_states: u64,
    /// The kernel's verdict.
    pub kernel: KernelVerdict,
    /// Its kernel runs.
    pub runs: Vec<KernelRun>,
}

/// The result of `crash-matrix --file-system ...`.
#[derive(Clone, Debug, Serialize)]
pub struct KernelMatrixReport {
    /// `shardlift-crash-matrix-kernel-report`.
    pub schema: &'static str,
    /// The schema's version (1).
    pub version: u32,
    /// The file system.
    pub file_system: FileSystem,
    /// The pinned kernel.
    pub kernel: run::KernelPin,
    /// The accelerator QEMU used.
    pub accelerator: Option<crate::lab::kernel::guest::Accelerator>,
    /// The correct writer's runs.
    pub correct: Vec<KernelRun>,
    /// The correct writer's failing states, over every run (must be 0).
    pub correct_failing_states: usize,
    /// One row per writer mutant.
    pub mutants: Vec<MutantRow>,
    /// Mutants the model let through (each a hole in the model).
    pub model_survivors: Vec<&'static str>,
    /// Wall-clock time of the whole matrix, in milliseconds.
    pub wall_ms: u64,
}

/// Runs the correct writer on every scenario, then each mutant, with progress lines.
pub fn run_matrix(
    config: &KernelMatrixConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<KernelMatrixReport, KernelError> {
    let started = Instant::now();
    prepare_out(&config.out)?;
    let mut accelerator = None;
    let mut correct = Vec::new();
    for &scenario in &config.scenarios {
        progress(&format!("correct writer: {}", scenario.name()));
        let dir = config.out.join("correct").join(scenario.name());
        let (run, report) = one_run(config, scenario, None, &dir, progress)?;
        accelerator = Some(report.accelerator);
        correct.push(run);
    }
    let mut rows = Vec::new();
    for &mutant in &config.mutants {
        progress(&format!("mutant {}: the model", mutant.name));
        let model = run_mutant(mutant, &config.model)?;
        let mut runs = Vec::new();
        let scenarios = KernelScenario::for_mutant(mutant)
            .into_iter()
            .filter(|s| config.scenarios.contains(s));
        for scenario in scenarios {
            progress(&format!(
                "mutant {}: {} on the kernel",
                mutant.name,
                scenario.name()
            ));
            let dir = config
                .out
                .join("mutants")
                .join(mutant.name)
                .join(scenario.name());
            let (run, report) = one_run(config, scenario, Some(mutant), &dir, progress)?;
            accelerator = Some(report.accelerator);
            runs.push(run);
        }
        let kernel = if runs.is_empty() {
            KernelVerdict::NotRun
        } else if runs.iter().any(|r| {
            r.invariants_violated
                .contains_key(&mutant.expected_invariant)
        }) {
            KernelVerdict::Caught
        } else {
            KernelVerdict::Masked
        };
        rows.push(MutantRow {
            name: mutant.name,
            breaks: mutant.breaks,
            expected_invariant: mutant.expected_invariant,
            file_system: config.file_system,
            model_caught: model.killed,
            model_states: model.crash_states,
            kernel,
            runs,
        });
    }
    Ok(KernelMatrixReport {
        schema: "shardlift-crash-matrix-kernel-report",
        version: 1,
        file_system: config.file_system,
        kernel: run::KernelPin {
            release: crate::lab::kernel::pin::KERNEL_RELEASE,
            package_sha256: crate::lab::kernel::pin::KERNEL_PACKAGE_SHA256,
        },
        accelerator,
        correct_failing_states: correct.iter().map(|r| r.failing_states).sum(),
        correct,
        model_survivors: rows
            .iter()
            .filter(|r| !r.model_caught)
            .map(|r| r.name)
            .collect(),
        mutants: rows,
        wall_ms: started.elapsed().as_millis() as u64,
    })
}

fn prepare_out(out: &Path) -> Result<(), KernelError> {
    if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
        return Err(crate::lab::external::CrashTestError::OutputNotEmpty {
            path: out.to_owned(),
        }
        .into());
    }
    for dir in ["bases", "correct", "mutants"] {
        std::fs::create_dir_all(out.join(dir))
            .map_err(KernelError::io("creating the output layout"))?;
    }
    Ok(())
}

/// One guest run of `scenario` by the correct writer (`mutant` none) or a mutant, in
/// `dir`; its disk images and initramfs are removed afterwards.
fn one_run(
    config: &KernelMatrixConfig,
    scenario: KernelScenario,
    mutant: Option<&'static Mutant>,
    dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<(KernelRun, KernelReport), KernelError> {
    let started = Instant::now();
    let base = config.out.join("bases").join(scenario.name());
    if !base.exists() {
        std::fs::create_dir_all(&base).map_err(KernelError::io("creating a base"))?;
        prepare_store(&base, scenario, config.seed)?;
    }
    let mut writer: Vec<OsString> = vec![
        config.agent_exe.clone().into(),
        "kernel-store-writer".into(),
        "--scenario".into(),
        scenario.name().into(),
        "--seed".into(),
        config.seed.to_string().into(),
    ];
    if let Some(mutant) = mutant {
        writer.extend(["--mutant".into(), mutant.name.into()]);
    }
    let kernel = KernelConfig {
        agent_exe: config.agent_exe.clone(),
        kernel_dir: config.kernel_dir.clone(),
        file_system: config.file_system,
        out: dir.to_owned(),
        writer,
        check: String::new(),
        // Single-quoted for `sh -c`, a quote in the path closed and escaped.
        setup: Some(format!(
            "cp -a '{}'/. .",
            base.display().to_string().replace('\'', "'\\''")
        )),
        ack: Some(ACK_PATTERN.to_owned()),
        unread: Vec::new(),
        guest_timeout_ms: config.guest_timeout_ms,
        setup_timeout_ms: 60_000,
        states: config.states,
        max_states: config.max_states,
        checks: CheckLimits::default(),
        hold_model: None,
        replay: false,
    };
    let mut check = StoreCheck::new(
        &base,
        (scenario, config.seed),
        mutant,
        &config.out.join("host-run"),
    )?;
    let report = run::run_with(&kernel, Some(&mut check), &mut |line| progress(line))?;
    for name in ["disk.img", "base.img", "initramfs.cpio"] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    if report.failing_states == 0 {
        let _ = std::fs::remove_file(dir.join("blocks.log"));
    }
    let (invariants_violated, violations) = tally(&report);
    let run = KernelRun {
        scenario,
        log_flushes: report.log_flushes,
        flush_points: report.flush_points,
        reordered_states: report.reordered_states,
        torn_states: report.torn_states,
        states_checked: check.checked.get(),
        failing_states: report.failing_states,
        acknowledgements: report.acknowledgements.clone(),
        invariants_violated,
        violations,
        wall_ms: started.elapsed().as_millis() as u64,
    };
    Ok((run, report))
}

/// Per invariant, the states of `report` that broke it; and its first violations (a
/// state the file system could not recover counts as `check-completed`).
fn tally(report: &KernelReport) -> (BTreeMap<Invariant, usize>, Vec<Violation>) {
    let mut invariants_violated: BTreeMap<Invariant, usize> = BTreeMap::new();
    let mut violations = Vec::new();
    for failure in &report.failures {
        let broken: Vec<Violation> = match &failure.recovery {
            Some(why) => vec![Violation::at(
                Invariant::CheckCompleted,
                &format!("state {}", failure.state),
                format!("the file system did not recover: {why}"),
            )],
            None => failure.violations.clone(),
        };
        let kinds: std::collections::BTreeSet<Invariant> =
            broken.iter().map(|v| v.invariant).collect();
        for kind in kinds {
            *invariants_violated.entry(kind).or_default() += 1;
        }
        for violation in broken {
            if violations.len() < VIOLATIONS_REPORTED {
                violations.push(violation);
            }
        }
    }
    (invariants_violated, violations)
}

/// The crash matrix's invariants on a kernel run's recovered states.
struct StoreCheck {
    /// The scenario's starting store (its files are the durable starting image's).
    base_store: PathBuf,
    mutant: Option<&'static Mutant>,
    previous: Option<GenerationExpectation>,
    roots: BTreeMap<u64, Digest>,
    /// The generation the writer commits (the same run on the host: a publish's bytes
    /// do not depend on its faults, which only drop or move fsyncs and renames).
    candidate: GenerationExpectation,
    /// Acknowledgements a state must follow for the candidate to be durable.
    commit_durable_after: Option<usize>,
    /// Acknowledgements a state must follow for LATEST to be durable.
    latest_durable_after: Option<usize>,
    /// States checked, and violations of the mutant's expected invariant found.
    checked: Cell<usize>,
    expected_found: Cell<usize>,
}

impl StoreCheck {
    fn new(
        base: &Path,
        (scenario, seed): (KernelScenario, u64),
        mutant: Option<&'static Mutant>,
        scratch: &Path,
    ) -> Result<Self, KernelError> {
        let base_store = base.join(STORE_DIR);
        let (previous, mut roots) = if base_store.exists() {
            store_expectations(&base_store)?
        } else {
            (None, BTreeMap::new())
        };
        let host = scratch.join(STORE_DIR);
        std::fs::create_dir_all(scratch).map_err(KernelError::io("creating the host run"))?;
        if base_store.exists() {
            crate::lab::corruption::copy_tree(&base_store, &host)
                .map_err(KernelError::io("copying the base for the host run"))?;
        }
        let generation = run_scenario(&host, scenario, WriterFaults::NONE, seed, &mut |_| {})?;
        let candidate = recorded_expectation(&host, generation)?;
        std::fs::remove_dir_all(scratch).map_err(KernelError::io("removing the host run"))?;
        roots.insert(candidate.generation, candidate.logical_state_root);
        Ok(StoreCheck {
            base_store,
            mutant,
            previous,
            roots,
            candidate,
            commit_durable_after: None,
            latest_durable_after: None,
            checked: Cell::new(0),
            expected_found: Cell::new(0),
        })
    }

    /// Files under `objects/` or `commits/` visible with incomplete bytes, other than
    /// the starting image's own.
    fn torn_files(&self, store: &Path, context: &str) -> Vec<Violation> {
        if !store.is_dir() {
            return Vec::new();
        }
        let Ok(files) = crate::lab::corruption::list_files(store) else {
            return vec![Violation::at(
                Invariant::CheckCompleted,
                context,
                "cannot list the recovered store",
            )];
        };
        let mut violations = Vec::new();
        for rel in files {
            let Ok(bytes) = std::fs::read(store.join(&rel)) else {
                continue;
            };
            let Some(violation) = incomplete_bytes(context, &rel, &bytes) else {
                continue;
            };
            // The starting image's own bytes are not this writer's to complete.
            if std::fs::read(self.base_store.join(&rel)).is_ok_and(|b| b == bytes) {
                continue;
            }
            violations.push(violation);
        }
        violations
    }
}

impl StateCheck for StoreCheck {
    fn prepare(&mut self, acks: &[String]) -> Result<(), KernelError> {
        let after = |line: &str| acks.iter().position(|a| a == line).map(|i| i + 1);
        self.commit_durable_after = after(ACK_COMMIT_DURABLE);
        self.latest_durable_after = after(ACK_LATEST_DURABLE);
        Ok(())
    }

    fn violations(&self, tree: &Path, acknowledged: usize, context: &str) -> Vec<Violation> {
        self.checked.set(self.checked.get() + 1);
        let candidate = &self.candidate;
        let store = tree.join(STORE_DIR);
        let mut violations = self.torn_files(&store, context);
        let read = |rel: &str| std::fs::read(store.join(rel)).ok();
        let expectations = StoreExpectations {
            recovery: RecoveryFaults::NONE,
            previous: self.previous.as_ref(),
            candidate,
            roots: self.roots.clone(),
        };
        let view = StoreStateView {
            context,
            store_dir: store.is_dir().then_some(store.as_path()),
            candidate_intact: intact_with(candidate, read),
            previous_intact: self.previous.as_ref().is_some_and(|p| intact_with(p, read)),
            candidate_durable: self.commit_durable_after.is_some_and(|k| acknowledged >= k),
            latest_durable: self.latest_durable_after.is_some_and(|k| acknowledged >= k),
        };
        check_store_state(&expectations, &view, &mut violations);
        if let Some(mutant) = self.mutant {
            let expected = violations
                .iter()
                .filter(|v| v.invariant == mutant.expected_invariant)
                .count();
            self.expected_found
                .set(self.expected_found.get() + expected);
        }
        violations
    }

    fn done(&self) -> bool {
        self.mutant.is_some() && self.expected_found.get() >= MUTANT_VIOLATIONS_REPORTED
    }
}
