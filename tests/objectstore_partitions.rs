//! The store across a real network (lane `objectstore`): three Garage nodes on three
//! hosts (network namespaces on a private bridge, `ci/garage-hosts`), the clients on a
//! fourth; a seeded nemesis partitions, slows, drops and kills for at least three
//! minutes while racing publishers (some SIGKILLed at random instants), a resharder and
//! fresh-process recoveries run, every operation under a deadline. Then everything is
//! healed, a publish and a final recovery run, every acknowledged or recovered
//! generation is verified, and the history checker judges the run. The JSON report
//! (schedule, nemesis events, operations, verdict) is written to
//! `$CARGO_TARGET_TMPDIR/partitions-report-SEED.json`.
//!
//! Needs root (network namespaces) and the installed Garage (`ci/garage install`).
//! `SHARDLIFT_PARTITIONS_SEED` replays a schedule, `SHARDLIFT_PARTITIONS_MS` sets its
//! length (at least 180 000), `SHARDLIFT_PARTITIONS_DIR` where the hosts live (ci/test
//! sets it, and stops the hosts there whatever happens, Ctrl-C included).
mod partition_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use partition_support::history::{
    check, latest_disagreements, trusting_latest, History, OpKind, Outcome,
};
use partition_support::nemesis::{namespaces_tagged, schedule, Hosts, Nemesis, Rng, Step};
use partition_support::workload::{Bounds, Client};
use serde::Serialize;

const DEFAULT_SEED: u64 = 0x5eed_0041;
const MIN_FAULT_MS: u64 = 180_000;
/// Each operation under faults, in milliseconds: several requests' worth of the
/// client's own bounds (`--request-timeout-ms`).
const DEADLINE_MS: u64 = 45_000;
/// The final operations, healed: long enough for a cluster that is catching up.
const HEALED_DEADLINE_MS: u64 = 120_000;
const KILL_GRACE_MS: u64 = 3_000;
/// How long the healing publish, and then the final recovery, are retried, in ms.
const HEALED_WAIT_MS: u64 = 240_000;

#[derive(Serialize)]
struct NemesisEvent {
    at_ms: u64,
    action: &'static str,
    step: usize,
    error: Option<String>,
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a whole number")),
        Err(_) => default,
    }
}

fn sleep_until(client: &Client<'_>, at_ms: u64) {
    let now = client.now_ms();
    if at_ms > now {
        std::thread::sleep(Duration::from_millis(at_ms - now));
    }
}

/// Runs the schedule; every fault is healed before it returns.
fn run_nemesis(client: &Client<'_>, hosts: &Hosts, steps: &[Step]) -> Vec<NemesisEvent> {
    let mut nemesis = Nemesis::new(hosts);
    let mut events = Vec::new();
    for (index, step) in steps.iter().enumerate() {
        sleep_until(client, step.at_ms);
        let applied = nemesis.apply(&step.fault);
        eprintln!(
            "partitions: {} ms apply {:?}: {applied:?}",
            client.now_ms(),
            step.fault
        );
        events.push(NemesisEvent {
            at_ms: client.now_ms(),
            action: "apply",
            step: index,
            error: applied.err(),
        });
        sleep_until(client, step.at_ms + step.hold_ms);
        let healed = nemesis.heal();
        eprintln!("partitions: {} ms heal: {healed:?}", client.now_ms());
        events.push(NemesisEvent {
            at_ms: client.now_ms(),
            action: "heal",
            step: index,
            error: healed.err(),
        });
    }
    events
}

/// One workload actor: publishes (racing the other publisher; one in four SIGKILLed at a
/// random instant), reshards the recovered generation, or recovers, until `stop`.
fn run_actor(client: &Client<'_>, actor: &str, seed: u64, stop: &AtomicBool) {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let bounds = Bounds {
            deadline_ms: DEADLINE_MS,
            kill_after_ms: None,
        };
        match actor {
            "recoverer" => {
                client.run(actor, OpKind::Recover, &[], bounds);
                std::thread::sleep(Duration::from_millis(500));
            }
            "resharder" => {
                let recovered = client.run(actor, OpKind::Recover, &[], bounds);
                if let Outcome::Recovered {
                    selected: Some((generation, _)),
                    ..
                } = recovered.outcome
                {
                    let workers = rng.range(2, 4).to_string();
                    let args = [
                        "--generation".into(),
                        generation.to_string(),
                        "--workers".into(),
                        workers,
                    ];
                    client.run(actor, OpKind::Reshard, &args, bounds);
                }
                std::thread::sleep(Duration::from_millis(rng.range(500, 3_000)));
            }
            _ => {
                // Distinct seeds: racing publishers commit different records.
                let args = [
                    "--seed".into(),
                    (seed.wrapping_mul(1_000_003) ^ n).to_string(),
                    "--step".into(),
                    n.to_string(),
                    "--workers".into(),
                    rng.range(2, 4).to_string(),
                    "--chunk-elements".into(),
                    "65536".into(),
                ];
                let kill_after_ms = (rng.range(0, 3) == 0).then(|| rng.range(50, 4_000));
                client.run(
                    actor,
                    OpKind::Publish,
                    &args,
                    Bounds {
                        kill_after_ms,
                        ..bounds
                    },
                );
                // Sometimes right behind the other publisher (a race), sometimes not.
                std::thread::sleep(Duration::from_millis(rng.range(0, 1_500)));
            }
        }
    }
}

/// Healed: every node back, a publish (so a split brain at the top is no longer the top),
/// the final recovery, and a verify of every acknowledged or recovered generation.
fn final_phase(client: &Client<'_>, hosts: &Hosts) -> usize {
    if let Err(e) = hosts.script("health", &["120"]) {
        eprintln!("partitions: the cluster did not report healthy after healing: {e}");
    }
    let healed = Bounds {
        deadline_ms: HEALED_DEADLINE_MS,
        kill_after_ms: None,
    };
    let args = [
        "--seed".into(),
        "4141".into(),
        "--workers".into(),
        "3".into(),
        "--chunk-elements".into(),
        "65536".into(),
    ];
    // A healed cluster can take a while to serve again: a node's connection to a peer
    // across a link that was cut may sit in TCP retransmission backoff until Garage
    // drops and redials it. So attempt after attempt, within a bound (each recorded and
    // judged like any other operation).
    let publishing_since = Instant::now();
    while publishing_since.elapsed() < Duration::from_millis(HEALED_WAIT_MS) {
        let op = client.run("healed", OpKind::Publish, &args, healed);
        if matches!(op.outcome, Outcome::Committed { .. }) {
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    let recovering_since = Instant::now();
    let mut final_recovery = client.run("healed", OpKind::Recover, &[], healed);
    while !matches!(final_recovery.outcome, Outcome::Recovered { .. })
        && recovering_since.elapsed() < Duration::from_millis(HEALED_WAIT_MS)
    {
        std::thread::sleep(Duration::from_secs(2));
        final_recovery = client.run("healed", OpKind::Recover, &[], healed);
    }
    let mut generations = std::collections::BTreeSet::new();
    for op in client
        .operations
        .lock()
        .map(|o| o.clone())
        .unwrap_or_default()
    {
        match op.outcome {
            Outcome::Committed { generation, .. } => generations.insert(generation),
            Outcome::Recovered {
                selected: Some((generation, _)),
                ..
            } => generations.insert(generation),
            _ => false,
        };
    }
    for generation in generations {
        let args = ["--generation".into(), generation.to_string()];
        client.run("healed", OpKind::Verify, &args, healed);
    }
    final_recovery.id
}

/// Runs the workload under the nemesis, heals, runs the final phase, and returns the
/// history and the nemesis events.
fn run_under_faults(
    hosts: &Hosts,
    seed: u64,
    steps: &[Step],
    out_dir: std::path::PathBuf,
) -> (History, Vec<NemesisEvent>) {
    let url = format!("s3://{}/partitions-{seed:x}", hosts.bucket);
    let client = Client::new(hosts, url, out_dir, Instant::now());
    let stop = AtomicBool::new(false);
    let events = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for (i, actor) in ["publisher-a", "publisher-b", "resharder", "recoverer"]
            .iter()
            .enumerate()
        {
            let (client, stop) = (&client, &stop);
            scope.spawn(move || run_actor(client, actor, seed ^ (i as u64 + 1), stop));
        }
        let found = run_nemesis(&client, hosts, steps);
        stop.store(true, Ordering::SeqCst);
        if let Ok(mut events) = events.lock() {
            *events = found;
        }
    });
    let final_recovery = final_phase(&client, hosts);
    let history = History {
        operations: client
            .operations
            .lock()
            .map(|o| o.clone())
            .unwrap_or_default(),
        final_recovery: Some(final_recovery),
        kill_grace_ms: KILL_GRACE_MS,
    };
    (history, events.into_inner().unwrap_or_default())
}

#[test]
fn seeded_faults_across_three_garage_hosts_pass_the_history_checker() {
    let seed = env_u64("SHARDLIFT_PARTITIONS_SEED", DEFAULT_SEED);
    let total_ms = env_u64("SHARDLIFT_PARTITIONS_MS", MIN_FAULT_MS).max(MIN_FAULT_MS);
    let scratch = tempfile::Builder::new()
        .prefix("shardlift-partitions.")
        .tempdir()
        .expect("scratch dir");
    let base = std::env::var_os("SHARDLIFT_PARTITIONS_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| scratch.path().to_owned());
    let out_dir = base.join("ops");
    std::fs::create_dir_all(&out_dir).expect("ops dir");
    let hosts =
        Hosts::start(&base.join("hosts")).unwrap_or_else(|e| panic!("starting the hosts: {e}"));
    let steps = schedule(seed, total_ms);
    eprintln!(
        "partitions: seed {seed:#x}, {} faults over {total_ms} ms",
        steps.len()
    );
    let (history, events) = run_under_faults(&hosts, seed, &steps, out_dir);
    let verdict = check(&history);
    // The broken variant: the same runs answered by a recovery that trusts LATEST.
    let latest_disagreed = latest_disagreements(&history);
    let latest_variant = check(&trusting_latest(&history));
    let report = serde_json::json!({
        "seed": seed,
        "fault_ms": total_ms,
        "schedule": steps,
        "nemesis": events,
        "operations": history.operations,
        "verdict": verdict,
        "latest_trusting_variant": {
            "latest_disagreements": latest_disagreed,
            "verdict": latest_variant,
        },
    });
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("partitions-report-{seed:x}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&report).expect("report"))
        .expect("report file");
    println!(
        "{}",
        serde_json::json!({ "report": path, "verdict": verdict })
    );
    let tag_namespaces = hosts.existing_namespaces();
    assert_eq!(
        tag_namespaces.len(),
        5,
        "the hosts' namespaces: {tag_namespaces:?}"
    );
    let hosts_dir_kept = hosts.dir.clone();
    keep_logs(&hosts_dir_kept, seed);
    drop(hosts);
    let left = namespaces_left(&hosts_dir_kept);
    assert!(left.is_empty(), "namespaces left after the run: {left:?}");
    let nemesis_errors: Vec<_> = events.iter().filter(|e| e.error.is_some()).collect();
    assert!(
        nemesis_errors.is_empty(),
        "nemesis commands failed (report {})",
        path.display()
    );
    assert!(
        verdict.passed,
        "the history checker found {:?} (report {})",
        verdict.violations,
        path.display()
    );
    assert!(
        latest_disagreed == 0 || !latest_variant.passed,
        "LATEST disagreed with {latest_disagreed} recoveries, yet the LATEST-trusting variant passed (report {})",
        path.display()
    );
    assert!(
        verdict.acknowledged >= 5,
        "only {} commits acknowledged: the run tested too little (report {})",
        verdict.acknowledged,
        path.display()
    );
}

/// Copies the proxy's and the nodes' logs beside the report, so a failed run can be
/// read after its hosts are gone.
fn keep_logs(hosts_dir: &std::path::Path, seed: u64) {
    let logs =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("partitions-logs-{seed:x}"));
    let _ = std::fs::create_dir_all(&logs);
    let _ = std::fs::copy(hosts_dir.join("proxy.log"), logs.join("proxy.log"));
    for n in 0..3 {
        let _ = std::fs::copy(
            hosts_dir.join(format!("node{n}/log")),
            logs.join(format!("node{n}.log")),
        );
    }
}

/// The namespaces still listed for the hosts recorded under `dir`.
/// Whether this process ignores SIGINT (`SigIgn` in `/proc/self/status`), which its
/// children inherit.
fn sigint_ignored_here() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (nix::sys::signal::Signal::SIGINT as u32 - 1)) != 0)
}

fn namespaces_left(dir: &std::path::Path) -> Vec<String> {
    let tag = std::fs::read_to_string(dir.join("tag")).unwrap_or_default();
    namespaces_tagged(tag.trim())
}

/// `ci/garage-hosts stop DIR`, so a failing teardown test leaves nothing behind either.
fn stop_hosts(dir: &std::path::Path) {
    let _ = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage-hosts"),
    )
    .arg("stop")
    .arg(dir)
    .status();
}

/// Waits (bounded) until nothing of the hosts under `dir` is left: no namespace, no node.
fn wait_gone(dir: &std::path::Path, timeout_ms: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_millis(timeout_ms);
    loop {
        let left = namespaces_left(dir);
        let nodes_alive: Vec<_> = (0..3)
            .filter_map(|n| std::fs::read_to_string(dir.join(format!("node{n}/pid"))).ok())
            .filter(|pid| std::path::Path::new(&format!("/proc/{}", pid.trim())).exists())
            .collect();
        if left.is_empty() && nodes_alive.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "after {timeout_ms} ms: namespaces {left:?}, node pids {nodes_alive:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hosts_are_deleted_when_their_owner_is_killed() {
    let scratch = tempfile::Builder::new()
        .prefix("shardlift-hosts-owner.")
        .tempdir()
        .expect("scratch dir");
    let dir = scratch.path().join("hosts");
    // A stand-in for a test process that dies by SIGKILL before any guard runs.
    let mut owner = std::process::Command::new("sleep")
        .arg("300")
        .spawn()
        .expect("spawn the owner");
    let hosts = Hosts::start_owned_by(&dir, owner.id()).unwrap_or_else(|e| panic!("start: {e}"));
    assert_eq!(hosts.existing_namespaces().len(), 5);
    std::mem::forget(hosts); // no guard: only the watcher may clean up
    owner.kill().expect("SIGKILL the owner");
    owner.wait().expect("reap the owner");
    if let Err(e) = wait_gone(&dir, 20_000) {
        stop_hosts(&dir);
        panic!("the watcher left hosts behind: {e}");
    }
}

#[test]
fn an_interrupted_start_deletes_what_it_created() {
    let scratch = tempfile::Builder::new()
        .prefix("shardlift-hosts-interrupted.")
        .tempdir()
        .expect("scratch dir");
    let dir = scratch.path().join("hosts");
    let mut start = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/garage-hosts"),
    )
    .arg("start")
    .arg(&dir)
    .stdout(std::process::Stdio::null())
    .spawn()
    .expect("spawn ci/garage-hosts start");
    // Interrupt it once its namespaces exist (bounded), as Ctrl-C would.
    let deadline = Instant::now() + Duration::from_secs(30);
    while namespaces_left(&dir).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !namespaces_left(&dir).is_empty(),
        "start created no namespace within 30 s"
    );
    // A shell started with SIGINT ignored (any command run in the background of a
    // non-interactive shell is) cannot trap it; the script's TERM trap takes the same path.
    let signal = if sigint_ignored_here() {
        eprintln!("SIGINT is ignored in this process and so in the script: sending SIGTERM");
        nix::sys::signal::Signal::SIGTERM
    } else {
        nix::sys::signal::Signal::SIGINT
    };
    if let Ok(pid) = i32::try_from(start.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
    let status = start.wait().expect("reap ci/garage-hosts start");
    if status.success() {
        stop_hosts(&dir);
        panic!("an interrupted start must not succeed ({signal})");
    }
    if let Err(e) = wait_gone(&dir, 20_000) {
        stop_hosts(&dir);
        panic!("the interrupted start left {e}");
    }
}
