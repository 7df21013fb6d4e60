//! `shardlift crash-test` end to end: a real writer process tree recorded with ptrace,
//! its crash states materialised and checked by a real command.
//!
//! - the recorder's trace of ShardLift's own publisher equals the operations its
//!   file-system seam announces for the same publish (the control: no failing state);
//! - the model catches broken writers (no fsync, remove-before-rename, in-place rewrite)
//!   and passes the correct one; threads and child processes are all recorded;
//! - a rename another thread completes while sync(2) runs stays pending after the sync
//!   returns; a file truncated and rewritten with its own bytes can be left empty;
//! - the report says whether the subsets of pending operations were sampled, and how
//!   many were enumerated of how many, in JSON and in words;
//! - acknowledgements: the exit and each stdout line matching `--ack` are placed in the
//!   trace and the check sees how many a crash follows in `SHARDLIFT_ACKED`; a writer
//!   that acknowledges before its work is durable is caught, the correct one passes;
//! - bad input: a bad `--ack` pattern, a failing writer, a hanging check, a hanging writer, an escaping writer,
//!   unmodelled system calls, a trace over the limits, a used output directory — each a
//!   specific error, exit 1, nothing left running.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

fn writer_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/crash_test/writer.py")
}

fn crash_test(out: &Path, extra: &[&str], writer: &[&str]) -> Output {
    Command::new(SHARDLIFT)
        .arg("crash-test")
        .arg("--out")
        .arg(out)
        .arg("--json")
        .args(extra)
        .arg("--")
        .args(writer)
        .output()
        .expect("run shardlift crash-test")
}

fn report(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON report ({e}); stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs a crash test that must be refused: exit 1, no report; returns its stderr.
fn refused(out: &Path, extra: &[&str], writer: &[&str]) -> String {
    let output = crash_test(out, extra, writer);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(output.stdout.is_empty(), "a refused run prints no report");
    stderr(&output)
}

/// Runs a toy writer mode with its own check; returns the report.
fn toy(mode: &str) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = writer_py();
    let w = writer.to_str().expect("utf-8 path");
    let setup = format!("python3 {w} {mode} 1");
    let check = format!("python3 {w} check");
    let output = crash_test(
        &dir.path().join("out"),
        &["--setup", &setup, "--check", &check],
        &["python3", w, mode, "2"],
    );
    (dir, output)
}

fn root_of(store: &Path, step: u64) -> String {
    let output = Command::new(SHARDLIFT)
        .args(["store", "publish-synthetic", "--json", "--seed", "1"])
        .arg("--step")
        .arg(step.to_string())
        .arg("--store")
        .arg(store)
        .output()
        .expect("publish");
    assert!(output.status.success(), "{}", stderr(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).expect("summary");
    summary["logical_state_root"]
        .as_str()
        .expect("root")
        .to_owned()
}

/// The recorder's trace in the seam's terms: a create and its writes are one
/// `create_write` of their total length; an fsync names the file's path at that time.
fn seam_view(trace: &Value) -> Vec<(String, String, Option<String>, Option<u64>)> {
    let mut out: Vec<(String, String, Option<String>, Option<u64>)> = Vec::new();
    let mut path_of: std::collections::HashMap<u64, String> = Default::default();
    for op in trace["operations"].as_array().expect("operations") {
        let text = |key: &str| op[key].as_str().map(str::to_owned);
        match op["op"].as_str().expect("op") {
            "create" => {
                let path = text("path").expect("path");
                path_of.insert(op["inode"].as_u64().expect("inode"), path.clone());
                out.push(("create_write".into(), path, None, Some(0)));
            }
            "write" => {
                let inode = op["inode"].as_u64().expect("inode");
                let path = path_of
                    .get(&inode)
                    .cloned()
                    .expect("written file was created");
                let last = out
                    .iter_mut()
                    .rev()
                    .find(|(kind, p, _, _)| kind == "create_write" && *p == path)
                    .expect("a create before the write");
                last.3 = Some(last.3.unwrap_or(0) + op["len"].as_u64().expect("len"));
            }
            "fsync" => {
                let inode = op["inode"].as_u64().expect("inode");
                out.push(("fsync_file".into(), path_of[&inode].clone(), None, None));
            }
            "fsync_dir" => out.push(("fsync_dir".into(), text("path").expect("path"), None, None)),
            "mkdir" => out.push(("mkdir".into(), text("path").expect("path"), None, None)),
            "unlink" => out.push(("unlink".into(), text("path").expect("path"), None, None)),
            "rename" => {
                let (from, to) = (text("from").expect("from"), text("to").expect("to"));
                for path in path_of.values_mut() {
                    if *path == from {
                        path.clone_from(&to);
                    }
                }
                let kind = if op["noreplace"] == Value::Bool(true) {
                    "rename"
                } else {
                    "rename_replace"
                };
                out.push((kind.into(), from, Some(to), None));
            }
            other => panic!("the publisher is not expected to {other}"),
        }
    }
    out
}

#[test]
fn recorder_trace_of_the_publisher_equals_its_seam_trace_and_the_control_passes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let old_root = root_of(&dir.path().join("roots"), 0);
    let new_root = root_of(&dir.path().join("roots"), 1);
    let out = dir.path().join("out");
    let setup = format!("{SHARDLIFT} store publish-synthetic --store . --seed 1 --step 0");
    let check = format!(
        "{SHARDLIFT} store recover --store . --expect-root {old_root} --expect-root {new_root}"
    );
    let output = crash_test(
        &out,
        &["--unread", "staging", "--setup", &setup, "--check", &check],
        &[
            SHARDLIFT,
            "store",
            "publish-synthetic",
            "--store",
            ".",
            "--seed",
            "1",
            "--step",
            "1",
            "--json",
            "--trace-operations",
        ],
    );
    let report = report(&output);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(report["failing_states"], 0);
    assert!(report["states"].as_u64().expect("states") > 10, "{report}");
    assert_eq!(report["exhaustive"], true);

    let trace: Value =
        serde_json::from_slice(&std::fs::read(out.join("trace.json")).expect("trace.json"))
            .expect("trace JSON");
    let writer: Value =
        serde_json::from_slice(&std::fs::read(out.join("writer.stdout")).expect("stdout"))
            .expect("writer JSON");
    let seam: Vec<(String, String, Option<String>, Option<u64>)> = writer["operation_trace"]
        .as_array()
        .expect("operation_trace")
        .iter()
        // `..` is the store's parent: outside the scratch directory the recorder images.
        .filter(|event| event["path"] != "..")
        .map(|event| {
            (
                event["kind"].as_str().expect("kind").to_owned(),
                event["path"].as_str().expect("path").to_owned(),
                event["to"].as_str().map(str::to_owned),
                event["bytes"].as_u64(),
            )
        })
        .collect();
    let recorded = seam_view(&trace);
    assert!(seam.len() > 50, "a real publish has many operations");
    assert_eq!(recorded, seam);
}

#[test]
fn the_correct_writer_passes_and_each_broken_writer_is_caught() {
    let (_dir, output) = toy("atomic");
    assert!(output.status.success(), "{}", stderr(&output));
    let atomic = report(&output);
    assert_eq!(atomic["failing_states"], 0);
    assert!(atomic["states"].as_u64().expect("states") >= 4);

    for (mode, message) in [
        ("no-fsync", "damaged"),
        ("remove-first", "no checkpoint"),
        ("in-place", "damaged"),
    ] {
        let (_dir, output) = toy(mode);
        assert_eq!(output.status.code(), Some(1), "{mode}: {}", stderr(&output));
        let report = report(&output);
        let failing = report["failing_states"].as_u64().expect("failing");
        assert!(failing > 0, "{mode} must be caught");
        assert_eq!(
            report["failures"].as_array().expect("failures").len() as u64,
            failing
        );
        let classes = report["failure_classes"].as_array().expect("classes");
        assert!(
            classes
                .iter()
                .any(|c| c["message"].as_str().unwrap_or("").contains(message)),
            "{mode}: {classes:?}"
        );
    }
}

/// Runs a toy writer mode under `check-acked`, with `extra` arguments.
fn acked(mode: &str, extra: &[&str]) -> (tempfile::TempDir, Output) {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = writer_py();
    let w = writer.to_str().expect("utf-8 path");
    let setup = format!("python3 {w} atomic 1");
    let check = format!("python3 {w} check-acked");
    let mut args = vec!["--setup", setup.as_str(), "--check", check.as_str()];
    args.extend_from_slice(extra);
    let output = crash_test(&dir.path().join("out"), &args, &["python3", w, mode, "2"]);
    (dir, output)
}

#[test]
fn an_acknowledged_checkpoint_must_survive_and_an_early_acknowledgement_is_caught() {
    let ack = ["--ack", "^committed [0-9]+$"];
    let (dir, output) = acked("ack", &ack);
    assert!(output.status.success(), "{}", stderr(&output));
    let correct = report(&output);
    assert_eq!(correct["failing_states"], 0);
    let acks = correct["acknowledgements"].as_array().expect("acks");
    assert_eq!(acks.len(), 2, "the line and the exit: {acks:?}");
    assert_eq!(acks[0]["line"], "committed 2");
    assert_eq!(acks[1]["line"], "<exit>");
    let line_at = acks[0]["after_operations"].as_u64().expect("placed");
    let exit_at = acks[1]["after_operations"].as_u64().expect("placed");
    // The line comes after the directory fsync and before the create that follows it.
    assert_eq!(exit_at, correct["trace_operations"].as_u64().expect("ops"));
    assert_eq!(line_at + 1, exit_at, "{acks:?}");
    let trace: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out/trace.json")).expect("trace"))
            .expect("trace JSON");
    let ops = trace["operations"].as_array().expect("operations");
    assert_eq!(ops[line_at as usize - 1]["op"], "fsync_dir");
    assert_eq!(
        trace["acknowledged_at"],
        serde_json::json!([line_at, exit_at])
    );

    // Acknowledged before the fsyncs: a crash after the line may keep the old checkpoint.
    let (_dir, output) = acked("ack-early", &ack);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let early = report(&output);
    let failures = early["failures"].as_array().expect("failures");
    assert!(
        !failures.is_empty(),
        "the early acknowledgement must be caught"
    );
    // The old checkpoint, whole, is refused only because of the acknowledgement.
    for failure in failures {
        assert_eq!(failure["acknowledged"], 1, "{failure}");
        assert!(
            failure["output_tail"]
                .as_str()
                .unwrap_or("")
                .contains("acknowledged checkpoint lost"),
            "{failure}"
        );
    }

    // Without `--ack` only the exit acknowledges, and by then everything is durable.
    let (_dir, output) = acked("ack-early", &[]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        report(&output)["acknowledgements"].as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn a_bad_ack_pattern_is_refused_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let text = refused(
        &out,
        &["--check", "true", "--ack", "(unclosed"],
        &["sh", "-c", "echo x > ckpt"],
    );
    assert!(text.contains("--ack pattern `(unclosed`"), "{text}");
    assert!(!out.exists(), "nothing was created");
}

#[test]
fn threads_and_child_processes_are_recorded() {
    let (dir, output) = toy("threads");
    let report = report(&output);
    assert!(report["writer"]["tasks"].as_u64().expect("tasks") >= 3);
    let trace = std::fs::read_to_string(dir.path().join("out/trace.json")).expect("trace");
    for part in ["part-a.tmp", "part-b.tmp", "part-c.tmp"] {
        assert!(
            trace.contains(&format!("\"path\":\"{part}\"")),
            "{part} missing"
        );
    }
    // Three parts renamed one by one can persist from different checkpoints.
    assert_eq!(output.status.code(), Some(1));
}

#[test]
fn a_failing_writer_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = refused(
        &dir.path().join("out"),
        &["--check", "true"],
        &["sh", "-c", "echo partial > ckpt; exit 3"],
    );
    assert!(
        text.contains("the writer exited with exit code 3"),
        "{text}"
    );
}

/// Whether a process with the pid in `file` is still running (a zombie waiting for
/// init to reap it is not).
fn alive(file: &Path) -> bool {
    let pid = std::fs::read_to_string(file).expect("pid file");
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().next());
    !matches!(state, Some("Z") | Some("X") | None)
}

#[test]
fn a_hanging_check_is_killed_with_its_children_and_reported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("check.pid");
    let check = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
    let output = crash_test(
        &dir.path().join("out"),
        &[
            "--check",
            &check,
            "--check-timeout-ms",
            "300",
            "--max-states",
            "1",
        ],
        &["sh", "-c", "echo data > ckpt"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = report(&output);
    assert_eq!(report["failing_states"], 1);
    assert_eq!(
        report["failure_classes"][0]["message"],
        "timed out after 300 ms"
    );
    assert!(!alive(&pid_file), "the check's child outlived it");
}

#[test]
fn a_hanging_writer_is_killed_with_its_whole_tree() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pid_file = dir.path().join("writer.pid");
    let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
    // The pid file lies outside the scratch directory: the escape is caught first.
    let text = refused(
        &dir.path().join("out"),
        &["--check", "true"],
        &["sh", "-c", &script],
    );
    assert!(text.contains("escaped its scratch directory"), "{text}");
    assert!(!pid_file.exists(), "the escaping write must not have run");

    let text = refused(
        &dir.path().join("out2"),
        &["--check", "true", "--writer-timeout-ms", "3000"],
        &["sh", "-c", "sleep 600 & echo $! > sleeper.pid; wait"],
    );
    assert!(text.contains("ran longer than 3000 ms"), "{text}");
    assert!(!alive(&dir.path().join("out2/scratch/sleeper.pid")));
}

#[test]
fn an_escaping_writer_is_killed_before_the_write_lands() {
    let dir = tempfile::tempdir().expect("tempdir");
    let outside = dir.path().join("outside.txt");
    let script = format!("echo inside > ckpt; echo escaped > {}", outside.display());
    let text = refused(
        &dir.path().join("out"),
        &["--check", "true"],
        &["sh", "-c", &script],
    );
    assert!(text.contains("escaped its scratch directory"), "{text}");
    assert!(text.contains("outside.txt"), "{text}");
    assert!(!outside.exists());

    // A rename out of the scratch directory is an escape too.
    let target = dir.path().join("moved");
    let script = format!("echo x > a; mv a {}", target.display());
    let text = refused(
        &dir.path().join("out2"),
        &["--check", "true"],
        &["sh", "-c", &script],
    );
    assert!(text.contains("escaped its scratch directory"), "{text}");
    assert!(!target.exists());
}

#[test]
fn unmodelled_system_calls_are_refused_by_name() {
    let cases = [
        (
            "import mmap, os\nfd = os.open('m', os.O_RDWR | os.O_CREAT)\nos.ftruncate(fd, 4096)\nmmap.mmap(fd, 4096)[0] = 1",
            "mmap",
        ),
        (
            "import os\nos.open('d', os.O_WRONLY | os.O_CREAT | os.O_DIRECT)",
            "O_DIRECT",
        ),
        ("import os\nos.symlink('a', 'b')", "symlink"),
    ];
    for (program, name) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let text = refused(
            &dir.path().join("out"),
            &["--check", "true"],
            &["python3", "-c", program],
        );
        assert!(
            text.contains("does not model") && text.contains(name),
            "{name}: {text}"
        );
    }
}

#[test]
fn a_trace_over_the_limits_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = ["sh", "-c", "for i in 1 2 3 4 5; do echo $i > f$i; done"];
    let text = refused(
        &dir.path().join("out"),
        &["--check", "true", "--max-operations", "3"],
        &writer,
    );
    assert!(
        text.contains("over the limits: recorded operations (limit 3)"),
        "{text}"
    );
    let text = refused(
        &dir.path().join("out2"),
        &["--check", "true", "--max-distinct-states", "2"],
        &writer,
    );
    assert!(text.contains("more than 2 distinct crash states"), "{text}");
}

#[test]
fn a_used_output_directory_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("mkdir");
    std::fs::write(out.join("keep.txt"), b"mine").expect("write");
    let text = refused(&out, &["--check", "true"], &["true"]);
    assert!(text.contains("exists and is not empty"), "{text}");
    assert_eq!(std::fs::read(out.join("keep.txt")).expect("kept"), b"mine");
    assert_eq!(std::fs::read_dir(&out).expect("list").count(), 1);
}

#[test]
fn a_failing_setup_and_an_unsupported_starting_image_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = refused(
        &dir.path().join("out"),
        &["--setup", "exit 4", "--check", "true"],
        &["true"],
    );
    assert!(
        text.contains("the setup command `exit 4` failed (exit code 4)"),
        "{text}"
    );

    let text = refused(
        &dir.path().join("out2"),
        &["--setup", "ln -s elsewhere link", "--check", "true"],
        &["true"],
    );
    assert!(
        text.contains("neither a regular file nor a directory"),
        "{text}"
    );
}

/// A two-thread writer whose rename completes while its other thread is inside sync(2)
/// (tests/crash_test/writer.py `overlap`): the sync was entered before the rename, so it
/// does not make it durable, and a crash after the sync returned can still lose it.
#[test]
fn a_rename_completed_while_another_thread_syncs_stays_pending() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let writer = writer_py();
    let w = writer.to_str().expect("utf-8 path");
    let check = format!("python3 {w} check-overlap");
    let output = crash_test(&out, &["--check", &check], &["python3", w, "overlap", "20"]);
    let stdout = std::fs::read_to_string(out.join("writer.stdout")).unwrap_or_default();
    assert!(
        stdout.contains("overlapped the sync"),
        "the writer could not make its rename overlap the sync: {stdout} {}",
        stderr(&output)
    );
    let report = report(&output);
    assert!(report["writer"]["tasks"].as_u64().expect("tasks") >= 2);

    let trace: Value =
        serde_json::from_slice(&std::fs::read(out.join("trace.json")).expect("trace.json"))
            .expect("trace JSON");
    let operations = trace["operations"].as_array().expect("operations");
    let (sync_seq, entered_after) = operations
        .iter()
        .rev()
        .find(|op| op["op"] == "sync_all")
        .map(|op| {
            (
                op["seq"].as_u64().expect("seq"),
                op["entered_after"].as_u64().expect("entered_after"),
            )
        })
        .expect("a recorded sync");
    let rename = operations
        .iter()
        .find(|op| {
            op["op"] == "rename" && {
                let seq = op["seq"].as_u64().expect("seq");
                entered_after <= seq && seq < sync_seq
            }
        })
        .unwrap_or_else(|| panic!("no rename between the sync's entry and exit: {trace}"));
    let renamed = format!(
        "#{} rename {} -> {}",
        rename["seq"],
        rename["from"].as_str().expect("from"),
        rename["to"].as_str().expect("to")
    );

    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let failures = report["failures"].as_array().expect("failures");
    let lost_after_sync = failures.iter().find(|failure| {
        failure["crash_point"].as_u64().expect("crash_point") > sync_seq
            && failure["dropped_operations"]
                .as_array()
                .expect("dropped")
                .iter()
                .any(|dropped| dropped.as_str() == Some(renamed.as_str()))
    });
    assert!(
        lost_after_sync.is_some(),
        "no state after the sync returned lacks {renamed}: {report}"
    );
    let classes = report["failure_classes"].as_array().expect("classes");
    assert!(
        classes.iter().any(|c| c["message"]
            .as_str()
            .unwrap_or("")
            .contains("the sync did not cover it")),
        "{classes:?}"
    );
}

/// O_TRUNC and a rewrite of the very same bytes, never fsynced: the truncation may
/// persist without the rewrite even once the rewrite has completed (a state holding the
/// `rewritten` the writer creates next; a crash between truncation and write empties the
/// file anyway).
#[test]
fn a_file_truncated_and_rewritten_with_the_same_bytes_can_be_left_empty() {
    let dir = tempfile::tempdir().expect("tempdir");
    let writer = writer_py();
    let w = writer.to_str().expect("utf-8 path");
    let setup = format!("python3 {w} atomic 1");
    let check = format!("python3 {w} check");
    let output = crash_test(
        &dir.path().join("out"),
        &["--setup", &setup, "--check", &check],
        &["python3", w, "rewrite-same", "1"],
    );
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let report = report(&output);
    let failures = report["failures"].as_array().expect("failures");
    assert!(
        failures.iter().any(|failure| {
            let persisted = &failure["persisted"];
            persisted["ckpt"]["len"] == 0 && persisted.get("rewritten").is_some()
        }),
        "no state after the rewrite with an empty ckpt: {report}"
    );
    let classes = report["failure_classes"].as_array().expect("classes");
    assert!(
        classes
            .iter()
            .any(|c| c["message"] == "ckpt: damaged (0 bytes)"),
        "{classes:?}"
    );
}

/// A writer that creates and removes `f` `rounds` times, never fsyncing its directory:
/// `2 * rounds` entry operations pending at the end, but only two distinct states.
fn churn(rounds: usize) -> [String; 3] {
    [
        "python3".to_owned(),
        "-c".to_owned(),
        format!(
            "import os\nfor _ in range({rounds}):\n    open('f', 'w').close()\n    os.unlink('f')"
        ),
    ]
}

#[test]
fn the_report_says_whether_subsets_were_sampled_and_how_many_were_enumerated() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Two rounds: at most four pending operations, every subset enumerated.
    let small = churn(2);
    let small: Vec<&str> = small.iter().map(String::as_str).collect();
    let output = crash_test(&dir.path().join("small"), &["--check", "true"], &small);
    assert!(output.status.success(), "{}", stderr(&output));
    let report_small = report(&output);
    assert_eq!(report_small["trace_operations"], 4);
    assert_eq!(report_small["sampled"], false);
    // 2^0 + 2^1 + 2^2 + 2^3 + 2^4 subsets over the five crash points.
    assert_eq!(report_small["subsets_total"], 31);
    assert_eq!(report_small["subsets_checked"], 31);
    assert_eq!(report_small["exhaustive"], true);

    // Six rounds: twelve pending at the end, more than are enumerated in full, although
    // every distinct state is still checked.
    let large = churn(6);
    let large: Vec<&str> = large.iter().map(String::as_str).collect();
    let output = crash_test(&dir.path().join("large"), &["--check", "true"], &large);
    assert!(output.status.success(), "{}", stderr(&output));
    let report_large = report(&output);
    assert_eq!(report_large["trace_operations"], 12);
    assert_eq!(report_large["states"], report_large["states_total"]);
    assert_eq!(report_large["sampled"], true);
    assert_eq!(report_large["subsets_total"], (1u64 << 13) - 1);
    let checked = report_large["subsets_checked"].as_u64().expect("checked");
    assert!(
        (1u64 << 11) - 1 < checked && checked < (1u64 << 13) - 1,
        "{checked}"
    );
    assert_eq!(report_large["exhaustive"], false);

    // The words say the same.
    let output = Command::new(SHARDLIFT)
        .arg("crash-test")
        .arg("--out")
        .arg(dir.path().join("words"))
        .args(["--check", "true", "--"])
        .args(&large)
        .output()
        .expect("run shardlift crash-test");
    assert!(output.status.success(), "{}", stderr(&output));
    let words = String::from_utf8_lossy(&output.stdout);
    assert!(
        words.contains(&format!(
            "{checked} of 8191 subsets of pending entry operations enumerated (sampled)"
        )) && words.contains("not exhaustive"),
        "{words}"
    );
}
