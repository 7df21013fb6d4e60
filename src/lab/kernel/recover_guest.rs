//! Recovering xfs and btrfs crash images as the kernel recovers them: both replay their
//! logs at mount, which no user-space tool of theirs does, so each state image is
//! attached to a recovery guest of the pinned kernel that mounts it read-write (replaying
//! the log), archives the tree with tar onto an output disk and unmounts it cleanly. On
//! the host the file system's own checker must then find nothing (`xfs_repair -f -n`,
//! `btrfs check --readonly`: a crash may leave a log to replay, never damage), and the
//! archive is unpacked into the state's directory.
//!
//! Booting is most of a guest's time, so one guest recovers up to [`STATES_PER_GUEST`]
//! states (and, one per core, up to two guests run at once, each with its own output disk
//! and console log: [`RecoveryGuest::recover_at_once`]), each a disk found by its serial number (`s<index>`), with the output disk
//! (`out`) split into one region of [`MAX_TREE_BYTES`] per state. A mount that hangs
//! holds the guest to its deadline: the guest is killed, the first state it had not
//! finished is a failing state (its recovery did not end), and the rest go to a new guest.
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::lab::kernel::config::FileSystem;
use crate::lab::kernel::error::KernelError;
use crate::lab::kernel::guest::{self, Accelerator, Disks, GuestRun, MAX_DISKS};
use crate::lab::kernel::initramfs;
use crate::lab::kernel::pin::{KernelInstall, KERNEL_RELEASE};

/// States recovered by one guest (one disk each, plus the output disk).
pub const STATES_PER_GUEST: usize = MAX_DISKS - 1;

/// Largest archive of one recovered tree, in bytes (its region of the output disk).
pub const MAX_TREE_BYTES: u64 = 32 << 20;

/// Prefix of the recovery guest's report lines.
const PREFIX: &str = "shardlift-recover:";

/// Deadline of a recovery guest: its boot plus this much per state, in milliseconds.
const PER_STATE_TIMEOUT_MS: u64 = 20_000;

/// A recovery guest for one file system, its initramfs built once.
pub struct RecoveryGuest {
    file_system: FileSystem,
    qemu: PathBuf,
    vmlinux: PathBuf,
    initramfs: PathBuf,
    accelerator: Accelerator,
    boot_timeout_ms: u64,
    memory_mib: u64,
    dir: PathBuf,
}

/// How one state's recovery ended: `Ok` with its tree unpacked, or why it failed.
pub type Recovered = Result<(), String>;

impl RecoveryGuest {
    /// Builds the recovery initramfs for `file_system` in `dir` (which exists).
    pub fn prepare(
        file_system: FileSystem,
        install: &KernelInstall,
        (qemu, accelerator): (&Path, Accelerator),
        dir: &Path,
        boot_timeout_ms: u64,
    ) -> Result<Self, KernelError> {
        checker(file_system)?;
        let (mut fs, mut script) = initramfs::base(
            &install.dir.join("root"),
            KERNEL_RELEASE,
            file_system.module(),
        )?;
        script.push_str(&recovery_script(file_system.module()));
        fs.file("/init", 0o755, script.into_bytes());
        let initramfs = dir.join("recover-initramfs.cpio");
        std::fs::write(&initramfs, fs.to_cpio())
            .map_err(KernelError::io("writing the recovery initramfs"))?;
        Ok(RecoveryGuest {
            file_system,
            qemu: qemu.to_owned(),
            vmlinux: install.vmlinux.clone(),
            initramfs,
            accelerator,
            boot_timeout_ms,
            memory_mib: guest::memory_for(fs.payload_bytes()),
            dir: dir.to_owned(),
        })
    }

    /// Recovers each image into its tree (`trees[i]` must not exist), in as many guests
    /// as it takes, one after another. `lane` tells apart the output disk and console log
    /// of guests that run at once (see [`RecoveryGuest::recover_at_once`]). `Err` is a
    /// guest or tool that could not run.
    pub fn recover(
        &self,
        images: &[PathBuf],
        trees: &[PathBuf],
        lane: usize,
    ) -> Result<Vec<Recovered>, KernelError> {
        assert_eq!(images.len(), trees.len(), "one tree per image");
        let mut results: Vec<Option<Recovered>> = vec![None; images.len()];
        let mut pending: Vec<usize> = (0..images.len()).collect();
        while !pending.is_empty() {
            let batch: Vec<usize> = pending.iter().copied().take(STATES_PER_GUEST).collect();
            let BatchReport {
                lines: reports,
                timed_out,
                panic,
            } = self.run_batch(&batch, images, lane)?;
            if let (false, Some(slot)) = (timed_out, reports.iter().position(Option::is_none)) {
                let mut outcome =
                    format!("the recovery guest powered off without reporting state disk s{slot}");
                if let Some(panic) = panic {
                    outcome.push_str(&format!("; its kernel said: {panic}"));
                }
                return Err(KernelError::GuestFailed {
                    outcome,
                    console: self.console(lane),
                });
            }
            let mut stuck = false;
            for (slot, &index) in batch.iter().enumerate() {
                match &reports[slot] {
                    Some(Line::Ok { bytes }) => {
                        results[index] = Some(self.finish(
                            &images[index],
                            &trees[index],
                            (lane, slot),
                            *bytes,
                        )?);
                    }
                    Some(Line::Failed(why)) => results[index] = Some(Err(why.clone())),
                    None if !stuck => {
                        // The guest hung here: this state's recovery never ended.
                        stuck = true;
                        results[index] = Some(Err(format!(
                            "recovery (mount, archive, unmount) did not finish within the \
                             recovery guest's deadline of {} ms",
                            self.timeout_ms(batch.len())
                        )));
                    }
                    None => {}
                }
            }
            pending.retain(|index| results[*index].is_none());
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err("not recovered".to_owned())))
            .collect())
    }

    /// Recovers `batches` (images and their trees) in guests running at the same time,
    /// one thread each; the results in batch order. The first guest or tool that could
    /// not run is the error.
    pub fn recover_at_once(
        &self,
        batches: &[(Vec<PathBuf>, Vec<PathBuf>)],
    ) -> Result<Vec<Vec<Recovered>>, KernelError> {
        std::thread::scope(|scope| {
            let handles: Vec<_> = batches
                .iter()
                .enumerate()
                .map(|(lane, (images, trees))| {
                    scope.spawn(move || self.recover(images, trees, lane))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        })
    }

    /// The output disk of the guest in `lane`.
    fn output(&self, lane: usize) -> PathBuf {
        self.dir.join(format!("recover-out-{lane}.img"))
    }

    /// The console log of the guest in `lane`.
    fn console(&self, lane: usize) -> PathBuf {
        self.dir.join(format!("recover-console-{lane}.log"))
    }

    fn timeout_ms(&self, states: usize) -> u64 {
        self.boot_timeout_ms + PER_STATE_TIMEOUT_MS * states as u64
    }

    /// One guest over `batch`: what it said of each state, whether it ran past its
    /// deadline, and its kernel's panic line.
    fn run_batch(
        &self,
        batch: &[usize],
        images: &[PathBuf],
        lane: usize,
    ) -> Result<BatchReport, KernelError> {
        let output = self.output(lane);
        let file = std::fs::File::create(&output)
            .map_err(KernelError::io("creating the recovery output disk"))?;
        file.set_len(MAX_TREE_BYTES * batch.len() as u64)
            .map_err(KernelError::io("sizing the recovery output disk"))?;
        drop(file);
        let mut disks: Vec<(PathBuf, String)> = batch
            .iter()
            .enumerate()
            .map(|(slot, &index)| (images[index].clone(), format!("s{slot}")))
            .collect();
        disks.push((output, "out".to_owned()));
        let console = self.console(lane);
        let run = GuestRun {
            vmlinux: &self.vmlinux,
            initramfs: &self.initramfs,
            disks: Disks::Plain(&disks),
            console: &console,
            accelerator: self.accelerator,
            timeout_ms: self.timeout_ms(batch.len()),
            memory_mib: self.memory_mib,
        };
        let (text, timed_out) = match guest::boot(&self.qemu, &run) {
            Ok(finished) => (finished.console, false),
            Err(KernelError::GuestTimedOut { .. }) => (
                String::from_utf8_lossy(&std::fs::read(&console).unwrap_or_default()).into_owned(),
                true,
            ),
            Err(other) => return Err(other),
        };
        Ok(BatchReport {
            lines: parse_lines(&text, batch.len()),
            timed_out,
            panic: guest::kernel_panic(&text).map(str::to_owned),
        })
    }

    /// The host's side of a state the guest recovered: the checker on the cleanly
    /// unmounted image, then the archive unpacked.
    fn finish(
        &self,
        image: &Path,
        tree: &Path,
        (lane, slot): (usize, usize),
        bytes: u64,
    ) -> Result<Recovered, KernelError> {
        if let Err(why) = check_clean(self.file_system, image)? {
            return Ok(Err(why));
        }
        let output = self.output(lane);
        let archive = read_region(&output, slot as u64 * MAX_TREE_BYTES, bytes)?;
        std::fs::create_dir(tree).map_err(KernelError::io("creating a state directory"))?;
        let mut child = Command::new("tar")
            .args(["-x", "-f", "-", "--no-same-owner", "-C"])
            .arg(tree)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|_| KernelError::ToolMissing {
                tool: "tar",
                package: "tar",
            })?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&archive)
                .map_err(KernelError::io("unpacking a recovered tree"))?;
        }
        let done = child
            .wait_with_output()
            .map_err(KernelError::io("unpacking a recovered tree"))?;
        if !done.status.success() {
            return Err(KernelError::ToolFailed {
                tool: "tar -x (a recovered tree)".to_owned(),
                outcome: done.status.to_string(),
                output: String::from_utf8_lossy(&done.stderr).into_owned(),
            });
        }
        Ok(Ok(()))
    }
}

/// What one recovery guest said.
struct BatchReport {
    /// Each state's report line, in batch order (`None`: not reported).
    lines: Vec<Option<Line>>,
    /// Whether the guest ran past its deadline.
    timed_out: bool,
    /// Its kernel's panic line, if it panicked.
    panic: Option<String>,
}

/// What the guest said of one state.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Line {
    /// Mounted (log replayed), archived in `bytes`, unmounted cleanly.
    Ok { bytes: u64 },
    /// Why it failed.
    Failed(String),
}

/// The guest's report lines for `states` slots (the first line per slot counts).
fn parse_lines(console: &str, states: usize) -> Vec<Option<Line>> {
    let mut lines = vec![None; states];
    for line in console.lines() {
        let Some(rest) = line.trim_end_matches('\r').strip_prefix(PREFIX) else {
            continue;
        };
        let mut words = rest.trim_start().splitn(3, ' ');
        let (Some(slot), Some(word)) = (words.next(), words.next()) else {
            continue;
        };
        let Some(slot) = slot.parse::<usize>().ok().filter(|s| *s < states) else {
            continue;
        };
        let detail = words.next().unwrap_or("").trim().to_owned();
        let parsed = match word {
            "ok" => match detail.parse::<u64>() {
                Ok(bytes) if bytes <= MAX_TREE_BYTES => Line::Ok { bytes },
                _ => Line::Failed(format!("the recovery guest reported a bad size: {detail}")),
            },
            "mount-failed" => Line::Failed(format!("mounting (log replay) failed: {detail}")),
            "too-large" => Line::Failed(format!(
                "the recovered tree's archive ({detail} bytes) is over {MAX_TREE_BYTES} bytes"
            )),
            other => Line::Failed(format!("{other}: {detail}")),
        };
        if lines[slot].is_none() {
            lines[slot] = Some(parsed);
        }
    }
    lines
}

/// The guest's `/init` after the module loads: the state disks `s0`, `s1`, … mounted in
/// that order, each archived into its region of the output disk and unmounted; one line
/// each.
fn recovery_script(fs_type: &str) -> String {
    let region_blocks = MAX_TREE_BYTES / 4096;
    format!(
        "disk() {{ for b in /sys/block/vd*; do [ \"$(cat $b/serial)\" = \"$1\" ] && echo /dev/${{b##*/}}; done; true; }}\n\
out=$(disk out)\n\
i=0\n\
d=$(disk s0)\n\
while [ -n \"$d\" ]; do\n\
  if ! mount -t {fs_type} $d /mnt 2>/tmp/err; then\n\
    echo \"{PREFIX} $i mount-failed $(tr '\\n' ' ' </tmp/err) $(dmesg | tail -n 4 | tr '\\n' ' ')\"\n\
    i=$((i + 1)); d=$(disk s$i); continue\n\
  fi\n\
  if ! tar -C /mnt -cf /tmp/tree.tar . 2>/tmp/err; then\n\
    echo \"{PREFIX} $i archive-failed $(tr '\\n' ' ' </tmp/err)\"\n\
    umount /mnt; rm -f /tmp/tree.tar; i=$((i + 1)); d=$(disk s$i); continue\n\
  fi\n\
  size=$(wc -c </tmp/tree.tar)\n\
  if [ \"$size\" -gt {MAX_TREE_BYTES} ]; then\n\
    echo \"{PREFIX} $i too-large $size\"; umount /mnt; rm -f /tmp/tree.tar; i=$((i + 1)); d=$(disk s$i); continue\n\
  fi\n\
  if ! dd if=/tmp/tree.tar of=$out bs=4096 seek=$((i * {region_blocks})) conv=notrunc,fsync 2>/tmp/err; then\n\
    echo \"{PREFIX} $i archive-failed $(tr '\\n' ' ' </tmp/err)\"; umount /mnt; rm -f /tmp/tree.tar; i=$((i + 1)); d=$(disk s$i); continue\n\
  fi\n\
  rm -f /tmp/tree.tar\n\
  if umount /mnt 2>/tmp/err; then echo \"{PREFIX} $i ok $size\"; else echo \"{PREFIX} $i unmount-failed $(tr '\\n' ' ' </tmp/err)\"; fi\n\
  i=$((i + 1)); d=$(disk s$i)\n\
done\n\
sync\n\
echo \"{PREFIX} done\"\n\
echo o > /proc/sysrq-trigger\n\
/bin/busybox sleep 60\n"
    )
}

/// The file system's checker on the host, and its Debian package.
fn checker(file_system: FileSystem) -> Result<(PathBuf, &'static [&'static str]), KernelError> {
    let (tool, package, args): (&'static str, &'static str, &'static [&'static str]) =
        match file_system {
            FileSystem::Xfs => ("xfs_repair", "xfsprogs", &["-f", "-n"]),
            FileSystem::Btrfs => ("btrfs", "btrfs-progs", &["check", "--readonly"]),
            FileSystem::Model | FileSystem::Ext4 => {
                return Err(KernelError::UnsupportedFileSystem {
                    name: file_system.module(),
                    reason: "its crash states are recovered on the host, not in a guest",
                })
            }
        };
    let program = guest::find_on_path(tool).ok_or(KernelError::ToolMissing { tool, package })?;
    Ok((program, args))
}

/// The checker on a cleanly unmounted image: `Ok(Err)` when it finds anything.
fn check_clean(file_system: FileSystem, image: &Path) -> Result<Recovered, KernelError> {
    let (program, args) = checker(file_system)?;
    let output = Command::new(&program)
        .args(args)
        .arg(image)
        .output()
        .map_err(KernelError::io(format!("running {}", program.display())))?;
    if output.status.success() {
        return Ok(Ok(()));
    }
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    Ok(Err(format!(
        "{} {} exited {} after the log replay: {}",
        program.display(),
        args.join(" "),
        output.status,
        tail[tail.len().saturating_sub(3)..].join(" | ")
    )))
}

fn read_region(path: &Path, offset: u64, bytes: u64) -> Result<Vec<u8>, KernelError> {
    use std::os::unix::fs::FileExt;
    let file = std::fs::File::open(path).map_err(KernelError::io("reading the output disk"))?;
    let len = usize::try_from(bytes).map_err(|e| KernelError::Io {
        context: "sizing a recovered tree's archive".to_owned(),
        source: std::io::Error::other(e),
    })?;
    let mut buffer = vec![0u8; len];
    file.read_exact_at(&mut buffer, offset)
        .map_err(KernelError::io("reading a recovered tree's archive"))?;
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the guest's own lines count, the first per state, and a size over the cap is
    /// a failure, not a read past the region.
    #[test]
    fn the_recovery_lines_are_read_per_state() {
        let console = "[ 1.2] XFS (vda): Starting recovery\n\
                       shardlift-recover: 0 ok 10240\r\n\
                       shardlift-recover: 1 mount-failed bad superblock\n\
                       shardlift-recover: 0 mount-failed later line ignored\n\
                       shardlift-recover: 2 ok 999999999999\n\
                       shardlift-recover: 9 ok 1\n\
                       | shardlift-recover: 3 ok 1\n";
        let lines = parse_lines(console, 4);
        assert_eq!(lines[0], Some(Line::Ok { bytes: 10240 }));
        assert!(matches!(&lines[1], Some(Line::Failed(why)) if why.contains("bad superblock")));
        assert!(matches!(&lines[2], Some(Line::Failed(why)) if why.contains("bad size")));
        assert_eq!(lines[3], None);
    }
}
