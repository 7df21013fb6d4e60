//! `pipeline receipt record` with real runners on a tiny crate: `cargo test -q` and the
//! default output record the same tests; `cargo nextest run` is recorded from its JUnit
//! report; and a JUnit report that is stale, forged (internally consistent but not what
//! the runner printed) or lists a test twice is refused, with no receipt written.
mod receipt_support;

use std::path::PathBuf;

use receipt_support::*;

/// The fixture repository plus a committed toy crate (two lib tests, one of them ignored,
/// and one integration test), a nextest profile `ci` with a JUnit report, and a target
/// directory outside the repository.
fn toy() -> (Fixture, PathBuf) {
    let fx = Fixture::new();
    fx.write(
        "Cargo.toml",
        "[package]\nname = \"toy\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    );
    fx.write(
        "src/lib.rs",
        "#[cfg(test)]\nmod tests {\n    #[test]\n    fn adds() {\n        assert_eq!(1 + 1, 2);\n    }\n\n    #[test]\n    #[ignore]\n    fn slow() {}\n}\n",
    );
    fx.write("tests/it.rs", "#[test]\nfn outside() {}\n");
    fx.write(
        ".config/nextest.toml",
        "[profile.ci.junit]\npath = \"junit.xml\"\n",
    );
    fx.write(".gitignore", "data/\ntarget/\nCargo.lock\n");
    fx.commit("toy crate");
    let target = fx.dir.path().join("target");
    (fx, target)
}

/// Records lane `lane` over `src,tests` running `command` with the toy's target directory.
fn record(
    fx: &Fixture,
    target: &std::path::Path,
    lane: &str,
    extra: &[&str],
    command: &[&str],
) -> (PathBuf, std::process::Output) {
    let out = fx.out(&format!("{lane}.json"));
    let out_text = out.to_string_lossy().into_owned();
    let mut args = vec![
        "receipt",
        "record",
        "--lane",
        lane,
        "--fingerprint-paths",
        "src,tests",
        "--out",
        &out_text,
    ];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(command);
    let target = target.to_string_lossy().into_owned();
    let output = fx.pipeline_env(
        &args,
        &[
            ("CARGO_TARGET_DIR", target.as_str()),
            ("CARGO_TERM_COLOR", "never"),
        ],
    );
    (out, output)
}

fn test_ids(receipt: &serde_json::Value, lane: &str) -> serde_json::Value {
    shard(receipt, lane).expect("shard")["test_ids"].clone()
}

#[test]
fn cargo_test_quiet_and_default_output_record_the_same_tests() {
    let (fx, target) = toy();
    let (quiet, output) = record(&fx, &target, "quiet", &[], &["cargo", "test", "-q"]);
    assert_success(&output);
    assert!(String::from_utf8_lossy(&output.stderr).contains("without -q/--quiet"));
    let (plain, output) = record(&fx, &target, "plain", &[], &["cargo", "test"]);
    assert_success(&output);
    let quiet = read_json(&quiet);
    let plain = read_json(&plain);
    let expected = serde_json::json!([
        "it/tests/it.rs::outside",
        "toy/src/lib.rs::tests::adds",
        "toy/src/lib.rs::tests::slow"
    ]);
    assert_eq!(test_ids(&quiet, "quiet"), expected);
    assert_eq!(test_ids(&plain, "plain"), expected);
    for (receipt, lane) in [(&quiet, "quiet"), (&plain, "plain")] {
        let shard = shard(receipt, lane).expect("shard");
        assert_eq!(
            shard["counts"],
            serde_json::json!({"passed": 2, "failed": 0, "ignored": 1})
        );
        // The command recorded is the one that ran.
        assert_eq!(shard["command"], serde_json::json!(["cargo", "test"]));
    }
}

#[test]
fn quiet_cargo_test_inside_a_shell_is_refused_by_name() {
    let (fx, target) = toy();
    let (out, output) = record(&fx, &target, "shell", &[], &["sh", "-c", "cargo test -q"]);
    assert_refused(&output, "quiet output");
    assert!(!out.exists());
}

#[test]
fn nextest_is_recorded_from_its_junit_report() {
    let (fx, target) = toy();
    // nextest keeps its store under the workspace's `target/nextest`, whatever
    // CARGO_TARGET_DIR says.
    let junit = fx.repo().join("target/nextest/ci/junit.xml");
    let junit_text = junit.to_string_lossy().into_owned();
    for (lane, verbosity) in [
        ("next", &["--cargo-quiet"][..]),
        (
            "next-silent",
            &[
                "--cargo-quiet",
                "--status-level",
                "none",
                "--final-status-level",
                "none",
            ][..],
        ),
    ] {
        let mut command = vec!["cargo", "nextest", "run", "--profile", "ci"];
        command.extend_from_slice(verbosity);
        let (out, output) = record(&fx, &target, lane, &["--junit", &junit_text], &command);
        assert_success(&output);
        let receipt = read_json(&out);
        // nextest names a test `<binary ID> <name>` and does not list the ignored one.
        assert_eq!(
            test_ids(&receipt, lane),
            serde_json::json!(["toy tests::adds", "toy::it outside"])
        );
        assert_eq!(
            shard(&receipt, lane).expect("shard")["counts"],
            serde_json::json!({"passed": 2, "failed": 0, "ignored": 0})
        );
    }
    // Ignored tests run (and are recorded) only when asked for.
    let (out, output) = record(
        &fx,
        &target,
        "next-ignored",
        &["--junit", &junit_text],
        &[
            "cargo",
            "nextest",
            "run",
            "--profile",
            "ci",
            "--run-ignored",
            "only",
        ],
    );
    assert_success(&output);
    assert_eq!(
        test_ids(&read_json(&out), "next-ignored"),
        serde_json::json!(["toy tests::slow"])
    );
}

/// A lane that prints `summary` on stderr as nextest's and writes `xml` as its report.
fn fake_nextest(fx: &Fixture, xml: &str, summary: &str) -> (PathBuf, std::process::Output) {
    let junit = fx.dir.path().join("junit.xml");
    let script = fx.dir.path().join("fake-nextest.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ncat > '{}' <<'EOF'\n{xml}\nEOF\necho '     Summary [   0.010s] {summary}' >&2\n",
            junit.display()
        ),
    )
    .expect("write script");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = fx.out("fake.json");
    let output = fx.pipeline(&[
        "receipt",
        "record",
        "--lane",
        "fake",
        "--fingerprint-paths",
        "core",
        "--out",
        &out.to_string_lossy(),
        "--junit",
        &junit.to_string_lossy(),
        "--",
        &script.to_string_lossy(),
    ]);
    (out, output)
}

const CONSISTENT: &str = r#"<testsuites name="nextest-run" tests="3" skipped="0" failures="0" errors="0">
<testsuite name="demo" tests="3" skipped="0" errors="0" failures="0">
<testcase name="a" classname="demo"/><testcase name="b" classname="demo"/><testcase name="c" classname="demo"/>
</testsuite>
</testsuites>"#;

#[test]
fn a_fake_nextest_lane_with_an_agreeing_report_is_recorded() {
    let fx = Fixture::new();
    let (out, output) = fake_nextest(&fx, CONSISTENT, "3 tests run: 3 passed, 0 skipped");
    assert_success(&output);
    assert_eq!(
        test_ids(&read_json(&out), "fake"),
        serde_json::json!(["demo a", "demo b", "demo c"])
    );
}

#[test]
fn a_forged_but_consistent_junit_report_is_refused() {
    // The report agrees with itself (3 tests, no failure), but the runner printed a failure.
    let fx = Fixture::new();
    let (out, output) = fake_nextest(
        &fx,
        CONSISTENT,
        "3 tests run: 2 passed, 1 failed, 0 skipped",
    );
    assert_refused(
        &output,
        "printed 3 tests run, 2 passed, but the JUnit report lists 3 run, 3 passed",
    );
    assert!(!out.exists());
}

#[test]
fn a_junit_report_listing_a_test_twice_is_refused() {
    let fx = Fixture::new();
    let doubled = CONSISTENT.replace(r#"name="c""#, r#"name="a""#);
    let (out, output) = fake_nextest(&fx, &doubled, "3 tests run: 3 passed, 0 skipped");
    assert_refused(&output, "test ID \"demo a\" appears twice");
    assert!(!out.exists());
}

#[test]
fn a_junit_report_whose_attributes_disagree_is_refused() {
    let fx = Fixture::new();
    let lying = CONSISTENT.replace(
        r#"<testsuite name="demo" tests="3""#,
        r#"<testsuite name="demo" tests="4""#,
    );
    let (out, output) = fake_nextest(&fx, &lying, "3 tests run: 3 passed, 0 skipped");
    assert_refused(&output, "its attributes count 4 tests");
    assert!(!out.exists());
}

#[test]
fn a_stale_junit_report_is_never_used() {
    let fx = Fixture::new();
    let junit = fx.dir.path().join("junit.xml");
    std::fs::write(&junit, CONSISTENT).expect("stale report");
    let out = fx.out("stale.json");
    let output = fx.pipeline(&[
        "receipt",
        "record",
        "--lane",
        "stale",
        "--fingerprint-paths",
        "core",
        "--out",
        &out.to_string_lossy(),
        "--junit",
        &junit.to_string_lossy(),
        "--",
        "true",
    ]);
    assert_refused(&output, "the lane wrote no JUnit report");
    assert!(
        !junit.exists(),
        "the stale report was removed before the lane ran"
    );
    assert!(!out.exists());
}

#[test]
fn a_junit_path_that_cannot_be_cleared_is_refused_before_the_lane_runs() {
    let fx = Fixture::new();
    let junit = fx.dir.path().join("junit.xml");
    std::fs::create_dir(&junit).expect("a directory in the report's place");
    let marker = fx.dir.path().join("ran");
    let out = fx.out("blocked.json");
    let output = fx.pipeline(&[
        "receipt",
        "record",
        "--lane",
        "blocked",
        "--fingerprint-paths",
        "core",
        "--out",
        &out.to_string_lossy(),
        "--junit",
        &junit.to_string_lossy(),
        "--",
        "touch",
        &marker.to_string_lossy(),
    ]);
    assert_refused(&output, "cannot remove the stale JUnit report");
    assert!(!marker.exists(), "the lane never ran");
    assert!(!out.exists());
}
