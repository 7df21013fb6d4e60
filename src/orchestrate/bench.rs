//! `shardlift bench train` and `bench demo`: wall times as ratios to a baseline measured
//! in the same run (figures, never assertions).
use std::path::Path;
use std::time::Instant;

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Kind, Reduction, Tensor};

use crate::core::logical::{Hyperparameters, CLASSES, HIDDEN_UNITS, INPUT_FEATURES};
use crate::core::step::SplitView;
use crate::dataset::FashionMnist;
use crate::engine;
use crate::orchestrate::demo::{self, DemoError};
use crate::trainer::{run_steps, EngineKind, Placement, TrainError};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    #[error(transparent)]
    Train(#[from] TrainError),
    #[error(transparent)]
    Demo(#[from] DemoError),
    #[error("cannot create a scratch directory: {0}")]
    Scratch(#[source] std::io::Error),
}

fn placement(shardlift_exe: &Path, workers: Option<u32>) -> Placement {
    match workers {
        None => Placement::InProcess,
        Some(workers) => Placement::Workers {
            shardlift_exe: shardlift_exe.to_owned(),
            workers,
        },
    }
}

/// Times `steps` steps after one warm-up; milliseconds per step.
fn time_steps(
    shardlift_exe: &Path,
    workers: Option<u32>,
    steps: u64,
    data: &FashionMnist,
) -> Result<f64, BenchError> {
    let placement = placement(shardlift_exe, workers);
    let train = SplitView::from(&data.train);
    let started = Instant::now();
    run_steps(EngineKind::Tch, &placement, 1, 0, train, false)?;
    let warm = started.elapsed();
    let started = Instant::now();
    run_steps(EngineKind::Tch, &placement, steps + 1, 0, train, false)?;
    let total = started.elapsed().saturating_sub(warm);
    Ok(total.as_secs_f64() * 1000.0 / steps as f64)
}

/// Milliseconds per step of the same MLP trained the ordinary way: one tch process, one
/// thread, tch's AdamW, the whole global batch at once.
fn plain_tch_step_ms(data: &FashionMnist, steps: u64) -> Result<f64, BenchError> {
    engine::pin_single_thread();
    let h = Hyperparameters::with_seed(0);
    let batch = h.global_batch_size() as usize;
    let store = nn::VarStore::new(tch::Device::Cpu);
    let root = store.root();
    let model = nn::seq()
        .add(nn::linear(
            &root / "fc1",
            INPUT_FEATURES as i64,
            HIDDEN_UNITS as i64,
            Default::default(),
        ))
        .add_fn(|x| x.relu())
        .add(nn::linear(
            &root / "fc2",
            HIDDEN_UNITS as i64,
            CLASSES as i64,
            Default::default(),
        ));
    let mut optimizer = nn::AdamW::default().build(&store, f64::from(h.learning_rate))?;
    let pixels: Vec<f32> = data.train.images[..batch * INPUT_FEATURES]
        .iter()
        .map(|&p| f32::from(p) / 255.0)
        .collect();
    let input = Tensor::from_slice(&pixels).view([batch as i64, INPUT_FEATURES as i64]);
    let targets = Tensor::from_slice(&data.train.labels[..batch]).f_to_kind(Kind::Int64)?;
    let mut step = || -> Result<(), BenchError> {
        let loss = model.forward(&input).f_cross_entropy_loss::<Tensor>(
            &targets,
            None,
            Reduction::Mean,
            -100,
            0.0,
        )?;
        optimizer.backward_step(&loss);
        Ok(())
    };
    step()?;
    let started = Instant::now();
    for _ in 0..steps {
        step()?;
    }
    Ok(started.elapsed().as_secs_f64() * 1000.0 / steps as f64)
}

/// Step time for in-process, W1, W3 and W4 against a plain tch step; a JSON report.
pub fn train(
    shardlift_exe: &Path,
    data: &FashionMnist,
    steps: u64,
) -> Result<serde_json::Value, BenchError> {
    eprintln!("bench: plain tch baseline ({steps} steps)");
    let baseline_ms = plain_tch_step_ms(data, steps)?;
    let mut rows = Vec::new();
    for (label, workers) in [
        ("in-process", None),
        ("W1", Some(1)),
        ("W3", Some(3)),
        ("W4", Some(4)),
    ] {
        eprintln!("bench: {label} ({steps} steps)");
        let step_ms = time_steps(shardlift_exe, workers, steps, data)?;
        rows.push(serde_json::json!({
            "configuration": label,
            "step_ms": step_ms,
            "ratio_to_plain_tch": step_ms / baseline_ms,
        }));
    }
    let report = serde_json::json!({
        "benchmark": "train-step",
        "steps_timed": steps,
        "plain_tch_step_ms": baseline_ms,
        "configurations": rows,
        "note": "wall-clock on this machine; workers include IPC and per-step parameter broadcast",
    });
    Ok(report)
}

/// Steps a killer-demo run trains in all (genesis 1, reference 2, crash 1, recovered 1,
/// resharded 1).
const DEMO_TRAINING_STEPS: u64 = 6;

/// Wall time of a killer-demo run per barrier against uninterrupted training; a JSON report.
pub fn demo(
    shardlift_exe: &Path,
    data: &FashionMnist,
    cache_directory: &Path,
    source_directory: Option<&Path>,
) -> Result<serde_json::Value, BenchError> {
    eprintln!("bench: baseline, {DEMO_TRAINING_STEPS} uninterrupted W4 steps without checkpoints");
    let started = Instant::now();
    run_steps(
        EngineKind::Tch,
        &placement(shardlift_exe, Some(4)),
        DEMO_TRAINING_STEPS,
        0,
        SplitView::from(&data.train),
        false,
    )?;
    let baseline_ms = started.elapsed().as_secs_f64() * 1000.0;
    let scratch = tempfile::tempdir().map_err(BenchError::Scratch)?;
    let mut rows = Vec::new();
    for barrier in demo::DEMO_BARRIERS {
        let options = demo::DemoOptions {
            shardlift_exe: shardlift_exe.to_owned(),
            run_directory: scratch.path().join(barrier.name()),
            cache_directory: cache_directory.to_owned(),
            source_directory: source_directory.map(ToOwned::to_owned),
            barrier,
            seed: 0,
            source: None,
        };
        let binding = demo::preflight(&options)?;
        let record = demo::run(&options, binding)?;
        rows.push(serde_json::json!({
            "barrier": barrier.name(),
            "status": record.status,
            "wall_time_ms": record.wall_time_ms,
            "ratio_to_uninterrupted_training": record.wall_time_ms as f64 / baseline_ms,
        }));
    }
    let report = serde_json::json!({
        "benchmark": "killer-demo",
        "uninterrupted_w4_training_ms": baseline_ms,
        "training_steps": DEMO_TRAINING_STEPS,
        "runs": rows,
        "note": "wall-clock on this machine; the demo adds five process groups, four publications, two recoveries, a reshard and two full evaluations",
    });
    Ok(report)
}
