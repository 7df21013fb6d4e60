//! `store bench` reports progress through the library's `Progress` trait: phases with
//! their step counts, never a line per published state; the binary, with stderr not a
//! terminal, prints only phase lines there and the unchanged JSON report on stdout.
use std::process::Command;

use shardlift::core::progress::RecordedProgress;

/// Runs `shardlift store bench ARGS --dir DIR`, which must succeed; returns its JSON report
/// and its stderr.
fn bench(dir: &std::path::Path, args: &[&str]) -> (serde_json::Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_shardlift"))
        .args(["store", "bench"])
        .args(args)
        .arg("--dir")
        .arg(dir)
        .output()
        .expect("run shardlift");
    assert!(output.status.success(), "{output:?}");
    let report = serde_json::from_slice(&output.stdout).expect("stdout is the JSON report");
    (report, String::from_utf8_lossy(&output.stderr).into_owned())
}

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
    let (report, stderr) = bench(dir.path(), &["--skip-large", "--bytes", "2500000"]);
    assert!(report["large"].is_null());
    assert_eq!(report["small_state"]["states"], 3);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 6, "{stderr}");
    assert_eq!(lines[0], "store bench: publish: 3 steps");
    assert!(lines[1].starts_with("store bench: publish: done in "));
    assert_eq!(lines[2], "store bench: reshard and copy");
    assert_eq!(lines[4], "store bench: recovery and SHA-256");
    assert!(!stderr.contains("published"), "{stderr}");
}

#[test]
fn large_bench_prints_every_figure_and_ratios_derived_from_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (report, stderr) = bench(
        dir.path(),
        &["--state-bytes", "2000000", "--skip-small", "--json"],
    );
    assert!(report["small_state"].is_null());
    let large = &report["large"];
    let state_bytes = large["state_bytes"].as_u64().expect("state_bytes");
    assert!(state_bytes >= 2_000_000, "{large}");
    assert!(large["files"].as_u64().expect("files") > 0);
    assert!(large["cache_drop"]
        .as_str()
        .expect("cache_drop")
        .contains("drop_caches"));
    let figure = |name: &str| -> (f64, f64) {
        let f = &large[name];
        assert_eq!(f["bytes"].as_u64(), Some(state_bytes), "{name}: {f}");
        let seconds = f["seconds"].as_f64().expect("seconds");
        let mb_per_s = f["mb_per_s"].as_f64().expect("mb_per_s");
        assert!(seconds > 0.0, "{name}: {f}");
        let derived = state_bytes as f64 / seconds / 1e6;
        assert!((mb_per_s - derived).abs() <= 1e-9 * derived, "{name}: {f}");
        (seconds, mb_per_s)
    };
    for name in [
        "plain_write_fsync",
        "plain_write_fsync_concurrent",
        "publish_sequential",
        "publish",
        "recovery_verify",
        "recovery_verify_cold",
        "sha256_single_core",
        "sha256_parallel_in_memory",
        "reshard_w3",
        "reshard_w3_hashed",
        "reshard_w2",
        "reshard_w8",
        "copy",
        "copy_cold",
        "object_reads_warm",
    ] {
        figure(name);
    }
    for field in [
        "write_ms",
        "file_fsync_ms",
        "rename_ms",
        "directory_fsync_ms",
    ] {
        assert!(large["fsync_probe"][field].as_f64().expect(field) >= 0.0);
    }
    let cores_used = large["cores_used"].as_u64().expect("cores_used");
    assert!(cores_used >= 1);
    let close = |name: &str, expected: f64| {
        let actual = large[name].as_f64().expect(name);
        assert!(
            (actual - expected).abs() <= 1e-9 * expected.abs(),
            "{name}: {actual} is not {expected}"
        );
    };
    close(
        "publish_over_plain",
        figure("publish").0 / figure("plain_write_fsync").0,
    );
    close(
        "publish_sequential_over_plain",
        figure("publish_sequential").0 / figure("plain_write_fsync").0,
    );
    close(
        "publish_over_concurrent_plain",
        figure("publish").0 / figure("plain_write_fsync_concurrent").0,
    );
    assert_eq!(large["io_threads"].as_u64(), Some(16));
    close(
        "reshard_over_copy",
        figure("reshard_w3").0 / figure("copy").0,
    );
    close(
        "reshard_hashed_over_copy",
        figure("reshard_w3_hashed").0 / figure("copy").0,
    );
    assert_eq!(large["reshard_source_check"], "lengths", "{large}");
    close(
        "recovery_over_parallel_sha256",
        figure("recovery_verify").1 / (figure("sha256_single_core").1 * cores_used as f64),
    );
    close(
        "recovery_over_measured_parallel_sha256",
        figure("recovery_verify").1 / figure("sha256_parallel_in_memory").1,
    );
    close(
        "recovery_over_reads_plus_hashing",
        (figure("object_reads_warm").0 + figure("sha256_parallel_in_memory").0)
            / figure("recovery_verify").0,
    );
    let state_mb = large["state_bytes"].as_f64().expect("state_bytes") / 1e6;
    close(
        "reads_plus_hashing_over_parallel_sha256",
        state_mb
            / (figure("object_reads_warm").0 + figure("sha256_parallel_in_memory").0)
            / (figure("sha256_single_core").1 * cores_used as f64),
    );
    // The reshard's commit phase is timed inside the whole reshard, so it is shorter.
    let commit_ms = large["reshard_w3_commit_ms"]
        .as_f64()
        .expect("reshard_w3_commit_ms");
    assert!(commit_ms > 0.0, "{large}");
    assert!(commit_ms / 1e3 < figure("reshard_w3").0, "{large}");
    close(
        "reshard_commit_over_copy",
        commit_ms / 1e3 / figure("copy").0,
    );
    assert!(stderr.contains("store bench: publish"), "{stderr}");
    assert!(
        stderr.contains("store bench: sequential publish"),
        "{stderr}"
    );
    assert!(
        stderr.contains("store bench: plain write+fsync, 16 threads"),
        "{stderr}"
    );
    assert!(
        stderr.contains("store bench: reshard W4 to W3, W2, W8"),
        "{stderr}"
    );
}

/// Runs `shardlift ARGS`, which must fail; returns its stderr.
fn refused(args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_shardlift"))
        .args(args)
        .output()
        .expect("run shardlift");
    assert!(
        !output.status.success(),
        "{args:?} must be refused: {output:?}"
    );
    assert!(output.stdout.is_empty(), "a refusal prints no report");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn flags_of_the_other_backend_are_refused_and_nothing_is_written() {
    // The local bench's states are fixed: --seed belongs to the object-store bench.
    let stderr = refused(&[
        "store",
        "bench",
        "--seed",
        "3",
        "--skip-large",
        "--skip-small",
    ]);
    assert!(stderr.contains("--seed"), "{stderr}");
    // The object-store bench has no per-commit figure nor local scratch directory.
    let stderr = refused(&[
        "store",
        "bench",
        "--store",
        "s3://bucket-x/p",
        "--skip-small",
    ]);
    assert!(stderr.contains("--skip-small"), "{stderr}");
    // A local store has no paused publisher through publish-synthetic: nothing is written.
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    let store_arg = store.to_str().expect("utf-8");
    let stderr = refused(&[
        "store",
        "publish-synthetic",
        "--store",
        store_arg,
        "--pause-at",
        "barriers",
    ]);
    assert!(stderr.contains("--pause-at"), "{stderr}");
    assert!(!store.exists(), "a refused publish must create no store");
    // An object store's writer is sequential by RFC 0001 §9.3: `--sequential` is refused
    // there before any request is sent (the bucket need not exist).
    let stderr = refused(&[
        "store",
        "publish-synthetic",
        "--store",
        "s3://bucket-x/p",
        "--sequential",
    ]);
    assert!(stderr.contains("--sequential"), "{stderr}");
}

#[test]
fn a_bench_that_would_not_fit_is_refused_before_it_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    // 1 PiB: six copies exceed any free space here.
    let output = Command::new(env!("CARGO_BIN_EXE_shardlift"))
        .args(["store", "bench", "--skip-small", "--state-bytes"])
        .arg((1u64 << 50).to_string())
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("run shardlift");
    assert!(!output.status.success(), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let needed: u64 = stderr
        .split("bytes free, the bench needs ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
        .unwrap_or_else(|| panic!("names the bytes needed: {stderr}"));
    assert!(
        needed >= 6 << 50,
        "six copies of the state at least: {needed}"
    );
    assert!(output.stdout.is_empty(), "no report on a refusal");
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("read_dir").collect();
    assert!(left.is_empty(), "the refused bench wrote {left:?}");
    // The library's error is typed.
    let error = shardlift::lab::bench::run_large(
        &shardlift::lab::bench::LargeBenchOptions {
            state_bytes: 1 << 50,
            chunk_elements: 8192,
            dir: Some(dir.path().to_owned()),
            drop_caches: false,
        },
        &mut RecordedProgress::default(),
    )
    .expect_err("refused");
    assert_eq!(error.kind(), "insufficient-space", "{error}");
}
