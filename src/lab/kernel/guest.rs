//! One QEMU guest: the pinned kernel booted through its PVH entry with the initramfs, the
//! disk under test attached through `blklogwrites` (every write and flush logged in the
//! dm-log-writes format) or plain disks found by serial number, the console in a file. QEMU runs in its own process group with
//! a deadline; past it the group is killed and reaped and the run is an error.
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::lab::kernel::agent::REPORT_PREFIX;
use crate::lab::kernel::error::KernelError;
use crate::supervise::process::{ChildSpec, Role, Signal, SupervisedChild};

/// The QEMU accelerator a run used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Accelerator {
    /// Software emulation (`-accel tcg -cpu max`).
    Tcg,
    /// Hardware virtualisation (`-accel kvm -cpu host`).
    Kvm,
}

/// The disks of a guest.
pub enum Disks<'a> {
    /// The disk under test (`/dev/vda`), every write and flush logged to `log` (created
    /// empty here).
    Logged {
        /// The disk image (written by the guest).
        disk: &'a Path,
        /// The block log.
        log: &'a Path,
    },
    /// Plain disks, in order, each with the serial number the guest finds it by
    /// (`/sys/block/vdX/serial`).
    Plain(&'a [(PathBuf, String)]),
}

/// What one guest run is given.
pub struct GuestRun<'a> {
    /// The uncompressed kernel.
    pub vmlinux: &'a Path,
    /// The initramfs archive.
    pub initramfs: &'a Path,
    /// The disks.
    pub disks: Disks<'a>,
    /// The console log.
    pub console: &'a Path,
    /// The accelerator.
    pub accelerator: Accelerator,
    /// Deadline, in milliseconds.
    pub timeout_ms: u64,
    /// Guest memory, in MiB.
    pub memory_mib: u64,
}

/// Guest memory for an initramfs of `bytes`: the kernel holds the archive and its
/// unpacked files at once, plus room for the writer.
pub fn memory_for(bytes: u64) -> u64 {
    512 + (bytes >> 20) * 5 / 2
}

/// What the agent reported.
#[derive(Clone, Debug, Default)]
pub struct GuestReport {
    /// The writer's exit (`0`, a code, or `signal`).
    pub exit: Option<String>,
    /// Acknowledgement lines, in order.
    pub acks: Vec<String>,
    /// Paths the writer changed outside the file system under test.
    pub escaped: Vec<String>,
    /// An error the agent met.
    pub error: Option<String>,
    /// How long the guest ran, in milliseconds.
    pub wall_ms: u64,
}

/// The kernel module of a nested PVM's KVM, under which stock kernels do not boot: some
/// refuse `-cpu host` at once ("failed to set MSR"), others accept it and the guest then
/// never powers off.
const NESTED_PVM_MODULE: &str = "/sys/module/kvm_pvm";

/// Whether KVM boots a stock kernel here: `/dev/kvm` opens, it is not a nested PVM's, and
/// QEMU starts a guest with `-cpu host`.
pub fn probe_accelerator(qemu: &Path, log: &Path) -> Accelerator {
    if Path::new(NESTED_PVM_MODULE).exists() {
        return Accelerator::Tcg;
    }
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return Accelerator::Tcg;
    }
    let spec = ChildSpec::new(qemu, Role::Guest, "crash-test")
        .arg("-accel")
        .arg("kvm")
        .arg("-cpu")
        .arg("host")
        .args([
            "-machine",
            "pc",
            "-m",
            "64",
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-S",
        ])
        .args(["-monitor", "none"])
        .output_to(log);
    let Ok(mut child) = SupervisedChild::spawn(spec) else {
        return Accelerator::Tcg;
    };
    // Refused at once, or paused (-S) at the first instruction: the CPU was accepted.
    let verdict = match child.wait_timeout(3_000) {
        Ok(Some(_)) => Accelerator::Tcg,
        _ => Accelerator::Kvm,
    };
    let _ = child.signal_group(Signal::KILL);
    let _ = child.kill_and_reap();
    verdict
}

/// A guest that powered off before its deadline.
pub struct Finished {
    /// How QEMU ended.
    pub outcome: String,
    /// The console's text.
    pub console: String,
    /// How long the guest ran, in milliseconds.
    pub wall_ms: u64,
}

/// Most disks of one guest (each virtio-blk-pci device takes a PCI slot of the 32).
pub const MAX_DISKS: usize = 24;

/// Boots the guest and waits for it to power off; past the deadline QEMU is killed with
/// its process group and the run is an error.
pub fn boot(qemu: &Path, guest: &GuestRun<'_>) -> Result<Finished, KernelError> {
    let (accel, cpu) = match guest.accelerator {
        Accelerator::Tcg => ("tcg", "max"),
        Accelerator::Kvm => ("kvm", "host"),
    };
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let memory = guest.memory_mib.to_string();
    let spec = ChildSpec::new(qemu, Role::Guest, "crash-test")
        .args(["-accel", accel, "-cpu", cpu, "-machine", "pc", "-m"])
        .arg(&memory)
        .args(["-smp", "1"])
        .args([
            "-nodefaults",
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
        ])
        .arg("-serial")
        .arg(format!("file:{}", path(guest.console)))
        .arg("-kernel")
        .arg(guest.vmlinux)
        .arg("-initrd")
        .arg(guest.initramfs)
        .arg("-append")
        // `no_timer_check`: an emulated guest on a loaded host can miss the early
        // IO-APIC timer check, and the kernel then panics before `/init` ("IO-APIC +
        // timer doesn't work!", seen with two recovery guests at once under load).
        .arg(format!(
            "console=ttyS0 quiet panic=-1 no_timer_check rdinit=/init {}",
            crate::lab::kernel::agent::GUEST_TOKEN
        ));
    let spec = with_disks(spec, &guest.disks)?;
    let spec = spec.output_to(guest.console.with_extension("qemu.log"));
    let started = Instant::now();
    let mut child = SupervisedChild::spawn(spec).map_err(|_| KernelError::ToolMissing {
        tool: "qemu-system-x86_64",
        package: "qemu-system-x86",
    })?;
    let outcome = match child.wait_timeout(guest.timeout_ms) {
        Ok(Some(record)) => record.outcome.to_string(),
        Ok(None) | Err(_) => {
            let _ = child.signal_group(Signal::KILL);
            let _ = child.kill_and_reap();
            return Err(KernelError::GuestTimedOut {
                timeout_ms: guest.timeout_ms,
                console: guest.console.to_owned(),
            });
        }
    };
    // Nothing QEMU started may outlive it.
    let _ = child.signal_group(Signal::KILL);
    let console = std::fs::read(guest.console).unwrap_or_default();
    Ok(Finished {
        outcome,
        console: String::from_utf8_lossy(&console).into_owned(),
        wall_ms: started.elapsed().as_millis() as u64,
    })
}

/// `spec` with QEMU's options for `disks`: the logged disk behind `blklogwrites` (its
/// log created empty), or each plain disk with its serial number.
fn with_disks(mut spec: ChildSpec, disks: &Disks<'_>) -> Result<ChildSpec, KernelError> {
    let path = |p: &Path| p.to_string_lossy().into_owned();
    match disks {
        Disks::Logged { disk, log } => {
            std::fs::write(log, b"").map_err(KernelError::io("creating the block log"))?;
            spec = spec
                .arg("-blockdev")
                .arg(format!(
                    "driver=file,node-name=img,filename={},cache.direct=off",
                    path(disk)
                ))
                .arg("-blockdev")
                .arg(format!("driver=file,node-name=log,filename={}", path(log)))
                .arg("-blockdev")
                .arg("driver=blklogwrites,node-name=lw,file=img,log=log,log-sector-size=512")
                .arg("-device")
                .arg("virtio-blk-pci,drive=lw,write-cache=on");
        }
        Disks::Plain(disks) => {
            assert!(
                disks.len() <= MAX_DISKS,
                "at most {MAX_DISKS} disks a guest"
            );
            for (index, (disk, serial)) in disks.iter().enumerate() {
                spec = spec
                    .arg("-blockdev")
                    .arg(format!(
                        "driver=file,node-name=d{index},filename={},cache.direct=off",
                        path(disk)
                    ))
                    .arg("-device")
                    .arg(format!("virtio-blk-pci,drive=d{index},serial={serial}"));
            }
        }
    }
    Ok(spec)
}

/// Boots the writer's guest, waits for it to power off, and reads the agent's report.
pub fn run(qemu: &Path, guest: &GuestRun<'_>) -> Result<GuestReport, KernelError> {
    let finished = boot(qemu, guest)?;
    let mut report = parse_report(&finished.console);
    report.wall_ms = finished.wall_ms;
    if report.exit.is_none() {
        let mut outcome = finished.outcome.clone();
        if let Some(error) = &report.error {
            outcome.push_str(&format!("; the agent said: {error}"));
        }
        if let Some(panic) = kernel_panic(&finished.console) {
            outcome.push_str(&format!("; the guest's kernel said: {panic}"));
        }
        return Err(KernelError::GuestFailed {
            outcome,
            console: guest.console.to_owned(),
        });
    }
    Ok(report)
}

/// The guest kernel's panic line in a console log, if it panicked.
pub fn kernel_panic(console: &str) -> Option<&str> {
    console
        .lines()
        .find_map(|line| line.find("Kernel panic - ").map(|at| line[at..].trim_end()))
}

/// The agent's lines of a console log.
pub fn parse_report(console: &str) -> GuestReport {
    let mut report = GuestReport::default();
    for line in console.lines() {
        let Some(rest) = line.trim_end_matches('\r').strip_prefix(REPORT_PREFIX) else {
            continue;
        };
        let rest = rest.trim_start();
        let (word, value) = rest.split_once(' ').unwrap_or((rest, ""));
        match word {
            "exit" => report.exit = Some(value.to_owned()),
            "ack" => report
                .acks
                .push(value.split_once(' ').map_or("", |(_, l)| l).to_owned()),
            "escaped" => report.escaped.push(value.to_owned()),
            "error" => report.error = Some(value.to_owned()),
            _ => {}
        }
    }
    report
}

/// The QEMU binary, or [`KernelError::ToolMissing`].
pub fn qemu_binary() -> Result<PathBuf, KernelError> {
    find_on_path("qemu-system-x86_64").ok_or(KernelError::ToolMissing {
        tool: "qemu-system-x86_64",
        package: "qemu-system-x86",
    })
}

/// `name` on `PATH` (and the sbin directories, where e2fsprogs lives).
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the agent's own lines count; a writer's echoed output cannot forge one.
    #[test]
    fn the_report_is_read_from_the_agents_lines_only() {
        let console = "[ 1.0] booting\r\n| shardlift-guest: exit 0\r\nshardlift-guest: ack 1 committed 2\nshardlift-guest: exit 0\nshardlift-guest: escaped /etc/x\n";
        let report = parse_report(console);
        assert_eq!(report.exit.as_deref(), Some("0"));
        assert_eq!(report.acks, ["committed 2"]);
        assert_eq!(report.escaped, ["/etc/x"]);
        let forged = parse_report("| shardlift-guest: exit 0\n");
        assert_eq!(forged.exit, None);
    }

    /// A guest whose kernel panicked says so, with the panic's own words.
    #[test]
    fn a_kernel_panic_is_found_in_the_console() {
        let console = "[    0.024000] ..MP-BIOS bug: 8254 timer not connected to IO-APIC\r\n\
                       [    0.052000] Kernel panic - not syncing: IO-APIC + timer doesn't work!\r\n";
        assert_eq!(
            kernel_panic(console),
            Some("Kernel panic - not syncing: IO-APIC + timer doesn't work!")
        );
        assert_eq!(
            kernel_panic("[ 1.0] booting\nshardlift-guest: exit 0\n"),
            None
        );
    }
}
