//! A publisher process SIGKILLed at fixed instants spread over a publish to a real three-node
//! Garage cluster (lane `objectstore`): a fresh recovery always selects the last
//! committed generation or the candidate, and every selection loads and verifies. (Kills
//! at every request boundary, through a paused child publisher, are not done yet.)
mod objectstore_support;

use std::time::Duration;

use objectstore_support::{fresh_url, open, shardlift_exe};
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
