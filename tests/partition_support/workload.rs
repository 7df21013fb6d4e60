//! The workload of a partition run: every operation a fresh `shardlift store …` process
//! on the client host, under a deadline (SIGKILL of its process group when it passes),
//! some SIGKILLed on purpose at a random instant; each recorded as an [`Operation`].
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::history::{OpKind, Operation, Outcome};
use super::nemesis::{kill_group, Hosts};

/// Each S3 request attempt of a client, in milliseconds: a cut link fails a request
/// (typed) within seconds, well inside an operation's deadline.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;

/// Runs store commands on the client host and records them.
pub struct Client<'a> {
    hosts: &'a Hosts,
    binary: PathBuf,
    url: String,
    out_dir: PathBuf,
    started: Instant,
    next_id: AtomicUsize,
    /// Every recorded operation.
    pub operations: Mutex<Vec<Operation>>,
}

/// How an operation ends when it is not left to finish.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Killed (and recorded as timed out) this long after its start, in milliseconds.
    pub deadline_ms: u64,
    /// Killed on purpose this long after its start, if it still runs, in milliseconds.
    pub kill_after_ms: Option<u64>,
}

impl<'a> Client<'a> {
    /// A client of store `url` on `hosts`, keeping each command's output under `out_dir`.
    pub fn new(hosts: &'a Hosts, url: String, out_dir: PathBuf, started: Instant) -> Self {
        Client {
            hosts,
            binary: PathBuf::from(env!("CARGO_BIN_EXE_shardlift")),
            url,
            out_dir,
            started,
            next_id: AtomicUsize::new(0),
            operations: Mutex::new(Vec::new()),
        }
    }

    /// Milliseconds since the run started.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn command(&self, kind: OpKind, args: &[String]) -> Command {
        let verb = match kind {
            OpKind::Publish => "publish-synthetic",
            OpKind::Reshard => "reshard",
            OpKind::Recover => "recover",
            OpKind::Verify => "verify",
        };
        let mut command = Command::new("ip");
        // Only the hosts' variables: endpoint and credentials always set, so the S3
        // client never asks an instance-metadata service for any.
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .envs(self.hosts.client_env.iter().map(|(k, v)| (k, v)))
            .args(["netns", "exec", &self.hosts.namespace("client")])
            .arg(&self.binary)
            .args(["store", verb, "--store", &self.url, "--json"])
            .args(["--request-timeout-ms", &REQUEST_TIMEOUT_MS.to_string()])
            .args(args);
        command
    }

    /// Runs one operation to its end and records it.
    pub fn run(&self, actor: &str, kind: OpKind, args: &[String], bounds: Bounds) -> Operation {
        use std::os::unix::process::CommandExt;
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let out_path = self.out_dir.join(format!("{id}.out"));
        let err_path = self.out_dir.join(format!("{id}.err"));
        let started_ms = self.now_ms();
        let spawned = std::fs::File::create(&out_path).and_then(|out| {
            let err = std::fs::File::create(&err_path)?;
            self.command(kind, args)
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(out)
                .stderr(err)
                .spawn()
        });
        let outcome = match spawned {
            Err(e) => Outcome::Untyped {
                exit: format!("spawn failed: {e}"),
            },
            Ok(mut child) => {
                let ended = wait_bounded(&mut child, bounds);
                let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
                match ended {
                    Ended::Exited(status) => parse_outcome(kind, status, &stdout),
                    Ended::Deadline => Outcome::TimedOut,
                    Ended::Killed => Outcome::KilledByWorkload,
                }
            }
        };
        let operation = Operation {
            id,
            actor: actor.to_owned(),
            kind,
            started_ms,
            ended_ms: self.now_ms(),
            deadline_ms: bounds.deadline_ms,
            outcome,
        };
        eprintln!(
            "partitions: {:>7} ms op {id} {actor} {kind:?} {args:?}: {:?}",
            operation.ended_ms, operation.outcome
        );
        if let Ok(mut operations) = self.operations.lock() {
            operations.push(operation.clone());
        }
        operation
    }
}

enum Ended {
    Exited(std::process::ExitStatus),
    Deadline,
    Killed,
}

fn wait_bounded(child: &mut std::process::Child, bounds: Bounds) -> Ended {
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ended::Exited(status),
            Ok(None) => {}
            Err(_) => {}
        }
        let elapsed_ms = started.elapsed().as_millis() as u64;
        let ended = if elapsed_ms >= bounds.deadline_ms {
            Some(Ended::Deadline)
        } else if bounds.kill_after_ms.is_some_and(|k| elapsed_ms >= k) {
            Some(Ended::Killed)
        } else {
            None
        };
        if let Some(ended) = ended {
            kill_group(child.id());
            let _ = child.wait();
            return ended;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn parse_success(kind: OpKind, json: &Value) -> Option<Outcome> {
    match kind {
        OpKind::Publish | OpKind::Reshard => Some(Outcome::Committed {
            generation: json.get("generation")?.as_u64()?,
            commit_digest: text(json, "/commit_digest")?,
            root: text(json, "/logical_state_root")?,
        }),
        OpKind::Recover => {
            let report = json.get("report")?;
            let selected = match report.get("selected")? {
                Value::Null => None,
                s => Some((
                    s.get("generation")?.as_u64()?,
                    text(s, "/logical_state_root")?,
                )),
            };
            let generations = |v: &Value| -> Option<Vec<u64>> {
                v.as_array()?
                    .iter()
                    .map(|g| g.as_u64().or_else(|| g.get("generation")?.as_u64()))
                    .collect()
            };
            Some(Outcome::Recovered {
                selected,
                valid_generations: generations(report.get("valid_generations")?)?,
                split_brains: generations(report.get("split_brains")?)?,
                latest: report.pointer("/latest/generation").and_then(Value::as_u64),
            })
        }
        OpKind::Verify => Some(Outcome::Verified {
            generation: json.get("generation")?.as_u64()?,
            root: text(json, "/logical_state_root")?,
        }),
    }
}

/// The outcome a finished command's exit status and stdout say.
fn parse_outcome(kind: OpKind, status: std::process::ExitStatus, stdout: &str) -> Outcome {
    let json: Option<Value> = serde_json::from_str(stdout).ok();
    let untyped = || Outcome::Untyped {
        exit: format!(
            "{status}; stdout {:?}",
            stdout.chars().take(200).collect::<String>()
        ),
    };
    let Some(json) = json else {
        return untyped();
    };
    if status.success() {
        return parse_success(kind, &json).unwrap_or_else(untyped);
    }
    match text(&json, "/error/kind") {
        Some(kind) => Outcome::Failed {
            kind,
            generation: json.pointer("/error/generation").and_then(Value::as_u64),
        },
        None => untyped(),
    }
}
