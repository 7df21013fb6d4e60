//! Training runs from the seeded genesis state: in this process or over worker processes.
use std::path::PathBuf;

use crate::core::logical::{Hyperparameters, LogicalState};
use crate::core::sampling::SampleStream;
use crate::core::step::{self, SplitView, StepError};
use crate::trainer::coordinator::{CoordinatorSession, SessionError, SessionOptions};
use crate::trainer::engines::EngineKind;

/// Why a training run failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An in-process step failed.
    #[error(transparent)]
    Step(#[from] StepError),
    /// The coordinator session failed (its workers are torn down).
    #[error(transparent)]
    Session(#[from] SessionError),
}

/// Where a run's micro-batches are computed.
#[derive(Clone, Debug)]
pub enum Placement {
    /// Every micro-batch in this process.
    InProcess,
    /// A coordinator session over `workers` processes of `shardlift_exe worker`.
    Workers {
        /// The `shardlift` binary the workers run.
        shardlift_exe: PathBuf,
        /// W, the number of worker processes.
        workers: u32,
    },
}

/// The end of a run: the state, the last step's loss and how many worker exits were reaped.
#[derive(Clone, Debug)]
pub struct TrainRun {
    /// The state after the last step.
    pub state: LogicalState,
    /// The last step's loss.
    pub loss: f32,
    /// Worker exits reaped (0 in process).
    pub worker_exits: usize,
}

/// Takes `steps` steps from the genesis state of `seed`; prints a line per step on
/// stderr when `progress`.
pub fn run_steps(
    engine: EngineKind,
    placement: &Placement,
    steps: u64,
    seed: u64,
    train: SplitView<'_>,
    progress: bool,
) -> Result<TrainRun, TrainError> {
    let mut state = LogicalState::genesis(Hyperparameters::with_seed(seed));
    let mut stream = SampleStream::new(seed, train.count as u32);
    let mut loss = f32::NAN;
    match placement {
        Placement::InProcess => {
            let gradient_engine = engine.instantiate()?;
            for _ in 0..steps {
                let outcome = step::in_process_step(
                    gradient_engine.as_ref(),
                    &mut state,
                    &mut stream,
                    train,
                )?;
                loss = outcome.loss;
                if progress {
                    eprintln!(
                        "train: in-process step {} loss {:.6}",
                        outcome.step, outcome.loss
                    );
                }
            }
            Ok(TrainRun {
                state,
                loss,
                worker_exits: 0,
            })
        }
        Placement::Workers {
            shardlift_exe,
            workers,
        } => {
            let options = SessionOptions::new(shardlift_exe, *workers, "train").with_engine(engine);
            let mut session = CoordinatorSession::start(options, state)?;
            for _ in 0..steps {
                let outcome = session.step(&mut stream, train)?;
                loss = outcome.loss;
                if progress {
                    eprintln!(
                        "train: W{workers} step {} loss {:.6}",
                        outcome.step, outcome.loss
                    );
                }
            }
            let (state, exits) = session.finish()?;
            Ok(TrainRun {
                state,
                loss,
                worker_exits: exits.len(),
            })
        }
    }
}
