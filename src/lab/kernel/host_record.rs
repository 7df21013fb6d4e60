//! The writer recorded on the host under ptrace, after the same setup command, in
//! `OUT/model/`: the model's crash states that `--hold-model` holds the kernel's states
//! against, and the operations `--replay` performs in the guest ([`super::replay`]).
//!
//! One recording serves both: with `--replay` the guest runs exactly the recorded
//! operations, so the model's states and the kernel's come from the same bytes.
use std::collections::HashSet;
use std::path::Path;

use crate::core::digest::Digest;
use crate::lab::crash_model::trace::{InitialEntry, Trace};
use crate::lab::crash_model::{self as model, ModelLimits, Unread};
use crate::lab::external::recorder::{self, RecordLimits};
use crate::lab::external::{place_acknowledgements, run_setup_in, AckPattern, CrashTestError};
use crate::lab::kernel::config::KernelConfig;
use crate::lab::kernel::error::KernelError;

/// Runs the setup command and records the writer under ptrace in `OUT/model/`, its
/// acknowledgements (`config.ack`) placed in the trace. The writer must exit 0.
pub fn record(config: &KernelConfig) -> Result<Trace, KernelError> {
    let root = config.out.join("model");
    let (scratch, tmp) = (root.join("scratch"), root.join("tmp"));
    for dir in [&root, &scratch, &tmp] {
        std::fs::create_dir(dir).map_err(KernelError::io("creating model/"))?;
    }
    if let Some(command) = &config.setup {
        let log = root.join("setup.log");
        let sh = Path::new("/bin/sh");
        run_setup_in(sh, command, &scratch, &tmp, &log, config.setup_timeout_ms)?;
    }
    let stdout_log = root.join("writer.stdout");
    let stderr_log = root.join("writer.stderr");
    let run = recorder::record(
        &recorder::WriterSetup {
            stub_exe: &config.agent_exe,
            scratch: &scratch,
            tmpdir: &tmp,
            argv: &config.writer,
            stdout_log: &stdout_log,
            stderr_log: &stderr_log,
        },
        RecordLimits::default(),
    )?;
    if !run.exit.success() {
        return Err(CrashTestError::WriterFailed {
            outcome: run.exit.to_string(),
            log: stderr_log,
        }
        .into());
    }
    let mut trace = run.trace;
    let pattern = config.ack.as_deref().map(AckPattern::new).transpose()?;
    place_acknowledgements(&mut trace, &stdout_log, pattern.as_ref())?;
    Ok(trace)
}

/// The digests of the model's crash states of `trace`.
pub fn model_digests(
    config: &KernelConfig,
    trace: &Trace,
    limits: ModelLimits,
) -> Result<HashSet<Digest>, KernelError> {
    let states = model::crash_states(trace, limits, &Unread::new(&config.unread))
        .map_err(CrashTestError::from)?;
    Ok(states.states.iter().map(|s| s.digest).collect())
}

/// Writes the recorded initial image (what the setup command left, as the writer found
/// it) into `dir`: with `--replay` the kernel's file system is made from it, so the
/// kernel's starting image is byte for byte the model's even when the setup command is
/// not deterministic (DCP writes a random id into its metadata). Hard links of the
/// initial image become separate files; modes are the default ones.
pub fn write_initial_image(trace: &Trace, dir: &Path) -> Result<(), KernelError> {
    let io = || KernelError::io("writing the recorded initial image");
    // Sorted by path, so a directory comes before what it holds.
    for (path, entry) in &trace.initial {
        if path.is_empty() {
            continue;
        }
        let at = dir.join(path);
        match entry {
            InitialEntry::Dir => std::fs::create_dir_all(&at).map_err(io())?,
            InitialEntry::File(inode) => {
                let bytes = trace.initial_contents.get(*inode).ok_or_else(|| {
                    io()(std::io::Error::other(format!(
                        "inode {inode} of {path} has no recorded contents"
                    )))
                })?;
                std::fs::write(&at, bytes).map_err(io())?;
            }
        }
    }
    Ok(())
}
