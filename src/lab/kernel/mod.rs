//! Crash tests on a real kernel (`crash-test --file-system ext4|xfs|btrfs`): the writer
//! runs in a QEMU guest of the pinned Debian kernel on a fresh file system, every write
//! and flush of the guest's disk is logged ([`blklog`]), crash states are rebuilt from the
//! log ([`states`]), each is recovered as the kernel recovers it and extracted (ext4 on the
//! host by e2fsck and debugfs, [`recover`]; xfs and btrfs by mounting them in a recovery
//! guest, [`recover_guest`]), and the same check as the model mode runs on it with
//! `SHARDLIFT_ACKED`.
//!
//! Phases: locate the pinned kernel ([`pin`]) and the host tools → run the setup command
//! on the host into a directory → make the file system from it ([`mkfs`]: the durable
//! starting image) on a disk larger than the file system, whose tail holds the
//! acknowledgement markers → build the initramfs ([`initramfs`]) → boot the guest
//! ([`boot`], [`guest`]; the agent, [`agent`], runs the writer and marks each
//! acknowledgement on the disk) → parse the log → (with `hold_model`: record the same
//! writer on the host and build the model's crash states) → recover each state, hold it
//! against the model, check it → one report. With `replay`, the writer is recorded on the host first
//! ([`host_record`]) and the guest replays its operations ([`replay`]) from the recorded
//! starting image.
//!
//! Output directory: `setup/` (what the setup command left), `disk.img` (after the run),
//! `base.img` (before it), `blocks.log`, `console.log`, `initramfs.cpio`, `states/N/` and
//! `states/N.log` for failing states, `report.json`.
pub mod agent;
pub mod blklog;
pub mod boot;
pub mod config;
pub mod error;
pub mod guest;
pub mod host_record;
pub mod initramfs;
pub mod matrix;
pub mod mkfs;
pub mod pin;
pub mod recover;
pub mod recover_guest;
pub mod replay;
pub mod run;
pub mod state_check;
pub mod states;
pub mod store_writer;

pub use config::{FileSystem, KernelConfig};
pub use error::KernelError;
pub use run::{run, run_with, KernelReport};
pub use state_check::StateCheck;
