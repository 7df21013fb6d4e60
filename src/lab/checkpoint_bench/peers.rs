//! The PyTorch peers: `python/checkpoint_peers.py` in the hash-locked Python torch, one
//! long-lived child driven over its stdin and stdout (one JSON object per line each way),
//! so its saves and loads interleave with the disk's and ShardLift's.
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Duration;

use serde_json::{json, Value};

use super::error::{io, CheckpointBenchError};
use super::report::PeerVersions;

/// The peer script, carried in the binary so the bench runs from any directory.
pub const PEER_SCRIPT: &str = include_str!("../../../python/checkpoint_peers.py");

/// Longest reply line accepted.
const MAX_REPLY_BYTES: u64 = 64 << 10;
/// How often a wait for a reply looks for Ctrl-C.
const INTERRUPT_POLL: Duration = Duration::from_millis(100);

/// The Python interpreter beside `torchrun` (the hash-locked virtual environment's).
pub fn python_beside(torchrun: Option<&Path>) -> Result<PathBuf, CheckpointBenchError> {
    let Some(torchrun) = torchrun else {
        return Err(CheckpointBenchError::PythonTorchMissing {
            reason: "neither --torchrun nor SHARDLIFT_TORCHRUN is set".to_owned(),
        });
    };
    let python = torchrun.with_file_name("python");
    if !python.is_file() {
        return Err(CheckpointBenchError::PythonTorchMissing {
            reason: format!("{} does not exist", python.display()),
        });
    }
    Ok(python)
}

/// A running peer. Dropping it kills and reaps the child.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    replies: Receiver<std::io::Result<String>>,
    timeout: Duration,
    python: PathBuf,
}

impl Peer {
    /// Writes the script into `work` and starts it with `python`; every reply must come
    /// within `timeout_ms`.
    pub fn start(
        python: &Path,
        work: &Path,
        timeout_ms: u64,
    ) -> Result<Peer, CheckpointBenchError> {
        let script = work.join("checkpoint_peers.py");
        std::fs::write(&script, PEER_SCRIPT).map_err(io("writing the peer script"))?;
        let mut child = Command::new(python)
            .arg("-u")
            .arg(&script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(io(format!("starting {}", python.display())))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let (send, replies) = std::sync::mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                loop {
                    let mut line = String::new();
                    let read =
                        std::io::Read::take(&mut reader, MAX_REPLY_BYTES).read_line(&mut line);
                    let end = matches!(read, Ok(0) | Err(_));
                    if send.send(read.map(|_| line)).is_err() || end {
                        return;
                    }
                }
            });
        }
        Ok(Peer {
            child,
            stdin,
            replies,
            timeout: Duration::from_millis(timeout_ms),
            python: python.to_owned(),
        })
    }

    /// Sends `request` and returns its reply's fields; a failed, late or malformed reply
    /// is a [`CheckpointBenchError::Peer`].
    pub fn request(&mut self, request: Value) -> Result<Value, CheckpointBenchError> {
        let op = request["op"].as_str().unwrap_or("?").to_owned();
        let fail = |message: String| CheckpointBenchError::Peer {
            op: op.clone(),
            message,
        };
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| fail("stdin closed".into()))?;
        writeln!(stdin, "{request}")
            .and_then(|()| stdin.flush())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::BrokenPipe => fail("exited before reading the request".into()),
                _ => fail(format!("writing the request: {e}")),
            })?;
        let line = match self.wait_for_reply()? {
            Ok(Ok(line)) if line.is_empty() => return Err(fail("exited without a reply".into())),
            Ok(Ok(line)) => line,
            Ok(Err(e)) => return Err(fail(format!("reading the reply: {e}"))),
            Err(RecvTimeoutError::Timeout) => {
                return Err(fail(format!(
                    "no reply within {} ms",
                    self.timeout.as_millis()
                )))
            }
            Err(RecvTimeoutError::Disconnected) => return Err(fail("exited".into())),
        };
        let reply: Value = serde_json::from_str(line.trim_end())
            .map_err(|e| fail(format!("undecodable reply ({e}): {}", line.trim_end())))?;
        if reply["ok"] != Value::Bool(true) {
            let message = reply["error"]
                .as_str()
                .unwrap_or("failed without a message");
            return Err(fail(message.to_owned()));
        }
        Ok(reply)
    }

    /// Waits for the next reply line until the timeout, in short slices so that Ctrl-C
    /// (SIGTERM) stops the bench mid-request; the peer is then killed as it is dropped.
    fn wait_for_reply(
        &self,
    ) -> Result<Result<std::io::Result<String>, RecvTimeoutError>, CheckpointBenchError> {
        let deadline = std::time::Instant::now() + self.timeout;
        loop {
            super::error::stop_if_interrupted()?;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.replies.recv_timeout(left.min(INTERRUPT_POLL)) {
                Err(RecvTimeoutError::Timeout) if !left.is_zero() => continue,
                other => return Ok(other),
            }
        }
    }

    /// The versions the peer runs with.
    pub fn versions(&mut self) -> Result<PeerVersions, CheckpointBenchError> {
        let reply = self.request(json!({"op": "hello"}))?;
        let text = |key: &str| reply[key].as_str().unwrap_or("unknown").to_owned();
        Ok(PeerVersions {
            python_environment: self
                .python
                .parent()
                .and_then(Path::parent)
                .and_then(Path::file_name)
                .map_or("unknown".to_owned(), |n| n.to_string_lossy().into_owned()),
            torch: text("torch"),
            safetensors: text("safetensors"),
        })
    }

    /// Has the peer read the state (layout JSON and raw bytes), untimed.
    pub fn load_state(&mut self, layout: &Path, data: &Path) -> Result<(), CheckpointBenchError> {
        self.request(json!({"op": "state", "layout": layout, "data": data}))
            .map(|_| ())
    }

    /// Times one save (`format`: dcp, torch, safetensors) into `path`: seconds and bytes
    /// written.
    pub fn save(&mut self, format: &str, path: &Path) -> Result<(f64, u64), CheckpointBenchError> {
        let reply = self.request(json!({"op": "save", "format": format, "path": path}))?;
        Ok((
            seconds(&reply, "save")?,
            reply["bytes_written"].as_u64().unwrap_or(0),
        ))
    }

    /// Times one load of `path` (cold: the caller evicted it first).
    pub fn load(&mut self, format: &str, path: &Path) -> Result<f64, CheckpointBenchError> {
        let reply = self.request(json!({"op": "load", "format": format, "path": path}))?;
        seconds(&reply, "load")
    }

    /// Times a DCP user's reshard: load `from`, save into `to` for `ranks` ranks.
    pub fn reshard(
        &mut self,
        from: &Path,
        to: &Path,
        ranks: u32,
    ) -> Result<(f64, u64), CheckpointBenchError> {
        let reply =
            self.request(json!({"op": "reshard", "from": from, "to": to, "ranks": ranks}))?;
        Ok((
            seconds(&reply, "reshard")?,
            reply["bytes_written"].as_u64().unwrap_or(0),
        ))
    }
}

fn seconds(reply: &Value, op: &str) -> Result<f64, CheckpointBenchError> {
    reply["seconds"]
        .as_f64()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| CheckpointBenchError::Peer {
            op: op.to_owned(),
            message: format!("a reply without seconds: {reply}"),
        })
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = writeln!(stdin, "{}", json!({"op": "exit"}));
        }
        // The child is ours; it exits on "exit", and is killed if it has not.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
