//! `shardlift resume-test`: run a training command three ways and compare its steps.
use std::ffi::OsString;
use std::path::PathBuf;

use shardlift::resume::{resume_test, ResumeError, ResumeTestConfig};

/// `resume-test` arguments (the command's help is its variant's doc in `main.rs`).
#[derive(clap::Args, Debug)]
pub struct ResumeTestArgs {
    /// Output directory (created; must be empty): each run's working directory, probe
    /// channel and output.
    #[arg(long)]
    pub out: PathBuf,
    /// Kill right after the probe reports step K (repeatable, one sequence each;
    /// deterministic: the probe holds after reporting it until the kill). `K1,K2,...`
    /// kills the first run after K1, its restart after K2, and so on.
    #[arg(long = "kill-after-step", value_name = "K[,K...]")]
    pub kill_after_step: Vec<String>,
    /// Kill at this many seeded instants of the reference run's timeline.
    #[arg(long, default_value_t = 0, value_name = "R")]
    pub random_kills: usize,
    /// The seed of the random instants.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Also restart a torchrun command on N processes (its --nproc-per-node rewritten)
    /// after a kill, and report what diverged.
    #[arg(long, value_name = "N")]
    pub restart_nproc: Option<u32>,
    /// Digest every K-th step only (the others report their step number alone).
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub every: u64,
    /// Kill a run (and its process tree) that has not finished after this long.
    #[arg(long, default_value_t = 600_000)]
    pub run_timeout_ms: u64,
    /// How often a run's probe channel is read (1 to 1000 ms).
    #[arg(long, default_value_t = 1)]
    pub poll_interval_ms: u64,
    /// The training command and its arguments.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

/// Runs the test; exits 0, 1 or 2 as `--help` says.
pub fn run(args: ResumeTestArgs) -> anyhow::Result<()> {
    let kill_after_steps =
        kill_chains(&args.kill_after_step).unwrap_or_else(|e| exit_bad_input(&e));
    let config = ResumeTestConfig {
        command: args.command,
        out: args.out,
        kill_after_steps,
        random_kills: args.random_kills,
        seed: args.seed,
        restart_nproc: args.restart_nproc,
        every: args.every,
        run_timeout_ms: args.run_timeout_ms,
        poll_interval_ms: args.poll_interval_ms,
    };
    let mut progress = |line: String| eprintln!("resume-test: {line}");
    match resume_test(&config, &mut progress) {
        Ok(verdict) => {
            super::print_json(&verdict)?;
            if !verdict.passed {
                eprintln!("resume-test: FAILED: {}", verdict.failed.join(", "));
                std::process::exit(1);
            }
            eprintln!(
                "resume-test: passed ({} sequences)",
                verdict.sequences.len()
            );
            Ok(())
        }
        Err(error) => exit_bad_input(&error),
    }
}

/// Each `--kill-after-step` value (`4` or `4,9`) as its chain of steps.
fn kill_chains(values: &[String]) -> Result<Vec<Vec<u64>>, ResumeError> {
    values
        .iter()
        .map(|value| {
            value
                .split(',')
                .map(|step| {
                    step.trim().parse::<u64>().map_err(|_| ResumeError::Usage {
                        reason: format!("--kill-after-step {value}: not a step number or a comma-separated list of them"),
                    })
                })
                .collect()
        })
        .collect()
}

fn exit_bad_input(error: &ResumeError) -> ! {
    if let Some(signal) = shardlift::core::interrupt::requested() {
        eprintln!("shardlift: interrupted by signal {signal}; children stopped and reaped");
        std::process::exit(128 + signal);
    }
    let kind = error.kind();
    eprintln!("shardlift: error ({kind}): {error}");
    let report = serde_json::json!({"schema": shardlift::resume::suite::VERDICT_SCHEMA, "error": kind, "message": error.to_string()});
    outln!("{report}");
    std::process::exit(if error.is_bad_input() { 2 } else { 1 });
}
