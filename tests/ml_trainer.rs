//! ML lane: the training engine in-process and in sessions, through the library.
#![cfg(feature = "torch")]
mod common;

use shardlift::core::logical::{Hyperparameters, LogicalState};
use shardlift::core::sampling::SampleStream;
use shardlift::core::step::SplitView;
use shardlift::engine::{evaluate, in_process_step};
use shardlift::supervise::process::ExitOutcome;
use shardlift::trainer::{CoordinatorSession, SessionError, SessionOptions};

fn data() -> shardlift::dataset::FashionMnist {
    shardlift::dataset::ensure_and_load(&common::cache_directory(), None).expect("dataset")
}

#[test]
fn in_process_training_is_repeatable_and_learns() {
    let data = data();
    let run = || {
        let mut state = LogicalState::genesis(Hyperparameters::with_seed(11));
        let mut stream = SampleStream::new(11, data.train.count as u32);
        let mut losses = Vec::new();
        for _ in 0..4 {
            losses.push(
                in_process_step(&mut state, &mut stream, SplitView::from(&data.train))
                    .expect("step")
                    .loss,
            );
        }
        (state, losses)
    };
    let (a, losses) = run();
    let (b, _) = run();
    assert_eq!(a.logical_state_root(), b.logical_state_root());
    assert_eq!(a.ledger_digest(), b.ledger_digest());
    assert!(losses[3] < losses[0], "loss did not fall: {losses:?}");
}

#[test]
fn evaluation_covers_the_whole_test_split_with_an_exact_probe() {
    let data = data();
    let state = LogicalState::genesis(Hyperparameters::with_seed(2));
    let first = evaluate(&state.flat_parameters(), SplitView::from(&data.test)).expect("evaluate");
    let second = evaluate(&state.flat_parameters(), SplitView::from(&data.test)).expect("evaluate");
    assert_eq!(first.total, 10_000);
    assert_eq!(first.logit_probe.len(), 128 * 10 * 4);
    assert_eq!(first, second);
    let other = LogicalState::genesis(Hyperparameters::with_seed(3));
    let third = evaluate(&other.flat_parameters(), SplitView::from(&data.test)).expect("evaluate");
    assert_ne!(first.logit_probe_sha256, third.logit_probe_sha256);
}

#[test]
fn session_matches_in_process_and_kill_mid_step_reaps_every_worker() {
    let data = data();
    let genesis = LogicalState::genesis(Hyperparameters::with_seed(4));
    let mut reference = genesis.clone();
    let mut stream = SampleStream::new(4, data.train.count as u32);
    in_process_step(&mut reference, &mut stream, SplitView::from(&data.train)).expect("step");

    let options = SessionOptions::new(common::shardlift_exe(), 3, "test");
    let mut session = CoordinatorSession::start(options.clone(), genesis.clone()).expect("start");
    let mut stream = SampleStream::new(4, data.train.count as u32);
    session
        .step(&mut stream, SplitView::from(&data.train))
        .expect("step");
    assert_eq!(
        session.state().logical_state_root(),
        reference.logical_state_root()
    );
    let (_, exits) = session.finish().expect("finish");
    assert_eq!(exits.len(), 3);
    assert!(exits.iter().all(|e| e.outcome == ExitOutcome::Code(0)));

    // Now kill rank 2 while a step is in flight.
    let mut session = CoordinatorSession::start(options, genesis).expect("start");
    let victim = session.worker_pid(2).expect("rank 2");
    let killer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::process::Command::new("kill")
            .args(["-KILL", &victim.to_string()])
            .status()
    });
    let mut stream = SampleStream::new(4, data.train.count as u32);
    let mut outcome = Ok(());
    for _ in 0..50 {
        if let Err(error) = session.step(&mut stream, SplitView::from(&data.train)) {
            outcome = Err(error);
            break;
        }
    }
    killer.join().expect("killer thread").expect("kill ran");
    let error = outcome.expect_err("a step must fail once a worker is dead");
    assert!(
        matches!(error, SessionError::Ipc { rank: 2, .. }),
        "unexpected error: {error}"
    );
    assert!(error.to_string().contains("signal 9"), "{error}");
    let exits = session.exits();
    assert_eq!(exits.len(), 3, "every worker is reaped: {exits:?}");
    assert!(exits
        .iter()
        .any(|e| e.rank == Some(2) && e.outcome == ExitOutcome::Signal(9)));
}
