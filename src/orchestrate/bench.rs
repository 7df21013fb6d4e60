//! `shardlift bench train` and `bench demo`: wall times as ratios to a baseline measured
//! in the same run (figures, never assertions).
use std::path::Path;
use std::time::{Duration, Instant};

use tch::nn::{self, Module, OptimizerConfig};
use tch::{Kind, Reduction, Tensor};

use crate::core::logical::{Hyperparameters, LogicalState, CLASSES, HIDDEN_UNITS, INPUT_FEATURES};
use crate::core::progress::Progress;
use crate::core::sampling::SampleStream;
use crate::core::step::{self, GradientEngine, GradientRequest, MicroBatch, SplitView, StepError};
use crate::dataset::FashionMnist;
use crate::engine;
use crate::orchestrate::demo::{self, DemoError};
use crate::supervise::process::{glibc_tunables_of, MALLOC_TUNABLES_VARIABLE};
use crate::trainer::{
    run_steps, CoordinatorSession, EngineKind, Placement, SessionOptions, StepTimings, TrainError,
};

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The plain-torch baseline failed.
    #[error("torch: {0}")]
    Torch(#[from] tch::TchError),
    /// A measured training run failed.
    #[error(transparent)]
    Train(#[from] TrainError),
    /// An in-process step failed.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The measured demo run failed.
    #[error(transparent)]
    Demo(#[from] DemoError),
    /// A worker's environment could not be read.
    #[error("cannot read a worker's environment: {0}")]
    Environment(#[source] std::io::Error),
    /// A scratch directory could not be created.
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

/// How `bench train` runs: untimed warm-up steps, then steps timed one by one.
#[derive(Clone, Copy, Debug)]
pub struct TrainBenchOptions {
    /// Steps taken and discarded first in each configuration (page-in, allocator, torch
    /// start-up, process start-up).
    pub warmup_steps: u64,
    /// Steps timed one by one after the warm-up; every figure is their median.
    pub timed_steps: u64,
}

impl Default for TrainBenchOptions {
    fn default() -> Self {
        TrainBenchOptions {
            warmup_steps: 3,
            timed_steps: 20,
        }
    }
}

/// The median of some durations in milliseconds (upper median for an even count).
fn median_ms(mut samples: Vec<Duration>) -> f64 {
    samples.sort();
    samples
        .get(samples.len() / 2)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}

fn ns_ms(ns: u64) -> Duration {
    Duration::from_nanos(ns)
}

/// One configuration's timed steps: the step time and its phases, each a median, and the
/// CPU its processes used over the timed steps (`Err`: why it could not be read).
struct Timed {
    step_ms: f64,
    min_ms: f64,
    phases: serde_json::Map<String, serde_json::Value>,
    cpu: Result<CpuPerStep, String>,
    /// The `GLIBC_TUNABLES` each worker ran with, read from its `/proc/PID/environ`
    /// (empty without workers; `None` for a worker without the variable).
    worker_malloc_tunables: Vec<Option<String>>,
}

/// The CPU time this process has used so far, in nanoseconds, all its threads (ended ones
/// included): `CLOCK_PROCESS_CPUTIME_ID`, which brings the running thread's time up to date
/// as it reads (the scheduler statistics below can lag a running thread by a tick).
fn this_process_cpu_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    u64::try_from(now.tv_sec)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::try_from(now.tv_nsec).unwrap_or(0))
}

/// How long [`worker_cpu_ns`] waits for a worker's threads to stop running.
const WORKER_SETTLE_LIMIT_MS: u64 = 50;

/// Whether any thread of the process whose task directory is `tasks` is running or
/// runnable (state `R` in `/proc/PID/task/TID/stat`).
fn any_thread_running(tasks: &Path) -> std::io::Result<bool> {
    for task in std::fs::read_dir(tasks)? {
        let stat = match std::fs::read_to_string(task?.path().join("stat")) {
            Ok(stat) => stat,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        // The state follows the command name, which is in parentheses and may hold any
        // character, so it is found after the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next());
        if state == Some("R") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The CPU time worker process `pid` has used so far, in nanoseconds: the sum of
/// `se.sum_exec_runtime` (the first field of `/proc/PID/task/TID/schedstat`) over its live
/// threads. The kernel brings a thread's figure up to date when it stops running, and a
/// running thread's can lag by a scheduler tick, so this first waits (at most
/// [`WORKER_SETTLE_LIMIT_MS`]) until no thread of the worker is running: between steps a
/// worker blocks on its socket within microseconds of its last reply. A thread that ends
/// between the listing and the read is skipped.
fn worker_cpu_ns(pid: u32) -> std::io::Result<u64> {
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    let settle_by = Instant::now() + Duration::from_millis(WORKER_SETTLE_LIMIT_MS);
    while any_thread_running(&tasks)? && Instant::now() < settle_by {
        std::thread::sleep(Duration::from_micros(50));
    }
    let mut total_ns = 0u64;
    for task in std::fs::read_dir(&tasks)? {
        let path = task?.path().join("schedstat");
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let runtime_ns: u64 = text
            .split_whitespace()
            .next()
            .and_then(|field| field.parse().ok())
            .ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: no run time in {text:?}", path.display()),
                )
            })?;
        total_ns = total_ns.saturating_add(runtime_ns);
    }
    if total_ns == 0 {
        // A kernel without scheduler statistics prints zeros: no figure, not a false one.
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            format!("{}: every thread reports 0 ns of run time", tasks.display()),
        ));
    }
    Ok(total_ns)
}

/// CPU used per timed step by a configuration's processes: mean milliseconds per step over
/// the whole timed window (this process, and the worker processes if any).
#[derive(Clone, Copy, Debug)]
struct CpuPerStep {
    /// Processes measured (this one, plus W workers).
    processes: usize,
    /// This process's CPU per step (the coordinator, for a worker configuration).
    this_process_ms: f64,
    /// The workers' CPU per step, all of them together (0 without workers).
    workers_ms: f64,
    /// Mean wall time per step over the same window.
    wall_ms: f64,
}

impl CpuPerStep {
    fn total_ms(&self) -> f64 {
        self.this_process_ms + self.workers_ms
    }
}

/// Reads the CPU clocks of this process and `workers` at the start of the timed window
/// and again at its end.
struct CpuMeter {
    workers: Vec<u32>,
    this_process_ns: u64,
    workers_ns: Vec<u64>,
    started: Instant,
}

impl CpuMeter {
    fn start(workers: Vec<u32>) -> std::io::Result<Self> {
        let workers_ns = workers
            .iter()
            .map(|&pid| worker_cpu_ns(pid))
            .collect::<std::io::Result<Vec<u64>>>()?;
        Ok(CpuMeter {
            this_process_ns: this_process_cpu_ns(),
            workers,
            workers_ns,
            started: Instant::now(),
        })
    }

    /// The CPU per step over `steps` steps since [`CpuMeter::start`].
    fn finish(self, steps: u64) -> std::io::Result<CpuPerStep> {
        let wall = self.started.elapsed();
        let this_process_ns = this_process_cpu_ns().saturating_sub(self.this_process_ns);
        let mut workers_ns = 0u64;
        for (&pid, &before) in self.workers.iter().zip(&self.workers_ns) {
            workers_ns = workers_ns.saturating_add(worker_cpu_ns(pid)?.saturating_sub(before));
        }
        let per_step_ms = |ns: u64| ns as f64 / 1e6 / steps.max(1) as f64;
        Ok(CpuPerStep {
            processes: 1 + self.workers.len(),
            this_process_ms: per_step_ms(this_process_ns),
            workers_ms: per_step_ms(workers_ns),
            wall_ms: wall.as_secs_f64() * 1000.0 / steps.max(1) as f64,
        })
    }
}

/// Starts the CPU meter at the first timed step (`index == warmup`), keeping why it could
/// not start.
fn start_meter_at(
    index: u64,
    options: TrainBenchOptions,
    meter: &mut Option<Result<CpuMeter, String>>,
    workers: impl FnOnce() -> Vec<u32>,
) {
    if index == options.warmup_steps {
        *meter = Some(CpuMeter::start(workers()).map_err(|e| e.to_string()));
    }
}

/// The CPU per step of the window `meter` opened.
fn finish_meter(
    meter: Option<Result<CpuMeter, String>>,
    options: TrainBenchOptions,
) -> Result<CpuPerStep, String> {
    match meter {
        Some(Ok(meter)) => meter.finish(options.timed_steps).map_err(|e| e.to_string()),
        Some(Err(reason)) => Err(reason),
        None => Err("no step was timed".to_owned()),
    }
}

/// Medians of named phase samples, as a JSON object of milliseconds.
fn phase_medians(
    names: &[&str],
    samples: Vec<Vec<Duration>>,
) -> serde_json::Map<String, serde_json::Value> {
    names
        .iter()
        .zip(samples)
        .map(|(name, samples)| ((*name).to_owned(), serde_json::json!(median_ms(samples))))
        .collect()
}

fn timed(
    steps: Vec<Duration>,
    phases: serde_json::Map<String, serde_json::Value>,
    cpu: Result<CpuPerStep, String>,
) -> Timed {
    let min_ms = steps
        .iter()
        .min()
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    Timed {
        step_ms: median_ms(steps),
        min_ms,
        phases,
        cpu,
        worker_malloc_tunables: Vec::new(),
    }
}

/// In-process steps with the tch engine, timed one by one and split into planning, the
/// engine's forward and backward passes with the logical-order sum (the engine sums inside
/// torch as it goes, so the two are one phase) and AdamW: the arithmetic of
/// `core::step::in_process_step`, in the same order.
fn time_in_process(data: &FashionMnist, options: TrainBenchOptions) -> Result<Timed, BenchError> {
    engine::pin_single_thread();
    let train = SplitView::from(&data.train);
    let mut state = LogicalState::genesis(Hyperparameters::with_seed(0));
    let mut stream = SampleStream::new(0, train.count as u32);
    let names = ["plan", "forward_backward_and_sum", "adamw"];
    let mut phases: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut steps = Vec::new();
    let mut meter = None;
    for index in 0..options.warmup_steps + options.timed_steps {
        start_meter_at(index, options, &mut meter, Vec::new);
        let started = Instant::now();
        let batches = step::plan_step(&state, &mut stream, train)?;
        let plan = started.elapsed();
        let engine_started = Instant::now();
        let flat = state.flat_parameters();
        let request = GradientRequest {
            flat_parameters: &flat,
            batches: &batches,
            global_batch_size: state.hyperparameters().global_batch_size(),
        };
        let (_, gradient) = engine::TchEngine
            .summed_gradients(request, state.hyperparameters().logical_micro_batches)?;
        let engine_time = engine_started.elapsed();
        let update_started = Instant::now();
        step::apply_update(&mut state, &gradient)?;
        step::advance_counters(&mut state, &batches);
        let adamw = update_started.elapsed();
        let total = started.elapsed();
        if index >= options.warmup_steps {
            steps.push(total);
            for (samples, value) in phases.iter_mut().zip([plan, engine_time, adamw]) {
                samples.push(value);
            }
        }
    }
    let cpu = finish_meter(meter, options);
    Ok(timed(steps, phase_medians(&names, phases), cpu))
}

/// Steps of one coordinator session over `workers` processes, timed one by one after the
/// warm-up; the phases are what the coordinator and its workers measured
/// ([`StepTimings`]). Starting and finishing the session is not timed.
fn time_workers(
    shardlift_exe: &Path,
    workers: u32,
    data: &FashionMnist,
    options: TrainBenchOptions,
) -> Result<Timed, BenchError> {
    let train = SplitView::from(&data.train);
    let state = LogicalState::genesis(Hyperparameters::with_seed(0));
    let mut stream = SampleStream::new(0, train.count as u32);
    let session_options = SessionOptions::new(shardlift_exe, workers, "bench");
    let mut session =
        CoordinatorSession::start(session_options, state).map_err(TrainError::from)?;
    let worker_malloc_tunables = (0..workers)
        .map(|rank| {
            let pid = session.worker_pid(rank).ok_or_else(|| {
                BenchError::Environment(std::io::Error::other(format!("no worker of rank {rank}")))
            })?;
            glibc_tunables_of(pid).map_err(BenchError::Environment)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let names = [
        "plan",
        "forward_backward",
        "ipc",
        "ipc_compute_round_trip",
        "ipc_update_round_trip",
        "reduction",
        "adamw",
        "other",
        "forward_backward_all_workers",
        "adamw_all_workers",
    ];
    let mut phases: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    let mut steps = Vec::new();
    let mut meter = None;
    for index in 0..options.warmup_steps + options.timed_steps {
        start_meter_at(index, options, &mut meter, || {
            (0..workers)
                .filter_map(|rank| session.worker_pid(rank))
                .collect()
        });
        let started = Instant::now();
        session.step(&mut stream, train).map_err(TrainError::from)?;
        let total = started.elapsed();
        if index < options.warmup_steps {
            continue;
        }
        let t: StepTimings = session.last_step_timings();
        // The logical-order sum runs inside the compute round trip, as gradients arrive.
        let accounted = t.plan_ns + t.compute_round_trip_ns + t.update_round_trip_ns;
        let values = [
            t.plan_ns,
            t.compute_max_ns,
            t.ipc_ns(),
            t.compute_round_trip_ns
                .saturating_sub(t.compute_max_ns)
                .saturating_sub(t.reduction_ns),
            t.update_round_trip_ns.saturating_sub(t.adamw_max_ns),
            t.reduction_ns,
            t.adamw_max_ns,
            t.total_ns.saturating_sub(accounted),
            t.compute_sum_ns,
            t.adamw_sum_ns,
        ];
        steps.push(total);
        for (samples, value) in phases.iter_mut().zip(values) {
            samples.push(ns_ms(value));
        }
    }
    let cpu = finish_meter(meter, options);
    session.finish().map_err(TrainError::from)?;
    Ok(Timed {
        worker_malloc_tunables,
        ..timed(steps, phase_medians(&names, phases), cpu)
    })
}

/// The same MLP trained the ordinary way: one tch process, one thread, tch's AdamW, the
/// whole global batch at once; each step timed after the warm-up.
fn plain_tch_steps(data: &FashionMnist, options: TrainBenchOptions) -> Result<Timed, BenchError> {
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
    let input = Tensor::f_from_slice(&pixels)?.f_view([batch as i64, INPUT_FEATURES as i64])?;
    let targets = Tensor::f_from_slice(&data.train.labels[..batch])?.f_to_kind(Kind::Int64)?;
    let mut steps = Vec::new();
    let mut meter = None;
    for index in 0..options.warmup_steps + options.timed_steps {
        start_meter_at(index, options, &mut meter, Vec::new);
        let started = Instant::now();
        let loss = model.forward(&input).f_cross_entropy_loss::<Tensor>(
            &targets,
            None,
            Reduction::Mean,
            -100,
            0.0,
        )?;
        optimizer.backward_step(&loss);
        if index >= options.warmup_steps {
            steps.push(started.elapsed());
        }
    }
    let cpu = finish_meter(meter, options);
    Ok(timed(steps, serde_json::Map::new(), cpu))
}

/// What bounds the in-process step, measured: the engine over one 192-sample batch
/// against the same 192 samples as twelve 16-sample micro-batches (what bitwise topology
/// independence requires), and libtorch's cost per dispatched operation.
fn engine_bounds(
    data: &FashionMnist,
    options: TrainBenchOptions,
) -> Result<serde_json::Value, BenchError> {
    engine::pin_single_thread();
    let h = Hyperparameters::with_seed(0);
    let state = LogicalState::genesis(h);
    let flat = state.flat_parameters();
    let train = SplitView::from(&data.train);
    let mut stream = SampleStream::new(0, train.count as u32);
    let micro_batches = step::plan_step(&state, &mut stream, train)?;
    let whole = MicroBatch {
        index: 0,
        sample_ids: micro_batches
            .iter()
            .flat_map(|b| b.sample_ids.clone())
            .collect(),
        pixels: micro_batches
            .iter()
            .flat_map(|b| b.pixels.clone())
            .collect(),
        labels: micro_batches
            .iter()
            .flat_map(|b| b.labels.clone())
            .collect(),
    };
    let global = h.global_batch_size();
    let time_engine = |batches: &[MicroBatch]| -> Result<f64, BenchError> {
        let mut samples = Vec::new();
        for index in 0..options.warmup_steps + options.timed_steps {
            let started = Instant::now();
            let request = GradientRequest {
                flat_parameters: &flat,
                batches,
                global_batch_size: global,
            };
            engine::TchEngine.micro_batch_gradients(request, &mut |_, _, _| Ok(()))?;
            if index >= options.warmup_steps {
                samples.push(started.elapsed());
            }
        }
        Ok(median_ms(samples))
    };
    let one_batch_ms = time_engine(std::slice::from_ref(&whole))?;
    let micro_batches_ms = time_engine(&micro_batches)?;
    // The cheapest dispatched operation: adding two one-element tensors.
    let a = Tensor::f_from_slice(&[1f32])?;
    let b = Tensor::f_from_slice(&[2f32])?;
    const OPS: u32 = 2000;
    let mut samples = Vec::new();
    for index in 0..options.warmup_steps + options.timed_steps {
        let started = Instant::now();
        for _ in 0..OPS {
            let _ = a.f_add(&b)?;
        }
        if index >= options.warmup_steps {
            samples.push(started.elapsed() / OPS);
        }
    }
    let dispatch_us = median_ms(samples) * 1000.0;
    Ok(serde_json::json!({
        "engine_one_192_sample_batch_ms": one_batch_ms,
        "engine_twelve_16_sample_micro_batches_ms": micro_batches_ms,
        "dispatch_us_per_op": dispatch_us,
    }))
}

/// One configuration's measured CPU per step, its floor on `cores` and its ratios to
/// plain tch's step (`plain_step_ms`) and CPU (`plain_cpu_ms`).
fn cpu_per_step_report(
    cpu: &Result<CpuPerStep, String>,
    cores: usize,
    plain_step_ms: f64,
    plain_cpu_ms: Option<f64>,
) -> serde_json::Value {
    match cpu {
        Ok(cpu) => {
            let floor_ms = cpu.total_ms() / cores as f64;
            serde_json::json!({
                "processes": cpu.processes,
                "this_process_ms": cpu.this_process_ms,
                "workers_ms": cpu.workers_ms,
                "total_ms": cpu.total_ms(),
                "mean_wall_step_ms": cpu.wall_ms,
                "cores_busy": cpu.total_ms() / cpu.wall_ms,
                "floor_step_ms": floor_ms,
                "floor_ratio_to_plain_tch": floor_ms / plain_step_ms,
                "cpu_over_plain_tch_cpu": plain_cpu_ms.map(|plain| cpu.total_ms() / plain),
            })
        }
        Err(reason) => serde_json::json!({ "unavailable": reason }),
    }
}

/// Step times for plain tch, in-process, W1, W3 and W4 (medians of individually timed
/// steps after a warm-up), each as a ratio to the plain tch step, with the measured phase
/// split of every configuration and what bounds the in-process step; a JSON report.
/// Progress goes to `progress` (the CLI draws it on stderr).
pub fn train(
    shardlift_exe: &Path,
    data: &FashionMnist,
    options: TrainBenchOptions,
    progress: &mut dyn Progress,
) -> Result<serde_json::Value, BenchError> {
    let options = TrainBenchOptions {
        warmup_steps: options.warmup_steps,
        timed_steps: options.timed_steps.max(1),
    };
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    progress.phase("bench train: plain tch", None);
    let baseline = plain_tch_steps(data, options)?;
    progress.finish();
    let baseline_cpu_ms = baseline.cpu.as_ref().ok().map(CpuPerStep::total_ms);
    let cpu_report = |cpu: &Result<CpuPerStep, String>| {
        cpu_per_step_report(cpu, cores, baseline.step_ms, baseline_cpu_ms)
    };
    let mut rows = Vec::new();
    let mut w4_phases = serde_json::Value::Null;
    let mut w4_cpu = serde_json::Value::Null;
    for (label, workers) in [
        ("in-process", None),
        ("W1", Some(1)),
        ("W3", Some(3)),
        ("W4", Some(4)),
    ] {
        progress.phase(&format!("bench train: {label}"), None);
        let result = match workers {
            None => time_in_process(data, options)?,
            Some(workers) => time_workers(shardlift_exe, workers, data, options)?,
        };
        progress.finish();
        let cpu = cpu_report(&result.cpu);
        if label == "W4" {
            w4_phases = serde_json::Value::Object(result.phases.clone());
            w4_cpu = cpu.clone();
        }
        rows.push(serde_json::json!({
            "configuration": label,
            "step_ms": result.step_ms,
            "min_step_ms": result.min_ms,
            "ratio_to_plain_tch": result.step_ms / baseline.step_ms,
            "phases_ms": result.phases,
            "cpu_per_step": cpu,
            "worker_glibc_tunables": result.worker_malloc_tunables,
        }));
    }
    progress.phase("bench train: bounds", None);
    let bounds = engine_bounds(data, options)?;
    progress.finish();
    let report = serde_json::json!({
        "benchmark": "train-step",
        "profile": if cfg!(debug_assertions) { "dev" } else { "release" },
        "cores": cores,
        "warmup_steps": options.warmup_steps,
        "steps_timed": options.timed_steps,
        "statistic": "median of individually timed steps",
        "glibc_tunables": std::env::var(MALLOC_TUNABLES_VARIABLE).ok(),
        "plain_tch_step_ms": baseline.step_ms,
        "plain_tch_cpu_per_step": cpu_report(&baseline.cpu),
        "configurations": rows,
        "w4_phases_ms": w4_phases,
        "w4_cpu_per_step": w4_cpu,
        "bounds": bounds,
        "note": "wall-clock on this machine. Worker phases are measured: forward_backward and adamw by the slowest worker, ipc is the two round trips less them and the coordinator's adds (encode, socket, decode, scheduling; the logical-order sum runs inside the compute round trip as each gradient arrives), other is the rest of the step; each phase is its own median, so they need not add up to step_ms. cpu_per_step is measured, not derived from the phases: the CPU time every process of the configuration used over the timed steps (this process, the coordinator for W configurations, by CLOCK_PROCESS_CPUTIME_ID; each worker by the first field of /proc/PID/task/*/schedstat, read between steps once none of its threads is running), per step. floor_step_ms is that total over the cores: the step cannot take less wall time on these cores however the work is scheduled; cores_busy is the total over the mean wall step",
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
            crash_store: None,
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
