//! The guest run of one kernel crash test: the starting image made from the setup
//! command's result (or, with `--replay`, from the recorded starting image), the
//! initramfs holding the agent and the writer (or the agent replaying a recording), and
//! QEMU with the disk behind `blklogwrites`.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::lab::crash_model::trace::Trace;
use crate::lab::external::run_setup_in;
use crate::lab::kernel::agent::{self, AgentConfig, MAX_MARKERS};
use crate::lab::kernel::config::{
    lap, FileSystem, KernelConfig, PhaseTimings, MAX_INITRAMFS_BYTES,
};
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::guest::{self, Accelerator, Disks, GuestRun};
use crate::lab::kernel::host_record;
use crate::lab::kernel::initramfs;
use crate::lab::kernel::mkfs::{self, MARKER_AREA_BYTES};
use crate::lab::kernel::pin::{KernelInstall, KERNEL_RELEASE};
use crate::lab::kernel::replay;
use crate::lab::kernel::states;

/// What the guest runs as the writer: its program (copied in with its libraries), argv,
/// acknowledgement pattern, and a replay script when it replays a host recording.
pub(crate) struct GuestWriter<'a> {
    /// The recording replayed, when it is one.
    replayed: Option<&'a Trace>,
    program: PathBuf,
    argv: Vec<String>,
    ack: Option<String>,
    script: Option<Vec<u8>>,
}

/// Where the replay script lies in the guest.
const REPLAY_SCRIPT_PATH: &str = "/replay.script";

impl<'a> GuestWriter<'a> {
    /// The writer itself, or with `host_trace` the agent replaying it.
    pub(crate) fn new(
        config: &KernelConfig,
        host_trace: Option<&'a Trace>,
    ) -> Result<Self, KernelError> {
        let Some(trace) = host_trace else {
            return Ok(GuestWriter {
                replayed: None,
                program: resolve_program(&config.writer[0])?,
                argv: config
                    .writer
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect(),
                ack: config.ack.clone(),
                script: None,
            });
        };
        let program = config
            .agent_exe
            .canonicalize()
            .map_err(KernelError::io("locating shardlift"))?;
        Ok(GuestWriter {
            replayed: Some(trace),
            argv: vec![
                program.to_string_lossy().into_owned(),
                "kernel-replay".to_owned(),
                "--script".to_owned(),
                REPLAY_SCRIPT_PATH.to_owned(),
            ],
            program,
            ack: Some(replay::REPLAY_ACK_PATTERN.to_owned()),
            script: Some(replay::encode(trace)?),
        })
    }
}

/// What the guest run left: the accelerator, the marked lines, the phase timings so far.
pub(crate) struct Booted {
    pub(crate) accelerator: Accelerator,
    pub(crate) acks: Vec<String>,
    pub(crate) timings: PhaseTimings,
}

/// Makes the file system, builds the initramfs, boots the guest and runs the writer.
pub(crate) fn boot(
    config: &KernelConfig,
    install: &KernelInstall,
    (qemu, writer): (&Path, &GuestWriter<'_>),
    progress: &mut dyn FnMut(&str),
) -> Result<Booted, KernelError> {
    let started = Instant::now();
    let mut timings = PhaseTimings::default();
    progress(&format!(
        "making {} from the setup command's result",
        config.file_system.module()
    ));
    let disk = config.out.join("disk.img");
    make_file_system(config, writer.replayed, &disk)?;
    states::copy_image(&disk, &config.out.join("base.img"))
        .map_err(KernelError::io("copying the starting image"))?;
    timings.prepare_ms = lap(&started, 0);
    let initramfs = config.out.join("initramfs.cpio");
    let memory_mib = build_initramfs(config, install, writer, &initramfs)?;
    let accelerator = guest::probe_accelerator(qemu, &config.out.join("kvm-probe.log"));
    timings.initramfs_ms = lap(&started, timings.prepare_ms);
    progress(&format!(
        "booting the guest ({accelerator:?}) and running the writer"
    ));
    let console = config.out.join("console.log");
    let report = guest::run(
        qemu,
        &GuestRun {
            vmlinux: &install.vmlinux,
            initramfs: &initramfs,
            disks: Disks::Logged {
                disk: &disk,
                log: &config.out.join("blocks.log"),
            },
            console: &console,
            accelerator,
            timeout_ms: config.guest_timeout_ms,
            memory_mib,
        },
    )?;
    timings.guest_ms = report.wall_ms;
    if !report.escaped.is_empty() {
        return Err(KernelError::Escape {
            paths: report.escaped.join(", "),
        });
    }
    if report.exit.as_deref() != Some("0") {
        return Err(KernelError::WriterFailed {
            outcome: report.exit.unwrap_or_default(),
            console,
        });
    }
    Ok(Booted {
        accelerator,
        acks: report.acks,
        timings,
    })
}

/// The writer's program as a host path (through `PATH` when it has no `/`).
pub(crate) fn resolve_program(program: &OsString) -> Result<PathBuf, KernelError> {
    let path = Path::new(program);
    let found = if path.components().count() > 1 {
        Some(path.to_owned())
    } else {
        guest::find_on_path(&program.to_string_lossy())
    };
    found
        .and_then(|p| p.canonicalize().ok())
        .ok_or_else(|| KernelError::Io {
            context: format!("finding the writer program {}", path.display()),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        })
}

/// Makes the file system from the setup command's result, or with `--replay` from the
/// recorded writer's initial image.
fn make_file_system(
    config: &KernelConfig,
    replayed: Option<&Trace>,
    disk: &Path,
) -> Result<(), KernelError> {
    let setup_dir = config.out.join("setup");
    if let Some(trace) = replayed {
        host_record::write_initial_image(trace, &setup_dir)?;
    } else if let Some(command) = &config.setup {
        run_setup_in(
            Path::new("/bin/sh"),
            command,
            &setup_dir,
            &config.out.join("tmp"),
            &config.out.join("setup.log"),
            config.setup_timeout_ms,
        )?;
    }
    mkfs::make(config.file_system, &setup_dir, disk)
}

fn build_initramfs(
    config: &KernelConfig,
    install: &KernelInstall,
    writer: &GuestWriter<'_>,
    out: &Path,
) -> Result<u64, KernelError> {
    let (mut fs, mut script) = initramfs::base(
        &install.dir.join("root"),
        KERNEL_RELEASE,
        config.file_system.module(),
    )?;
    script.push_str(&init_tail(config.file_system));
    fs.file("/init", 0o755, script.into_bytes());
    fs.program(
        &config
            .agent_exe
            .canonicalize()
            .map_err(KernelError::io("locating shardlift"))?,
    )?;
    fs.program(&writer.program)?;
    if let Some(script) = &writer.script {
        fs.file(REPLAY_SCRIPT_PATH, 0o644, script.clone());
    }
    let agent = AgentConfig {
        argv: writer.argv.clone(),
        ack: writer.ack.clone(),
        device: "/dev/vda".to_owned(),
        marker_offset: config.file_system.file_system_bytes(),
    };
    debug_assert!(MAX_MARKERS * agent::MARKER_BYTES as u64 <= MARKER_AREA_BYTES);
    let json = serde_json::to_vec(&agent).map_err(|e| KernelError::Io {
        context: "encoding the agent's config".to_owned(),
        source: std::io::Error::other(e),
    })?;
    fs.file("/agent.json", 0o644, json);
    let agent_path = config
        .agent_exe
        .canonicalize()
        .map_err(KernelError::io("locating shardlift"))?;
    fs.file(
        "/agent-path",
        0o644,
        agent_path.to_string_lossy().into_owned().into_bytes(),
    );
    if fs.payload_bytes() > MAX_INITRAMFS_BYTES {
        return Err(KernelError::InitramfsTooLarge {
            bytes: fs.payload_bytes(),
            limit_bytes: MAX_INITRAMFS_BYTES,
        });
    }
    std::fs::write(out, fs.to_cpio()).map_err(KernelError::io("writing the initramfs"))?;
    Ok(guest::memory_for(fs.payload_bytes()))
}

/// Seconds the writer's guest holds off a file system's timer-driven commit: longer than
/// any guest's deadline, so within a run only the writer's own syncs commit anything.
const COMMIT_HELD_S: u32 = 3600;

/// How the writer's guest holds off the commits a kernel makes on a timer (ext4's and
/// btrfs's `commit=` interval, 5 and 30 s by default; xfs's periodic log force, 30 s;
/// the flusher's periodic writeback): `/proc/sys` writes to make before the mount, and
/// the mount options. Without this, whether a commit landed between two of the writer's
/// steps depended on how long the emulated guest took to reach them, and the same writer
/// gave different states from run to run. A power cut just before a timer commit leaves
/// what these states hold, so none of them is unreachable with the defaults.
fn timer_commits_held(file_system: FileSystem) -> (Vec<(&'static str, u32)>, String) {
    let mut writes = vec![
        ("/proc/sys/vm/dirty_writeback_centisecs", 0),
        ("/proc/sys/vm/dirty_expire_centisecs", COMMIT_HELD_S * 100),
    ];
    let options = match file_system {
        FileSystem::Model | FileSystem::Ext4 | FileSystem::Btrfs => {
            format!("commit={COMMIT_HELD_S}")
        }
        FileSystem::Xfs => {
            // The sysctl's largest value (two hours); xfs has no mount option for it.
            writes.push(("/proc/sys/fs/xfs/xfssyncd_centisecs", 720_000));
            "defaults".to_owned()
        }
    };
    (writes, options)
}

/// `/init` after them: hold off the timer-driven commits, mount the file system under
/// test and hand over to the agent, which powers the guest off; if a step fails, say so
/// and power off anyway (the host then finds no writer's exit and fails the run).
fn init_tail(file_system: FileSystem) -> String {
    let fs_type = file_system.module();
    let (writes, options) = timer_commits_held(file_system);
    let mut steps: Vec<String> = writes
        .iter()
        .map(|(path, value)| format!("echo {value} > {path}"))
        .collect();
    steps.push(format!(
        "/bin/busybox mount -t {fs_type} -o {options} /dev/vda /mnt"
    ));
    format!(
        "if {}; then\n\
  \"$(/bin/busybox cat /agent-path)\" kernel-guest --config /agent.json\n\
else\n\
  echo 'shardlift-guest: error holding off timer commits or mounting /dev/vda failed'\n\
fi\n\
echo o > /proc/sysrq-trigger\n\
/bin/busybox sleep 60\n",
        steps.join(" && ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file system's `/init` holds off its timer commits and periodic writeback
    /// before the mount, and runs the writer only if all of that and the mount succeeded.
    #[test]
    fn init_holds_off_timer_commits_before_mounting_and_stops_if_it_cannot() {
        for (file_system, held) in [
            (FileSystem::Ext4, "-o commit=3600 /dev/vda"),
            (FileSystem::Btrfs, "-o commit=3600 /dev/vda"),
            (
                FileSystem::Xfs,
                "echo 720000 > /proc/sys/fs/xfs/xfssyncd_centisecs",
            ),
        ] {
            let script = init_tail(file_system);
            let condition = script.lines().next().unwrap_or("");
            assert!(condition.starts_with("if echo 0 > /proc/sys/vm/dirty_writeback_centisecs && "));
            assert!(condition.contains(held), "{file_system:?}: {condition}");
            assert!(
                condition.ends_with(&format!(
                    "mount -t {} -o {} /dev/vda /mnt; then",
                    file_system.module(),
                    timer_commits_held(file_system).1
                )),
                "{file_system:?}: the mount comes last: {condition}"
            );
            let (writer, failed) = script.split_once("else").unwrap_or_default();
            assert!(writer.contains("kernel-guest --config /agent.json"));
            assert!(
                !failed.contains("kernel-guest"),
                "no writer after a failed step"
            );
        }
    }
}
