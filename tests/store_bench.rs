//! `store bench` reports progress through the library's `Progress` trait: phases with
//! their step counts, never a line per published state; the binary, with stderr not a
//! terminal, prints only phase lines there and the unchanged JSON report on stdout.
use std::process::Command;

use shardlift::core::progress::RecordedProgress;

#[test]
fn bench_reports_its_phases_and_one_step_per_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut progress = RecordedProgress::default();
    // Just over two states' payload: three states.
    let report =
        shardlift::lab::bench::run(2_500_000, Some(dir.path()), &mut progress).expect("bench");
    assert_eq!(report.states, 3);
    assert_eq!(
        progress.events,
        vec![
            "phase store bench: publish 3",
            "advance 1",
            "advance 2",
            "advance 3",
            "finish",
            "phase store bench: reshard and copy ?",
            "finish",
            "phase store bench: recovery and SHA-256 ?",
            "finish",
        ]
    );
}

#[test]
fn bench_prints_phase_lines_not_a_line_per_state_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_shardlift"))
        .args(["store", "bench", "--bytes", "2500000", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run shardlift");
    assert!(output.status.success(), "{output:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is the JSON report");
    assert_eq!(report["states"], 3);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 6, "{stderr}");
    assert_eq!(lines[0], "store bench: publish: 3 steps");
    assert!(lines[1].starts_with("store bench: publish: done in "));
    assert_eq!(lines[2], "store bench: reshard and copy");
    assert_eq!(lines[4], "store bench: recovery and SHA-256");
    assert!(!stderr.contains("published"), "{stderr}");
}
