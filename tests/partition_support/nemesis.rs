//! The hosts of a partition run (three Garage nodes and a client host, each in its own
//! network namespace, started by `ci/garage-hosts`) and the nemesis that cuts, slows,
//! kills and heals them on a seeded schedule.
//!
//! Partitions are blackhole routes (`ip -n NS route add blackhole ADDR/32`): packets to
//! the address vanish, as on a cut link; a route on one side only is a one-way loss.
//! Delay and dropped answers come from the client-side proxy (`DIR/proxy-mode`). Every
//! command runs with a deadline.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

/// How long one `ip` or `ci/garage-hosts` command may take, in milliseconds.
const COMMAND_TIMEOUT_MS: u64 = 90_000;

/// Runs `command` in its own process group; SIGKILLs the group at the deadline.
pub fn run_bounded(mut command: Command, timeout_ms: u64) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let text = format!("{command:?}");
    let mut child = command
        .process_group(0)
        .stdin(Stdio::null())
        .spawn()
        .map_err(|e| format!("{text}: {e}"))?;
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        match child.try_wait().map_err(|e| format!("{text}: {e}"))? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => return Err(format!("{text}: {status}")),
            None if Instant::now() >= deadline => {
                kill_group(child.id());
                let _ = child.wait();
                return Err(format!(
                    "{text}: still running after {timeout_ms} ms; killed"
                ));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// SIGKILLs the process group `pgid` (a child spawned with `process_group(0)`).
pub fn kill_group(pgid: u32) {
    if let Ok(pid) = i32::try_from(pgid) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn hosts_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage-hosts")
}

/// The hosts of one run. Dropping it stops every process in its namespaces and deletes
/// them (`ci/garage-hosts stop`), whatever the test's outcome.
pub struct Hosts {
    /// The hosts' directory (configs, data, logs, env).
    pub dir: PathBuf,
    tag: String,
    /// The client's environment: endpoint (the proxy on the client host's loopback),
    /// region and credentials, so no client ever looks elsewhere for them.
    pub client_env: Vec<(String, String)>,
    /// The bucket the clients use.
    pub bucket: String,
}

impl Hosts {
    /// Starts the hosts under `dir` (which must not hold hosts yet).
    pub fn start(dir: &Path) -> Result<Hosts, String> {
        // With this process as the owner: its watcher deletes the hosts even when the
        // test is killed before its guard runs.
        Self::start_owned_by(dir, std::process::id())
    }

    /// Starts the hosts under `dir`; they are deleted once process `owner` is gone.
    pub fn start_owned_by(dir: &Path, owner: u32) -> Result<Hosts, String> {
        let mut command = Command::new(hosts_script());
        command
            .arg("start")
            .arg(dir)
            .arg(owner.to_string())
            .stdout(Stdio::null());
        let started = run_bounded(command, COMMAND_TIMEOUT_MS);
        // Whatever start left behind is removed by the guard, even when start failed.
        let tag = std::fs::read_to_string(dir.join("tag")).unwrap_or_default();
        let mut hosts = Hosts {
            dir: dir.to_owned(),
            tag: tag.trim().to_owned(),
            client_env: Vec::new(),
            bucket: String::new(),
        };
        started?;
        let env = std::fs::read_to_string(dir.join("env")).map_err(|e| format!("env: {e}"))?;
        for line in env.lines() {
            let Some((name, value)) = line.strip_prefix("export ").and_then(|l| l.split_once('='))
            else {
                continue;
            };
            if name == "SHARDLIFT_TEST_BUCKET" {
                hosts.bucket = value.to_owned();
            }
            if name.starts_with("AWS_") {
                hosts.client_env.push((name.to_owned(), value.to_owned()));
            }
        }
        let has = |n: &str| hosts.client_env.iter().any(|(name, _)| name == n);
        if hosts.bucket.is_empty()
            || ![
                "AWS_ENDPOINT_URL",
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
            ]
            .iter()
            .all(|n| has(n))
        {
            return Err(format!(
                "{} lacks the bucket, endpoint or credentials",
                dir.display()
            ));
        }
        Ok(hosts)
    }

    /// Every namespace of these hosts that still exists.
    pub fn existing_namespaces(&self) -> Vec<String> {
        namespaces_tagged(&self.tag)
    }

    /// The namespace of `host` (`n0`, `n1`, `n2` or `client`).
    pub fn namespace(&self, host: &str) -> String {
        format!("slh-{}-{host}", self.tag)
    }

    /// Runs `ci/garage-hosts ARGS` with the hosts' directory after the first argument.
    pub fn script(&self, verb: &str, rest: &[&str]) -> Result<(), String> {
        let mut command = Command::new(hosts_script());
        command.arg(verb).arg(&self.dir).args(rest);
        run_bounded(command, COMMAND_TIMEOUT_MS)
    }

    fn set_proxy_mode(&self, mode: &str) -> Result<(), String> {
        let tmp = self.dir.join("proxy-mode.tmp");
        std::fs::write(&tmp, format!("{mode}\n")).map_err(|e| format!("proxy-mode: {e}"))?;
        std::fs::rename(&tmp, self.dir.join("proxy-mode")).map_err(|e| format!("proxy-mode: {e}"))
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        if let Err(e) = self.script("stop", &[]) {
            eprintln!("partitions: stopping the hosts failed: {e}");
        }
    }
}

/// The namespaces `ip netns list` shows whose name carries `tag`'s prefix.
pub fn namespaces_tagged(tag: &str) -> Vec<String> {
    let prefix = format!("slh-{tag}-");
    Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|line| line.split_whitespace().next())
                .filter(|name| !tag.is_empty() && name.starts_with(&prefix))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn node_addr(node: usize) -> String {
    format!("10.77.0.{}", 10 + node)
}

const CLIENT_ADDR: &str = "10.77.0.100";

/// One fault. Node 0 is the node the clients' proxy talks to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "fault", rename_all = "kebab-case")]
pub enum Fault {
    /// Node `node` cut from the other two, both ways: a majority/minority split. With
    /// node 0 the clients sit with the minority (no quorum: requests must fail); with 1 or
    /// 2 they sit with the majority (requests must succeed).
    IsolateNode { node: usize },
    /// The client host cut from node 0, both ways.
    IsolateClient,
    /// Packets from node `from` to node `to` vanish; the other direction flows.
    OneWayLoss { from: usize, to: usize },
    /// The proxy forwards requests to node 0 and discards its answers.
    DropResponses,
    /// The proxy delays every piece of data, both ways, by `ms`.
    Delay { ms: u64 },
    /// SIGKILL of node `node`; it is started again when healed.
    KillNode { node: usize },
}

/// One step of the schedule: the fault applied at `at_ms` and healed `hold_ms` later.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    /// When it is applied, in milliseconds after the run started.
    pub at_ms: u64,
    /// The fault.
    pub fault: Fault,
    /// How long it holds, in milliseconds.
    pub hold_ms: u64,
}

/// splitmix64: a small seeded generator, so a schedule replays from its seed.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A value in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

/// A schedule of faults covering `total_ms`: each held 6-14 s, then 3-6 s healed.
pub fn schedule(seed: u64, total_ms: u64) -> Vec<Step> {
    let mut rng = Rng::new(seed);
    let mut steps = Vec::new();
    let mut at_ms = 2_000;
    while at_ms < total_ms {
        let node = rng.range(0, 2) as usize;
        let fault = match rng.range(0, 6) {
            0 => Fault::IsolateNode { node },
            1 => Fault::IsolateClient,
            2 => Fault::OneWayLoss {
                from: node,
                to: (node + 1 + rng.range(0, 1) as usize) % 3,
            },
            3 => Fault::DropResponses,
            4 => Fault::Delay {
                ms: rng.range(50, 400),
            },
            5 => Fault::KillNode { node },
            _ => Fault::IsolateNode { node: 0 },
        };
        let hold_ms = rng
            .range(6_000, 14_000)
            .min(total_ms.saturating_sub(at_ms).max(1_000));
        steps.push(Step {
            at_ms,
            fault,
            hold_ms,
        });
        at_ms += hold_ms + rng.range(3_000, 6_000);
    }
    steps
}

/// Applies and heals faults, remembering what it did so healing undoes exactly that.
pub struct Nemesis<'a> {
    hosts: &'a Hosts,
    routes: Vec<(String, String)>,
    killed: Vec<usize>,
}

impl<'a> Nemesis<'a> {
    /// A nemesis over `hosts`, nothing applied.
    pub fn new(hosts: &'a Hosts) -> Nemesis<'a> {
        Nemesis {
            hosts,
            routes: Vec::new(),
            killed: Vec::new(),
        }
    }

    fn blackhole(&mut self, host: &str, addr: &str) -> Result<(), String> {
        let namespace = self.hosts.namespace(host);
        let mut command = Command::new("ip");
        command.args([
            "-n",
            &namespace,
            "route",
            "add",
            "blackhole",
            &format!("{addr}/32"),
        ]);
        run_bounded(command, COMMAND_TIMEOUT_MS)?;
        self.routes.push((namespace, addr.to_owned()));
        Ok(())
    }

    fn cut(&mut self, a: (&str, &str), b: (&str, &str)) -> Result<(), String> {
        self.blackhole(a.0, b.1)?;
        self.blackhole(b.0, a.1)
    }

    /// Applies `fault`.
    pub fn apply(&mut self, fault: &Fault) -> Result<(), String> {
        let host = |n: usize| format!("n{n}");
        match fault {
            Fault::IsolateNode { node } => {
                for other in (0..3).filter(|o| o != node) {
                    let (a, b) = (host(*node), host(other));
                    self.cut((&a, &node_addr(*node)), (&b, &node_addr(other)))?;
                }
                Ok(())
            }
            Fault::IsolateClient => self.cut(("client", CLIENT_ADDR), ("n0", &node_addr(0))),
            Fault::OneWayLoss { from, to } => self.blackhole(&host(*from), &node_addr(*to)),
            Fault::DropResponses => self.hosts.set_proxy_mode("drop-responses"),
            Fault::Delay { ms } => self.hosts.set_proxy_mode(&format!("delay {ms}")),
            Fault::KillNode { node } => {
                self.hosts.script("node", &["kill", &node.to_string()])?;
                self.killed.push(*node);
                Ok(())
            }
        }
    }

    /// Undoes everything applied: routes removed, the proxy passing, killed nodes started.
    pub fn heal(&mut self) -> Result<(), String> {
        let mut first_error = None;
        for (namespace, addr) in std::mem::take(&mut self.routes) {
            let mut command = Command::new("ip");
            command.args([
                "-n",
                &namespace,
                "route",
                "del",
                "blackhole",
                &format!("{addr}/32"),
            ]);
            if let Err(e) = run_bounded(command, COMMAND_TIMEOUT_MS) {
                first_error.get_or_insert(e);
            }
        }
        if let Err(e) = self.hosts.set_proxy_mode("pass") {
            first_error.get_or_insert(e);
        }
        for node in std::mem::take(&mut self.killed) {
            if let Err(e) = self.hosts.script("node", &["start", &node.to_string()]) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}
