//! What one kernel crash test is asked to do: the file system, the writer and its check,
//! the bounds; and the phase timings it reports. Shared by the phases ([`super::boot`],
//! [`super::host_record`], [`mod@super::run`]) so none of them depends on another for it.
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Instant;

use serde::Serialize;

use crate::lab::crash_model::ModelLimits;
use crate::lab::external::check::CheckLimits;
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::states::StateLimits;

/// Where the writer's file system comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileSystem {
    /// ShardLift's own persistence model (ptrace recording; `lab::external`).
    Model,
    /// ext4 (data=ordered) on the pinned kernel.
    Ext4,
    /// xfs on the pinned kernel.
    Xfs,
    /// btrfs on the pinned kernel.
    Btrfs,
}

impl std::str::FromStr for FileSystem {
    type Err = KernelError;

    fn from_str(name: &str) -> Result<Self, KernelError> {
        match name {
            "model" => Ok(FileSystem::Model),
            "ext4" => Ok(FileSystem::Ext4),
            "xfs" => Ok(FileSystem::Xfs),
            "btrfs" => Ok(FileSystem::Btrfs),
            _ => Err(KernelError::UnknownFileSystem {
                name: name.to_owned(),
            }),
        }
    }
}

/// Largest initramfs payload, in bytes: a 530 MB one did not reach `/init` in 180 s
/// under software emulation here.
pub const MAX_INITRAMFS_BYTES: u64 = 192 << 20;
/// Largest block log read, in bytes.
pub const MAX_LOG_BYTES: u64 = 512 << 20;

/// Everything one kernel crash test needs.
#[derive(Clone, Debug)]
pub struct KernelConfig {
    /// The `shardlift` binary (it is the guest's agent).
    pub agent_exe: PathBuf,
    /// The kernel install directory (default: the per-user cache).
    pub kernel_dir: Option<PathBuf>,
    /// The file system (ext4, xfs or btrfs).
    pub file_system: FileSystem,
    /// The output directory (new or empty).
    pub out: PathBuf,
    /// The writer's argv; its program (and shared libraries) is copied into the guest.
    pub writer: Vec<OsString>,
    /// The check command (`sh -c`), run on the host in each extracted state.
    pub check: String,
    /// The setup command, run on the host in the directory the file system is made from.
    pub setup: Option<String>,
    /// The acknowledgement pattern.
    pub ack: Option<String>,
    /// Paths the check never reads (the writer's private staging, temp names that hold
    /// a process id): with `hold_model`, left out of the comparison on both sides.
    pub unread: Vec<String>,
    /// Deadline of the guest, in milliseconds.
    pub guest_timeout_ms: u64,
    /// Deadline of the setup command, in milliseconds.
    pub setup_timeout_ms: u64,
    /// Bounds of the state generation.
    pub states: StateLimits,
    /// Most states checked (the first ones in generation order: flush points first).
    pub max_states: usize,
    /// Bounds of each check.
    pub checks: CheckLimits,
    /// Hold every recovered state against the model: the writer is also recorded on the
    /// host (ptrace) and a state whose visible tree is none of the model's crash states
    /// fails. `None`: do not.
    pub hold_model: Option<ModelLimits>,
    /// Record the writer on the host and replay its file operations in the guest
    /// ([`super::replay`]) instead of running it there: for writers the guest cannot boot.
    pub replay: bool,
}

/// Wall-clock time of each phase, in milliseconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseTimings {
    /// The setup command and mkfs.
    pub prepare_ms: u64,
    /// Building the initramfs and probing the accelerator.
    pub initramfs_ms: u64,
    /// The guest, from QEMU's start to its exit.
    pub guest_ms: u64,
    /// Rebuilding, recovering and checking every state.
    pub states_ms: u64,
}

/// Milliseconds since `started`, less the `before_ms` already counted.
pub(crate) fn lap(started: &Instant, before_ms: u64) -> u64 {
    (started.elapsed().as_millis() as u64).saturating_sub(before_ms)
}
