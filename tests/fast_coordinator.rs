//! Fast lane: coordinator sessions over real `shardlift worker` processes running the
//! torch-free fake engine, on a small synthetic split (no libtorch, no dataset download).
use std::path::PathBuf;
use std::process::Command;

use shardlift::core::logical::{Hyperparameters, LogicalState};
use shardlift::core::sampling::SampleStream;
use shardlift::core::step::{SplitView, IMAGE_BYTES};
use shardlift::supervise::process::{
    glibc_tunables_of, ExitOutcome, Role, MALLOC_TUNABLES_VARIABLE, MAX_ENVIRON_BYTES,
    WORKER_MALLOC_TUNABLES,
};
use shardlift::trainer::{
    run_steps, CoordinatorSession, EngineKind, Placement, SessionError, SessionOptions,
};

const SAMPLES: usize = 400;
const STEPS: u64 = 3;

fn shardlift_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shardlift"))
}

/// 400 samples of deterministic bytes: every pixel and label depends on its position.
struct SyntheticSplit {
    images: Vec<u8>,
    labels: Vec<u8>,
}

impl SyntheticSplit {
    fn new() -> Self {
        let images = (0..SAMPLES * IMAGE_BYTES)
            .map(|i| ((i * 31 + i / IMAGE_BYTES * 7) % 256) as u8)
            .collect();
        let labels = (0..SAMPLES).map(|i| (i * 7 % 10) as u8).collect();
        SyntheticSplit { images, labels }
    }

    fn view(&self) -> SplitView<'_> {
        SplitView {
            images: &self.images,
            labels: &self.labels,
            count: SAMPLES,
        }
    }
}

/// (logical_state_root, ledger_digest, loss bits) after `STEPS` steps.
fn digests(placement: &Placement, seed: u64, split: &SyntheticSplit) -> (String, String, u32) {
    let run = run_steps(
        EngineKind::Fake,
        placement,
        STEPS,
        seed,
        split.view(),
        false,
    )
    .unwrap_or_else(|error| panic!("{placement:?}: {error}"));
    assert_eq!(run.state.step(), STEPS);
    let expected_exits = match placement {
        Placement::InProcess => 0,
        Placement::Workers { workers, .. } => *workers as usize,
    };
    assert_eq!(run.worker_exits, expected_exits, "{placement:?}");
    (
        run.state.logical_state_root().to_hex(),
        run.state.ledger_digest().to_hex(),
        run.loss.to_bits(),
    )
}

fn workers(workers: u32) -> Placement {
    Placement::Workers {
        shardlift_exe: shardlift_exe(),
        workers,
    }
}

#[test]
fn every_worker_count_and_in_process_agree_bitwise() {
    let split = SyntheticSplit::new();
    let in_process = digests(&Placement::InProcess, 0, &split);
    for count in [1, 2, 3, 4, 6, 12] {
        assert_eq!(
            digests(&workers(count), 0, &split),
            in_process,
            "W{count} differs from in-process"
        );
    }
}

#[test]
fn the_seed_decides_the_result() {
    let split = SyntheticSplit::new();
    let a = digests(&workers(2), 0, &split);
    let b = digests(&workers(2), 1, &split);
    let c = digests(&Placement::InProcess, 1, &split);
    assert_ne!(a.0, b.0);
    assert_ne!(a.1, b.1);
    assert_eq!(b, c);
}

fn process_is_gone(pid: u32) -> bool {
    !std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn a_sigkilled_worker_fails_the_session_naming_its_rank_and_every_worker_is_reaped() {
    let split = SyntheticSplit::new();
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(4));
    let options = SessionOptions::new(shardlift_exe(), 3, "test").with_engine(EngineKind::Fake);
    let mut session = CoordinatorSession::start(options, genesis).expect("start");
    let pids: Vec<u32> = (0..3)
        .map(|rank| session.worker_pid(rank).expect("a pid per rank"))
        .collect();
    let mut stream = SampleStream::new(4, SAMPLES as u32);
    session.step(&mut stream, split.view()).expect("first step");

    let status = Command::new("kill")
        .args(["-KILL", &pids[2].to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
    let mut outcome = Ok(());
    for _ in 0..5 {
        if let Err(error) = session.step(&mut stream, split.view()) {
            outcome = Err(error);
            break;
        }
    }
    let error = outcome.expect_err("a step must fail once a worker is dead");
    assert!(
        matches!(error, SessionError::Ipc { rank: 2, .. }),
        "unexpected error: {error}"
    );
    assert!(error.to_string().contains("worker rank 2"), "{error}");
    assert!(error.to_string().contains("signal 9"), "{error}");
    let exits = session.exits();
    assert_eq!(exits.len(), 3, "every worker is reaped: {exits:?}");
    assert!(exits.iter().all(|e| e.role == Role::Worker));
    assert!(exits
        .iter()
        .any(|e| e.rank == Some(2) && e.outcome == ExitOutcome::Signal(9)));
    for pid in pids {
        assert!(process_is_gone(pid), "worker {pid} is still there");
    }
}

#[test]
fn a_clean_session_reaps_every_worker_with_exit_zero() {
    let split = SyntheticSplit::new();
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(5));
    let options = SessionOptions::new(shardlift_exe(), 4, "test").with_engine(EngineKind::Fake);
    let mut session = CoordinatorSession::start(options, genesis).expect("start");
    let pids: Vec<u32> = (0..4)
        .map(|rank| session.worker_pid(rank).expect("a pid per rank"))
        .collect();
    let mut stream = SampleStream::new(5, SAMPLES as u32);
    session.step(&mut stream, split.view()).expect("step");
    let (state, exits) = session.finish().expect("finish");
    assert_eq!(state.step(), 1);
    assert_eq!(exits.len(), 4);
    assert!(exits
        .iter()
        .all(|e| e.role == Role::Worker && e.outcome == ExitOutcome::Code(0)));
    for pid in pids {
        assert!(process_is_gone(pid), "worker {pid} is still there");
    }
}

#[test]
fn every_worker_runs_with_the_allocator_settings_unless_the_coordinator_has_its_own() {
    let split = SyntheticSplit::new();
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(5));
    let options = SessionOptions::new(shardlift_exe(), 3, "test").with_engine(EngineKind::Fake);
    let mut session = CoordinatorSession::start(options, genesis).expect("start");
    let expected = match std::env::var(MALLOC_TUNABLES_VARIABLE) {
        Ok(inherited) => inherited,
        Err(_) => WORKER_MALLOC_TUNABLES.to_owned(),
    };
    for rank in 0..3 {
        let pid = session.worker_pid(rank).expect("a pid per rank");
        let observed = glibc_tunables_of(pid)
            .unwrap_or_else(|e| panic!("reading worker {rank}'s environment: {e}"));
        assert_eq!(observed.as_deref(), Some(expected.as_str()), "rank {rank}");
    }
    let mut stream = SampleStream::new(5, SAMPLES as u32);
    session.step(&mut stream, split.view()).expect("step");
    session.finish().expect("finish");
}

#[test]
fn a_worker_that_cannot_start_fails_the_session_before_any_step() {
    // Not shardlift: exits at once, so no worker ever connects.
    let options = SessionOptions::new("/bin/false", 2, "test").with_engine(EngineKind::Fake);
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(1));
    let error = CoordinatorSession::start(options, genesis).expect_err("must fail");
    assert!(matches!(error, SessionError::Accept(_)), "{error}");
    assert!(
        error.to_string().contains("exited before connecting"),
        "{error}"
    );
}

#[cfg(not(feature = "torch"))]
#[test]
fn the_tch_engine_in_a_torch_free_build_is_a_clear_error() {
    let output = Command::new(shardlift_exe())
        .args(["worker", "--socket", "/nonexistent/socket", "--rank", "0"])
        .args(["--engine", "tch"])
        .output()
        .expect("run shardlift worker");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("built without the `torch` feature"),
        "stderr: {stderr}"
    );
}

#[cfg(not(feature = "torch"))]
#[test]
fn train_with_the_tch_engine_in_a_torch_free_build_fails_before_loading_data() {
    let cache = tempfile::tempdir().expect("tempdir");
    let output = Command::new(shardlift_exe())
        .args(["train", "--in-process", "--steps", "1", "--engine", "tch"])
        .arg("--cache-directory")
        .arg(cache.path().join("never-created"))
        .output()
        .expect("run shardlift train");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("built without the `torch` feature"),
        "stderr: {stderr}"
    );
    assert!(
        !cache.path().join("never-created").exists(),
        "no dataset work before the refusal"
    );
}

#[test]
fn an_environment_over_the_cap_is_refused_not_read() {
    // Nine variables of 120 KiB (each under the kernel's 128 KiB per string): over 1 MiB.
    let mut command = Command::new("/bin/sleep");
    command
        .arg("30")
        .env(MALLOC_TUNABLES_VARIABLE, WORKER_MALLOC_TUNABLES);
    for index in 0..9 {
        command.env(format!("SHARDLIFT_PAD_{index}"), "x".repeat(120 << 10));
    }
    let mut child = command.spawn().expect("spawn sleep");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // The exec has replaced the image once /proc/PID/exe is sleep, and the kernel has
    // laid out its environment once /proc/PID/environ is not empty.
    while (std::fs::read_link(format!("/proc/{}/exe", child.id()))
        .map_or(true, |exe| !exe.ends_with("sleep"))
        || std::fs::read(format!("/proc/{}/environ", child.id())).map_or(true, |b| b.is_empty()))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let result = glibc_tunables_of(child.id());
    child.kill().expect("kill");
    child.wait().expect("reap");
    let error = result.expect_err("an environment over the cap");
    assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
    assert!(
        error.to_string().contains(&MAX_ENVIRON_BYTES.to_string()),
        "{error}"
    );
}
