//! The agent inside the guest (`shardlift kernel-guest`, started by `/init` once the file
//! system under test is mounted at `/mnt`): runs the writer there, and after each stdout
//! line matching the acknowledgement pattern, and after the writer's exit, writes one
//! marker block with O_DIRECT to the raw disk past the end of the file system, with no
//! flush. In the block log a marker then comes after the flushes that made the
//! acknowledged step durable, so a crash state that follows marker N must show step N.
//! It reports on the console (lines starting `shardlift-guest:`), checks that the writer
//! changed nothing in the guest's root outside `/mnt` and `/tmp`, and powers the guest
//! off at once (sysrq `o`: no sync, no unmount).
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

/// Prefix of every line the agent prints on the console.
pub const REPORT_PREFIX: &str = "shardlift-guest:";

/// Bytes per marker block (O_DIRECT needs aligned, whole blocks).
pub const MARKER_BYTES: usize = 4096;

/// Most markers written (acknowledgements beyond it are reported, not marked).
pub const MAX_MARKERS: u64 = 256;

/// What the agent is told (`/agent.json` in the initramfs).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// The writer's argv.
    pub argv: Vec<String>,
    /// The acknowledgement pattern, if any.
    pub ack: Option<String>,
    /// The raw disk.
    pub device: String,
    /// The first byte of the marker area.
    pub marker_offset: u64,
}

/// The kernel command-line word that marks a crash-test guest. The agent powers its
/// machine off, so it refuses to run anywhere without it (on a host, say).
pub const GUEST_TOKEN: &str = "shardlift.guest=1";

/// Runs the agent; never returns (the guest powers off). Outside a crash-test guest it
/// does nothing and exits 2.
pub fn run(config_path: &Path) -> ! {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    if !is_guest(&cmdline) {
        eprintln!(
            "shardlift kernel-guest runs only inside a crash-test guest (the kernel command \
             line lacks {GUEST_TOKEN}); nothing was done"
        );
        std::process::exit(2);
    }
    let mut console = std::io::stdout();
    let result = run_writer(config_path, &mut console);
    match result {
        Ok(()) => {}
        Err(message) => {
            let _ = writeln!(console, "{REPORT_PREFIX} error {message}");
        }
    }
    let _ = writeln!(console, "{REPORT_PREFIX} done");
    let _ = console.flush();
    let _ = std::fs::write("/proc/sysrq-trigger", b"o");
    // Power-off is asynchronous: wait for it rather than exit (init must not die).
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Whether a kernel command line is a crash-test guest's.
pub fn is_guest(cmdline: &str) -> bool {
    cmdline.split_whitespace().any(|word| word == GUEST_TOKEN)
}

fn run_writer(config_path: &Path, console: &mut impl Write) -> Result<(), String> {
    let text = std::fs::read(config_path).map_err(|e| format!("reading the config: {e}"))?;
    let config: AgentConfig =
        serde_json::from_slice(&text).map_err(|e| format!("decoding the config: {e}"))?;
    let pattern = match &config.ack {
        Some(p) => Some(regex::Regex::new(p).map_err(|e| format!("--ack: {e}"))?),
        None => None,
    };
    let before = root_listing();
    let (program, args) = config.argv.split_first().ok_or("no writer command")?;
    let mut child = Command::new(program)
        .args(args)
        .current_dir("/mnt")
        .env("TMPDIR", "/tmp")
        .env("PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("starting the writer: {e}"))?;
    let stdout = child.stdout.take().ok_or("no writer stdout")?;
    let mut markers = 0u64;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_default();
        // Echoed behind a bar: a writer cannot forge a report line.
        let _ = writeln!(console, "| {line}");
        if pattern.as_ref().is_some_and(|p| p.is_match(&line)) {
            mark(&config, &mut markers)?;
            let _ = writeln!(console, "{REPORT_PREFIX} ack {markers} {line}");
        }
    }
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the writer: {e}"))?;
    mark(&config, &mut markers)?;
    let code = status
        .code()
        .map_or_else(|| "signal".to_owned(), |c| c.to_string());
    let _ = writeln!(console, "{REPORT_PREFIX} exit {code}");
    let after = root_listing();
    for (path, meta) in &after {
        if before.get(path) != Some(meta) {
            let _ = writeln!(console, "{REPORT_PREFIX} escaped {path}");
        }
    }
    Ok(())
}

/// Writes marker `markers + 1` and counts it.
fn mark(config: &AgentConfig, markers: &mut u64) -> Result<(), String> {
    *markers += 1;
    if *markers > MAX_MARKERS {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(nix::libc::O_DIRECT)
        .open(&config.device)
        .map_err(|e| format!("opening {} for a marker: {e}", config.device))?;
    // An aligned block inside a larger buffer: O_DIRECT needs the address aligned too.
    let mut buffer = vec![0u8; 2 * MARKER_BYTES];
    let skip = (MARKER_BYTES - buffer.as_ptr() as usize % MARKER_BYTES) % MARKER_BYTES;
    let block = &mut buffer[skip..skip + MARKER_BYTES];
    block[..16].copy_from_slice(b"shardlift-marker");
    block[16..24].copy_from_slice(&markers.to_le_bytes());
    let offset = config.marker_offset + (*markers - 1) * MARKER_BYTES as u64;
    use std::os::unix::fs::FileExt;
    file.write_all_at(block, offset)
        .map_err(|e| format!("writing marker {markers}: {e}"))?;
    let _ = file.flush();
    Ok(())
}

/// Every path in the guest's root outside `/mnt`, `/tmp`, `/proc`, `/sys` and `/dev`,
/// with its size and modification time.
fn root_listing() -> BTreeMap<String, (u64, i64, i64)> {
    let skip = ["/mnt", "/tmp", "/proc", "/sys", "/dev"];
    walkdir::WalkDir::new("/")
        .same_file_system(true)
        .into_iter()
        .filter_entry(|e| !skip.iter().any(|s| e.path() == Path::new(s)))
        .filter_map(Result::ok)
        .filter_map(|e| {
            let meta = e.metadata().ok()?;
            let key = e.path().to_string_lossy().into_owned();
            Some((key, (meta.len(), meta.mtime(), meta.mtime_nsec())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent powers its machine off: only a guest's exact command-line word lets it.
    #[test]
    fn only_a_guest_command_line_lets_the_agent_run() {
        assert!(is_guest(
            "console=ttyS0 quiet rdinit=/init shardlift.guest=1"
        ));
        let host = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
        assert!(
            !is_guest(&host),
            "this host must not look like a guest: {host}"
        );
        assert!(!is_guest(
            "BOOT_IMAGE=/vmlinuz shardlift.guest=10 xshardlift.guest=1"
        ));
    }
}
