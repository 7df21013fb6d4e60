//! One supervised run of the command under test: started in its working directory with
//! its own probe channel, watched record by record, and killed with its whole process
//! tree when its kill plan says so or its deadline passes.
use std::ffi::OsString;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::supervise::process::{ChildSpec, ExitOutcome, Role, SupervisedChild};
use crate::supervise::tree::kill_tree;

use super::channel::{ChannelReader, Record, RecordKind};
use super::error::ResumeError;
use super::plan::KillPlan;

/// The variable that names the probe channel.
pub const CHANNEL_VARIABLE: &str = "SHARDLIFT_PROBE";
/// The variable that makes the probe hold after reporting a step.
pub const HOLD_VARIABLE: &str = "SHARDLIFT_PROBE_HOLD_AFTER_STEP";
/// The variable that makes the probe digest only every K-th step.
pub const EVERY_VARIABLE: &str = "SHARDLIFT_PROBE_EVERY";
/// How much of a run's output a report keeps, in bytes.
pub const OUTPUT_TAIL_BYTES: u64 = 4096;
/// How long a deterministic kill waits for the other ranks to report the step, in ms.
pub const RANK_WAIT_MS: u64 = 10_000;
/// How long the killed tree's descendants get to be gone, in ms.
const TREE_EXIT_WAIT_MS: u64 = 10_000;

/// What to run and how.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The command and its arguments (the program resolved as the caller wants it).
    pub argv: Vec<OsString>,
    /// The working directory (exists).
    pub cwd: PathBuf,
    /// The probe channel file (created by the probe).
    pub channel: PathBuf,
    /// The file that receives stdout and stderr.
    pub output: PathBuf,
    /// When to kill the run, if at all.
    pub kill: Option<KillPlan>,
    /// `SHARDLIFT_PROBE_EVERY`.
    pub every: u64,
    /// The run's deadline, in milliseconds.
    pub timeout_ms: u64,
    /// How often the channel is read while the run goes on, in milliseconds.
    pub poll_interval_ms: u64,
}

/// How a run ended.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "end")]
pub enum RunEnd {
    /// It exited by itself.
    Exited {
        /// Its exit.
        outcome: ExitOutcome,
    },
    /// Its plan killed it (the whole tree, SIGKILL).
    Killed {
        /// Records it had reported when killed.
        after_records: usize,
        /// Milliseconds after its start.
        at_ms: u64,
        /// Processes of its tree outside its own process group that were killed too.
        descendants_killed: usize,
    },
    /// It passed its deadline; the whole tree was killed.
    Deadline {
        /// The deadline, in milliseconds.
        timeout_ms: u64,
    },
}

/// A finished run.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// How it ended.
    pub end: RunEnd,
    /// Its records, in the order they were read.
    pub records: Vec<Record>,
    /// Its wall time, in milliseconds.
    pub duration_ms: u64,
    /// Bytes of an unterminated last record (a kill during the probe's write).
    pub torn_tail_bytes: usize,
    /// The end of its output.
    pub output_tail: String,
}

impl RunResult {
    /// The step whose checkpoint save was in progress when the run ended: a `saving`
    /// record with no `saved` after it.
    pub fn inside_save(&self) -> Option<u64> {
        let last_save = self
            .records
            .iter()
            .rev()
            .find(|r| matches!(r.kind, RecordKind::Saving | RecordKind::Saved))?;
        (last_save.kind == RecordKind::Saving).then_some(last_save.step)
    }

    /// The last step acknowledged with `saved`.
    pub fn last_saved(&self) -> Option<u64> {
        self.records
            .iter()
            .filter(|r| r.kind == RecordKind::Saved)
            .map(|r| r.step)
            .max()
    }
}

/// Whether `plan` says to kill now, `elapsed_ms` after the start.
fn kill_due(plan: &KillPlan, records: &[Record], elapsed_ms: u64) -> bool {
    match plan {
        KillPlan::AfterStep { step } => {
            let reported: Vec<&Record> = records
                .iter()
                .filter(|r| r.kind == RecordKind::Step && r.step == *step)
                .collect();
            let Some(first) = reported.first() else {
                return false;
            };
            let mut ranks: Vec<u32> = reported.iter().map(|r| r.rank).collect();
            ranks.sort_unstable();
            ranks.dedup();
            ranks.len() >= first.world as usize || elapsed_ms >= first.observed_ms + RANK_WAIT_MS
        }
        KillPlan::Instant {
            after_records,
            delay_ms,
            ..
        } => {
            if records.len() < *after_records {
                return false;
            }
            let anchor_ms = match after_records {
                0 => 0,
                n => records[n - 1].observed_ms,
            };
            elapsed_ms >= anchor_ms + delay_ms
        }
    }
}

/// The last [`OUTPUT_TAIL_BYTES`] of `path`, lossily as text.
pub fn output_tail(path: &Path) -> String {
    let Ok(mut file) = std::fs::File::open(path) else {
        return String::new();
    };
    let length = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(OUTPUT_TAIL_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.take(OUTPUT_TAIL_BYTES).read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

fn spawn(spec: &RunSpec) -> Result<SupervisedChild, ResumeError> {
    let (program, args) = spec.argv.split_first().ok_or_else(|| ResumeError::Usage {
        reason: "no command after --".to_owned(),
    })?;
    let mut child = ChildSpec::new(program, Role::Trainer, "resume-test")
        .current_dir(&spec.cwd)
        .output_to(&spec.output)
        .env(CHANNEL_VARIABLE, spec.channel.as_os_str())
        .env(EVERY_VARIABLE, spec.every.to_string());
    child.args = args.to_vec();
    if let Some(step) = spec.kill.as_ref().and_then(KillPlan::hold_after_step) {
        child = child.env(HOLD_VARIABLE, step.to_string());
    }
    Ok(SupervisedChild::spawn(child)?)
}

/// Runs `spec` to its end: exit, planned kill or deadline.
pub fn supervise(spec: &RunSpec) -> Result<RunResult, ResumeError> {
    let mut child = spawn(spec)?;
    let started = Instant::now();
    let mut reader = ChannelReader::new(&spec.channel);
    let mut records = Vec::new();
    let end = loop {
        let exited = child
            .wait_timeout(spec.poll_interval_ms)?
            .map(|r| r.outcome);
        let elapsed_ms = started.elapsed().as_millis() as u64;
        records.extend(reader.poll(elapsed_ms)?);
        if let Some(outcome) = exited {
            break RunEnd::Exited { outcome };
        }
        if spec
            .kill
            .as_ref()
            .is_some_and(|plan| kill_due(plan, &records, elapsed_ms))
        {
            let killed = kill_tree(&mut child, TREE_EXIT_WAIT_MS)?;
            records.extend(reader.poll(elapsed_ms)?);
            break RunEnd::Killed {
                after_records: records.len(),
                at_ms: elapsed_ms,
                descendants_killed: killed.descendants_killed,
            };
        }
        if elapsed_ms >= spec.timeout_ms {
            kill_tree(&mut child, TREE_EXIT_WAIT_MS)?;
            records.extend(reader.poll(elapsed_ms)?);
            break RunEnd::Deadline {
                timeout_ms: spec.timeout_ms,
            };
        }
    };
    let killed = !matches!(end, RunEnd::Exited { .. });
    let torn_tail_bytes = reader.finish(killed)?;
    Ok(RunResult {
        end,
        records,
        duration_ms: started.elapsed().as_millis() as u64,
        torn_tail_bytes,
        output_tail: output_tail(&spec.output),
    })
}
