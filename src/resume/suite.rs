//! The whole test: a reference run, then one interrupted run per kill plan, each killed
//! and restarted (the same command, in the same working directory, as a scheduler would),
//! and the verdict over all of them.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::channel::Record;
use super::error::ResumeError;
use super::plan::{self, KillPlan};
use super::run::{self, RunEnd, RunResult, RunSpec};
use super::verdict::{self, Comparison, ProbeOverhead, Reference, Resumed};

/// The verdict's schema name.
pub const VERDICT_SCHEMA: &str = "shardlift.resume-test.v1";
/// The most kill plans one test may run.
pub const MAX_KILL_PLANS: usize = 1_000;
/// The longest poll interval accepted, in milliseconds.
pub const MAX_POLL_INTERVAL_MS: u64 = 1_000;

/// What to test.
#[derive(Clone, Debug)]
pub struct ResumeTestConfig {
    /// The training command (program and arguments).
    pub command: Vec<OsString>,
    /// A new or empty directory for the runs' working directories, channels and output.
    pub out: PathBuf,
    /// Deterministic kills: one sequence per entry, its first run killed right after
    /// the first step, its restart after the second, and so on.
    pub kill_after_steps: Vec<Vec<u64>>,
    /// Seeded kills at random instants.
    pub random_kills: usize,
    /// The seed of the random instants.
    pub seed: u64,
    /// Restart once more on this many processes (`torchrun --nproc-per-node`).
    pub restart_nproc: Option<u32>,
    /// Digest every K-th step only.
    pub every: u64,
    /// Each run's deadline, in milliseconds.
    pub run_timeout_ms: u64,
    /// How often a run's channel is read, in milliseconds.
    pub poll_interval_ms: u64,
}

/// One run of a sequence, as reported.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RunReport {
    /// How it ended.
    #[serde(flatten)]
    pub end: RunEnd,
    /// Processes the command was started on, when `--restart-nproc` changed it.
    pub nproc: Option<u32>,
    /// Its wall time, in milliseconds.
    pub duration_ms: u64,
    /// Records it reported.
    pub records: usize,
    /// The first and last step it reported.
    pub first_step: Option<u64>,
    /// The last step it reported.
    pub last_step: Option<u64>,
    /// The last step it acknowledged with `saved`.
    pub last_saved: Option<u64>,
    /// The step whose save was in progress when it ended.
    pub inside_save: Option<u64>,
    /// Bytes of a torn last record (after a kill).
    pub torn_tail_bytes: usize,
    /// Its step records against the reference.
    pub comparison: Comparison,
    /// The end of its output, when it failed.
    pub output_tail: Option<String>,
}

/// Where one restart resumed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct RestartReport {
    /// The last step acknowledged with `saved` before the kill (by any earlier run).
    pub acknowledged_before_kill: Option<u64>,
    /// The step whose checkpoint save the kill landed in, if any.
    pub kill_inside_save: Option<u64>,
    /// The step the restart had to report first (after a kill inside the save of step
    /// `s`, `s + 1` is accepted too: that save may have become durable).
    pub expected_first_step: u64,
    /// The step it reported first.
    pub first_step: Option<u64>,
    /// Where it resumed against the expected step.
    pub resumed: Resumed,
}

/// One kill plan's runs and what they show.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SequenceReport {
    /// Its name (also its directory under the output directory).
    pub name: String,
    /// The kills in order: the first run's, then each restart's (the last restart runs
    /// to its end).
    pub kills: Vec<KillPlan>,
    /// Whether a kill happened (a late instant may find the run finished).
    pub interrupted: bool,
    /// The step whose checkpoint save a kill landed in, if any (the first such).
    pub kill_inside_save: Option<u64>,
    /// One per restart.
    pub restarts: Vec<RestartReport>,
    /// The first run, then each restart.
    pub runs: Vec<RunReport>,
    /// Everything wrong, in words (empty when it passed).
    pub problems: Vec<String>,
    /// Whether every restart resumed at its acknowledged step and every step matched.
    pub passed: bool,
}

/// The reference run, as reported.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReferenceReport {
    /// Distinct steps reported.
    pub steps: usize,
    /// The first step reported.
    pub first_step: u64,
    /// The last step reported.
    pub last_step: u64,
    /// Steps acknowledged with `saved`.
    pub saved_steps: Vec<u64>,
    /// Its wall time, in milliseconds.
    pub duration_ms: u64,
    /// The probe's own cost.
    pub probe_overhead: ProbeOverhead,
}

/// The verdict (JSON on stdout).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verdict {
    /// [`VERDICT_SCHEMA`].
    pub schema: &'static str,
    /// Whether every sequence passed.
    pub passed: bool,
    /// The command tested.
    pub command: Vec<String>,
    /// Steps digested: every K-th.
    pub every: u64,
    /// The seed of the random instants.
    pub seed: u64,
    /// The reference run.
    pub reference: ReferenceReport,
    /// One per kill plan.
    pub sequences: Vec<SequenceReport>,
    /// Sequences whose kill happened.
    pub interrupted: usize,
    /// Names of the sequences whose kill landed inside a checkpoint save.
    pub kills_inside_save: Vec<String>,
    /// Names of the sequences that failed.
    pub failed: Vec<String>,
}

fn check_config(config: &ResumeTestConfig) -> Result<(), ResumeError> {
    let usage = |reason: &str| {
        Err(ResumeError::Usage {
            reason: reason.to_owned(),
        })
    };
    if config.command.is_empty() {
        return usage("no command after --");
    }
    if config.every == 0 {
        return usage("--every must be at least 1");
    }
    if config.run_timeout_ms == 0 {
        return usage("--run-timeout-ms must be positive");
    }
    if !(1..=MAX_POLL_INTERVAL_MS).contains(&config.poll_interval_ms) {
        return usage("--poll-interval-ms must be within 1..=1000");
    }
    let chained: usize = config.kill_after_steps.iter().map(Vec::len).sum();
    if chained + config.random_kills > MAX_KILL_PLANS {
        return usage("more than 1000 kills");
    }
    if config.kill_after_steps.iter().any(Vec::is_empty) {
        return usage("--kill-after-step needs at least one step");
    }
    if config.restart_nproc == Some(0) {
        return usage("--restart-nproc must be at least 1");
    }
    Ok(())
}

fn prepare_out(out: &Path) -> Result<(), ResumeError> {
    std::fs::create_dir_all(out).map_err(ResumeError::io("create", out))?;
    let mut entries = std::fs::read_dir(out).map_err(ResumeError::io("list", out))?;
    if entries.next().is_some() {
        return Err(ResumeError::OutputNotEmpty {
            path: out.to_path_buf(),
        });
    }
    Ok(())
}

/// The program made absolute when it is a relative path (runs start in other directories).
fn resolve_program(command: &[OsString]) -> Result<Vec<OsString>, ResumeError> {
    let mut argv = command.to_vec();
    let program = PathBuf::from(&argv[0]);
    if program.is_relative() && program.components().count() > 1 {
        let cwd = std::env::current_dir().map_err(ResumeError::io("read", Path::new(".")))?;
        argv[0] = cwd.join(program).into_os_string();
    }
    Ok(argv)
}

/// `argv` with its `--nproc-per-node` (or `--nproc_per_node`) value replaced by `nproc`.
pub fn with_nproc(argv: &[OsString], nproc: u32) -> Result<Vec<OsString>, ResumeError> {
    let mut out = argv.to_vec();
    let names = ["--nproc-per-node", "--nproc_per_node"];
    for index in 0..out.len() {
        let text = out[index].to_string_lossy().into_owned();
        if let Some(name) = names.iter().find(|n| text.starts_with(&format!("{n}="))) {
            out[index] = format!("{name}={nproc}").into();
            return Ok(out);
        }
        if names.contains(&text.as_str()) && index + 1 < out.len() {
            out[index + 1] = nproc.to_string().into();
            return Ok(out);
        }
    }
    Err(ResumeError::Usage {
        reason: "--restart-nproc needs a torchrun command with --nproc-per-node".to_owned(),
    })
}

struct Context<'a> {
    config: &'a ResumeTestConfig,
    argv: Vec<OsString>,
    reference: Reference,
    progress: &'a mut dyn FnMut(String),
}

/// The spec of run `index` of the sequence in `dir`.
fn run_spec(
    config: &ResumeTestConfig,
    argv: &[OsString],
    dir: &Path,
    index: usize,
    kill: Option<KillPlan>,
) -> RunSpec {
    RunSpec {
        argv: argv.to_vec(),
        cwd: dir.join("work"),
        channel: dir.join(format!("channel-{index}.jsonl")),
        output: dir.join(format!("output-{index}.log")),
        kill,
        every: config.every,
        timeout_ms: config.run_timeout_ms,
        poll_interval_ms: config.poll_interval_ms,
    }
}

impl Context<'_> {
    fn spec(&self, dir: &Path, index: usize, kill: Option<KillPlan>) -> RunSpec {
        run_spec(self.config, &self.argv, dir, index, kill)
    }

    fn report(&self, result: &RunResult, nproc: Option<u32>, planned_kill: bool) -> RunReport {
        let failed = match result.end {
            RunEnd::Exited { outcome } => !outcome.success(),
            RunEnd::Killed { .. } => !planned_kill,
            RunEnd::Deadline { .. } => true,
        };
        RunReport {
            end: result.end.clone(),
            nproc,
            duration_ms: result.duration_ms,
            records: result.records.len(),
            first_step: verdict::first_step(&result.records),
            last_step: verdict::last_step(&result.records),
            last_saved: result.last_saved(),
            inside_save: result.inside_save(),
            torn_tail_bytes: result.torn_tail_bytes,
            comparison: verdict::compare(&self.reference, &result.records),
            output_tail: failed.then(|| result.output_tail.clone()),
        }
    }
}

/// Runs the reference to completion; its records, wall time and saved steps.
fn run_reference(
    config: &ResumeTestConfig,
    argv: &[OsString],
    progress: &mut dyn FnMut(String),
) -> Result<(Vec<Record>, u64), ResumeError> {
    let spec = run_spec(config, argv, &config.out.join("reference"), 0, None);
    std::fs::create_dir_all(&spec.cwd).map_err(ResumeError::io("create", &spec.cwd))?;
    progress("reference run: started".to_owned());
    let result = run::supervise(&spec)?;
    match result.end {
        RunEnd::Exited { outcome } if outcome.success() => {}
        RunEnd::Exited { outcome } => {
            return Err(ResumeError::ReferenceFailed {
                outcome,
                output_tail: result.output_tail,
            })
        }
        RunEnd::Deadline { timeout_ms }
        | RunEnd::Killed {
            at_ms: timeout_ms, ..
        } => return Err(ResumeError::ReferenceDeadline { timeout_ms }),
    }
    Ok((result.records, result.duration_ms))
}

/// What is wrong with one run that should match the reference.
fn run_problems(label: &str, report: &RunReport, problems: &mut Vec<String>) {
    if let Some(divergence) = &report.comparison.first_divergence {
        let mut what = divergence.components.clone();
        what.extend(
            divergence
                .unmatched_components
                .iter()
                .map(|c| format!("{c} (unmatched)")),
        );
        if divergence.missing_in_reference {
            what.push("no reference record".to_owned());
        }
        problems.push(format!(
            "{label} diverged at step {} (rank {}): {}",
            divergence.step,
            divergence.rank,
            what.join(", ")
        ));
    }
}

/// A run's name in problems: the first run, then its restarts.
fn run_label(index: usize) -> String {
    match index {
        0 => "the first run".to_owned(),
        n => format!("restart {n}"),
    }
}

fn run_sequence(
    context: &mut Context<'_>,
    name: String,
    kills: Vec<KillPlan>,
    nproc: Option<u32>,
) -> Result<SequenceReport, ResumeError> {
    let dir = context.config.out.join(&name);
    let work = dir.join("work");
    std::fs::create_dir_all(&work).map_err(ResumeError::io("create", &work))?;
    let mut sequence = SequenceReport {
        name: name.clone(),
        kills: kills.clone(),
        interrupted: false,
        kill_inside_save: None,
        restarts: Vec::new(),
        runs: Vec::new(),
        problems: Vec::new(),
        passed: false,
    };
    let mut acknowledged: Option<u64> = None;
    let mut previous_inside_save: Option<Option<u64>> = None;
    for index in 0..=kills.len() {
        let kill = kills.get(index).cloned();
        let planned = kill.is_some();
        let nproc = nproc.filter(|_| index > 0);
        let mut spec = context.spec(&dir, index, kill);
        if let Some(n) = nproc {
            spec.argv = with_nproc(&spec.argv, n)?;
        }
        let result = run::supervise(&spec)?;
        let report = context.report(&result, nproc, planned);
        let label = run_label(index);
        let nothing_left = match previous_inside_save {
            Some(inside_save) => judge_restart(
                context,
                &label,
                acknowledged,
                inside_save,
                &report,
                &mut sequence,
            ),
            None => false,
        };
        run_problems(&label, &report, &mut sequence.problems);
        acknowledged = acknowledged.max(result.last_saved());
        sequence.runs.push(report);
        if planned && matches!(result.end, RunEnd::Killed { .. }) {
            sequence.interrupted = true;
            sequence.kill_inside_save = sequence.kill_inside_save.or(result.inside_save());
            previous_inside_save = Some(result.inside_save());
            continue;
        }
        judge_end(
            context,
            &label,
            &result,
            nothing_left,
            &mut sequence.problems,
        );
        break;
    }
    sequence.passed = sequence.problems.is_empty();
    (context.progress)(format!(
        "{name}: {}{}",
        if sequence.passed {
            "passed"
        } else {
            "FAILED: "
        },
        sequence.problems.join("; ")
    ));
    Ok(sequence)
}

/// Judges how the last run of a sequence ended.
fn judge_end(
    context: &Context<'_>,
    label: &str,
    result: &RunResult,
    nothing_left: bool,
    problems: &mut Vec<String>,
) {
    match result.end {
        RunEnd::Exited { outcome }
            if nothing_left && verdict::first_step(&result.records).is_none() =>
        {
            if !outcome.success() {
                problems.push(format!("{label} failed ({outcome})"));
            }
        }
        RunEnd::Exited { outcome } => check_complete(context, label, result, outcome, problems),
        RunEnd::Deadline { timeout_ms } => problems.push(format!(
            "{label} did not finish within {timeout_ms} ms; its whole process tree was killed"
        )),
        RunEnd::Killed { .. } => problems.push(format!("{label} was killed")),
    }
}

fn check_complete(
    context: &Context<'_>,
    label: &str,
    result: &RunResult,
    outcome: crate::supervise::process::ExitOutcome,
    problems: &mut Vec<String>,
) {
    if !outcome.success() {
        problems.push(format!("{label} failed ({outcome})"));
    } else if verdict::last_step(&result.records) != Some(context.reference.last_step) {
        problems.push(format!(
            "{label} exited 0 without reaching the reference's last step {}",
            context.reference.last_step
        ));
    }
}

/// Judges where a restart resumed, records it, and says whether the kill before it
/// left nothing to do (killed after its last save).
fn judge_restart(
    context: &Context<'_>,
    label: &str,
    acknowledged: Option<u64>,
    kill_inside_save: Option<u64>,
    report: &RunReport,
    sequence: &mut SequenceReport,
) -> bool {
    let expected = acknowledged.map_or(context.reference.first_step, |step| step + 1);
    let also_exact = kill_inside_save.map(|step| step + 1);
    let last = context.reference.last_step;
    let nothing_left = expected > last || also_exact.is_some_and(|step| step > last);
    let resumed = match verdict::resumed(report.first_step, expected, also_exact) {
        Resumed::NoSteps if nothing_left => Resumed::Exact,
        resumed => resumed,
    };
    if resumed != Resumed::Exact {
        let first = report
            .first_step
            .map_or("no step".to_owned(), |s| format!("step {s}"));
        sequence.problems.push(format!(
            "{label} resumed at {first}, expected step {expected} ({resumed:?})"
        ));
    }
    sequence.restarts.push(RestartReport {
        acknowledged_before_kill: acknowledged,
        kill_inside_save,
        expected_first_step: expected,
        first_step: report.first_step,
        resumed,
    });
    nothing_left
}

/// One sequence to run: its kills in order, and the size of its restarts when
/// `--restart-nproc` changes it.
type SequencePlan = (Vec<KillPlan>, Option<u32>);

/// The kill plans in order: each chain of steps asked for, the seeded instants, then
/// the smaller restart (after the first step asked for, else the middle step).
fn kill_plans(
    config: &ResumeTestConfig,
    reference: &Reference,
    records: &[Record],
    duration_ms: u64,
) -> Result<Vec<SequencePlan>, ResumeError> {
    let mut plans = Vec::new();
    for chain in &config.kill_after_steps {
        if let Some(step) = chain
            .iter()
            .find(|&&step| step < reference.first_step || step >= reference.last_step)
        {
            return Err(ResumeError::Usage {
                reason: format!(
                    "--kill-after-step {step}: the reference reported steps {}..={} (a kill must leave a step to resume)",
                    reference.first_step, reference.last_step
                ),
            });
        }
        let kills = chain
            .iter()
            .map(|&step| KillPlan::AfterStep { step })
            .collect();
        plans.push((kills, None));
    }
    for instant in plan::random_instants(records, duration_ms, config.random_kills, config.seed) {
        plans.push((vec![instant], None));
    }
    if let Some(nproc) = config.restart_nproc {
        let step = config
            .kill_after_steps
            .first()
            .and_then(|chain| chain.first())
            .copied()
            .unwrap_or((reference.first_step + reference.last_step) / 2);
        if step >= reference.last_step {
            return Err(ResumeError::Usage {
                reason: "--restart-nproc needs a reference with at least two steps".to_owned(),
            });
        }
        plans.push((vec![KillPlan::AfterStep { step }], Some(nproc)));
    }
    Ok(plans)
}

/// A sequence's name: its kills (`kill-after-step-4-9`, `random-kill-3`), then the
/// smaller restart's size.
fn sequence_name(kills: &[KillPlan], index: usize, nproc: Option<u32>) -> String {
    let steps: Vec<String> = kills
        .iter()
        .filter_map(KillPlan::hold_after_step)
        .map(|step| step.to_string())
        .collect();
    let base = match kills.first() {
        Some(KillPlan::AfterStep { .. }) => format!("kill-after-step-{}", steps.join("-")),
        Some(plan) => plan.name(index),
        None => format!("run-{index}"),
    };
    match nproc {
        Some(n) => format!("{base}-restart-nproc-{n}"),
        None => base,
    }
}

fn reference_report(
    reference: &Reference,
    records: &[Record],
    duration_ms: u64,
) -> ReferenceReport {
    let mut saved_steps: Vec<u64> = records
        .iter()
        .filter(|r| r.kind == super::channel::RecordKind::Saved)
        .map(|r| r.step)
        .collect();
    saved_steps.dedup();
    ReferenceReport {
        steps: reference.step_count(),
        first_step: reference.first_step,
        last_step: reference.last_step,
        saved_steps,
        duration_ms,
        probe_overhead: verdict::probe_overhead(records),
    }
}

fn verdict_of(
    config: &ResumeTestConfig,
    reference: ReferenceReport,
    sequences: Vec<SequenceReport>,
) -> Verdict {
    let failed: Vec<String> = sequences
        .iter()
        .filter(|s| !s.passed)
        .map(|s| s.name.clone())
        .collect();
    Verdict {
        schema: VERDICT_SCHEMA,
        passed: failed.is_empty(),
        command: config
            .command
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect(),
        every: config.every,
        seed: config.seed,
        reference,
        interrupted: sequences.iter().filter(|s| s.interrupted).count(),
        kills_inside_save: sequences
            .iter()
            .filter(|s| s.kill_inside_save.is_some())
            .map(|s| s.name.clone())
            .collect(),
        failed,
        sequences,
    }
}

/// Runs the whole test. `progress` receives one line per phase (for stderr).
pub fn resume_test(
    config: &ResumeTestConfig,
    progress: &mut dyn FnMut(String),
) -> Result<Verdict, ResumeError> {
    check_config(config)?;
    prepare_out(&config.out)?;
    let argv = resolve_program(&config.command)?;
    let (records, duration_ms) = run_reference(config, &argv, progress)?;
    let reference = Reference::new(&records).ok_or(ResumeError::NoRecords)?;
    let report = reference_report(&reference, &records, duration_ms);
    progress(format!(
        "reference run: steps {}..={} in {} ms, {} saves, probe {:.0} us per digested step",
        report.first_step,
        report.last_step,
        duration_ms,
        report.saved_steps.len(),
        report.probe_overhead.mean_us
    ));
    let plans = kill_plans(config, &reference, &records, duration_ms)?;
    let mut context = Context {
        config,
        argv,
        reference,
        progress,
    };
    let mut sequences = Vec::new();
    for (index, (kills, nproc)) in plans.into_iter().enumerate() {
        let name = sequence_name(&kills, index, nproc);
        (context.progress)(format!("{name}: started"));
        sequences.push(run_sequence(&mut context, name, kills, nproc)?);
    }
    Ok(verdict_of(config, report, sequences))
}
