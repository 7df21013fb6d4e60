//! A publisher process SIGKILLed against a real three-node Garage cluster (lane
//! `objectstore`): at every request boundary of one publish (a child paused at each
//! barrier event in turn, `store publish-synthetic --pause-at barriers`), and at fixed
//! instants spread over a publish. A fresh recovery always selects the last committed
//! generation or — only once the commit record's PUT was acknowledged — the candidate,
//! and every selection loads and verifies in a fresh process.
mod objectstore_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use objectstore_support::{fresh_url, open, shardlift_exe, shardlift_json};
use shardlift::lab::harness::{ChildMessage, ACK};
use shardlift::store::barrier::{Barrier, BarrierEvent};
use shardlift::store::layout::synthetic_state;

const CHUNK_ELEMENTS: u32 = 8192;
const SEED: u64 = 41;

#[test]
fn a_publisher_killed_at_spread_instants_never_leaves_an_unverified_selection() {
    let url = fresh_url("kill");
    // Kill delays spread over one publish (a few seconds on this cluster), plus one run
    // left to finish so a candidate is certainly committed once.
    let delays_ms: [u64; 7] = [30, 250, 700, 1_300, 2_000, 3_000, 60_000];
    let mut committed: Option<(u64, u64)> = None; // (generation, step)
    let mut killed_before_commit = 0;
    let mut killed_after_commit = 0;
    for (run, delay_ms) in delays_ms.into_iter().enumerate() {
        let step = run as u64 + 1;
        let mut child = std::process::Command::new(shardlift_exe())
            .args(["store", "publish-synthetic", "--store", &url, "--json"])
            .args(["--seed", &SEED.to_string(), "--step", &step.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn the publisher");
        let deadline = std::time::Instant::now() + Duration::from_millis(delay_ms);
        let finished = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break Some(status);
            }
            if std::time::Instant::now() >= deadline {
                break None;
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        if finished.is_none() {
            child.kill().expect("SIGKILL the publisher");
            child.wait().expect("reap the publisher");
        }
        let store = open(&url, false);
        let report = store.recover().expect("recover after the kill");
        let selected = report
            .scan
            .selected
            .as_ref()
            .map(|s| (s.generation, s.step));
        let candidate_generation = committed.map_or(0, |(g, _)| g + 1);
        let allowed = [committed, Some((candidate_generation, step))];
        assert!(
            allowed.contains(&selected),
            "run {run} (kill after {delay_ms} ms, finished: {finished:?}): selected {selected:?}, allowed {allowed:?}: {report:?}"
        );
        if let Some(status) = finished {
            assert!(status.success(), "run {run}: the unkilled publisher failed");
            assert_eq!(selected, Some((candidate_generation, step)));
        } else if selected == committed {
            killed_before_commit += 1;
        } else {
            killed_after_commit += 1;
        }
        if let Some((generation, step)) = selected {
            let (state, _) = store
                .load_generation(generation)
                .expect("the selection loads and verifies");
            assert_eq!(state, synthetic_state(SEED, step, CHUNK_ELEMENTS));
        }
        committed = selected;
    }
    eprintln!(
        "kills before the commit point: {killed_before_commit}, after it: {killed_after_commit}"
    );
    assert!(
        killed_before_commit > 0,
        "no kill landed before the commit point: the test did not exercise a torn publish"
    );
}

/// The chunk size of the boundaries test: the default model in 2 chunks (6 payload
/// objects, 9 PUTs, 36 boundaries), so a kill at each of them fits the lane; the default
/// 8192 (39 objects, 168 boundaries) took 1000 s here, the same boundary kinds over again.
const BOUNDARY_CHUNK_ELEMENTS: u32 = 65_536;

/// The deadline for any one line from a paused publisher (a PUT has its own bounds).
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

/// A `store publish-synthetic --pause-at barriers` child: it stops after every barrier
/// event until acknowledged.
struct PausedPublisher {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Lines that are not barrier events (the JSON summary at the end).
    other: Vec<String>,
}

impl PausedPublisher {
    fn spawn(url: &str, step: u64) -> Self {
        let mut child = Command::new(shardlift_exe())
            .args(["store", "publish-synthetic", "--store", url, "--json"])
            .args(["--seed", &SEED.to_string(), "--step", &step.to_string()])
            .args(["--chunk-elements", &BOUNDARY_CHUNK_ELEMENTS.to_string()])
            .args(["--pause-at", "barriers"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the paused publisher");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("publisher stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        PausedPublisher {
            child,
            stdin,
            lines,
            other: Vec::new(),
        }
    }

    /// The next barrier event, or None once stdout ended (other lines are kept).
    fn next_event(&mut self) -> Option<BarrierEvent> {
        loop {
            let line = match self.lines.recv_timeout(LINE_TIMEOUT) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("no line from the paused publisher within {LINE_TIMEOUT:?}");
                }
            };
            match serde_json::from_str::<ChildMessage>(&line) {
                Ok(ChildMessage::Barrier(event)) => return Some(event),
                _ => self.other.push(line),
            }
        }
    }

    fn ack(&mut self) {
        let stdin = self.stdin.as_mut().expect("publisher stdin");
        stdin
            .write_all(&[ACK])
            .and_then(|()| stdin.flush())
            .expect("acknowledge the barrier event");
    }

    /// SIGKILL (it is paused, so it dies exactly at the event it last sent) and reap.
    fn kill(mut self) -> std::process::ExitStatus {
        self.child.kill().expect("SIGKILL the publisher");
        self.child.wait().expect("reap the publisher")
    }
}

/// (generation, step) a fresh `store recover` process selects; the selection is then
/// loaded and verified end to end by a fresh `store verify` process, whose root must be
/// that of the synthetic state of that step.
fn recover_and_verify_in_fresh_processes(url: &str, context: &str) -> Option<(u64, u64)> {
    let (ok, recovered, stderr) = shardlift_json(&["store", "recover", "--store", url, "--json"]);
    assert!(ok, "{context}: recovery failed: {stderr} {recovered}");
    let selected = &recovered["report"]["selected"];
    if selected.is_null() {
        return None;
    }
    let generation = selected["generation"]
        .as_u64()
        .expect("selected generation");
    let step = selected["step"].as_u64().expect("selected step");
    let (ok, verified, stderr) = shardlift_json(&[
        "store",
        "verify",
        "--store",
        url,
        "--generation",
        &generation.to_string(),
        "--json",
    ]);
    assert!(
        ok,
        "{context}: the selection (generation {generation}) does not load and verify: {stderr} {verified}"
    );
    let expected_root = synthetic_state(SEED, step, BOUNDARY_CHUNK_ELEMENTS)
        .logical_state_root()
        .to_string();
    assert_eq!(
        verified["logical_state_root"], expected_root,
        "{context}: generation {generation} verifies with another root than step {step}'s"
    );
    Some((generation, step))
}

#[test]
fn a_publisher_killed_at_every_request_boundary_never_leaves_an_unverified_selection() {
    let started = Instant::now();
    let url = fresh_url("boundaries");
    // One full publish, acknowledging every event: observes the boundaries (barrier events)
    // of one publish, and commits generation 0.
    let mut full = PausedPublisher::spawn(&url, 1);
    let mut events = Vec::new();
    while let Some(event) = full.next_event() {
        assert_eq!(event.seq, events.len() as u64, "events come in sequence");
        events.push(event);
        full.ack();
    }
    let status = full.child.wait().expect("reap the full publisher");
    assert!(status.success(), "the acknowledged publisher failed");
    let summary: serde_json::Value =
        serde_json::from_str(&full.other.join("\n")).expect("the publish summary");
    assert_eq!(summary["generation"], 0, "{summary}");
    let last = events.last().expect("a publish reaches barriers");
    assert_eq!(last.barrier, Barrier::LatestAfterDirectoryFsync);
    let mut committed = recover_and_verify_in_fresh_processes(&url, "after the full publish");
    assert_eq!(committed, Some((0, 1)));

    let (mut before_commit, mut after_commit) = (0u32, 0u32);
    for (boundary, target) in events.iter().enumerate() {
        let step = boundary as u64 + 2;
        let mut publisher = PausedPublisher::spawn(&url, step);
        for seq in 0..=boundary as u64 {
            let event = publisher.next_event().unwrap_or_else(|| {
                panic!("boundary {boundary}: the publisher ended before event {seq}")
            });
            assert_eq!(event.seq, seq);
            assert_eq!(
                event.barrier, events[seq as usize].barrier,
                "boundary {boundary}: every publish reaches the same barriers in the same order"
            );
            if seq < boundary as u64 {
                publisher.ack();
            }
        }
        let status = publisher.kill();
        assert!(
            !status.success(),
            "boundary {boundary}: the paused publisher was not killed"
        );
        // The commit point: the commit record's PUT was acknowledged (RFC 0001 §9.6).
        let commit_acknowledged = events[..=boundary]
            .iter()
            .any(|e| e.barrier == Barrier::CommitAfterRename);
        let candidate = (committed.map_or(0, |(g, _)| g + 1), step);
        let expected = if commit_acknowledged {
            Some(candidate)
        } else {
            committed
        };
        let context = format!(
            "kill at boundary {boundary} ({} #{})",
            target.barrier.name(),
            target.occurrence
        );
        let selected = recover_and_verify_in_fresh_processes(&url, &context);
        assert_eq!(
            selected, expected,
            "{context}: selected {selected:?}; committed before {committed:?}, candidate {candidate:?}, commit record acknowledged: {commit_acknowledged}"
        );
        if commit_acknowledged {
            after_commit += 1;
        } else {
            before_commit += 1;
        }
        committed = selected;
    }
    eprintln!(
        "objectstore boundaries: {} barrier events per publish; kills before the commit point: {before_commit}, after it: {after_commit}; {:.1} s",
        events.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(before_commit > 0, "no kill landed before the commit point");
    assert!(after_commit > 0, "no kill landed after the commit point");
}
