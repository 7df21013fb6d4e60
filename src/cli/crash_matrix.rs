//! `shardlift crash-matrix`: the model's crash matrix (every scenario, crash point and
//! mutant), or with `--file-system` the same on the real kernel (`crash_matrix_kernel`).
use anyhow::Context;

use super::print_json;

#[derive(clap::Args, Debug)]
pub struct CrashMatrixArgs {
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    /// Seed for sampled power-loss subsets.
    #[arg(long, default_value_t = 0x5eed)]
    pub seed: u64,
    /// Upper bound on distinct power-loss states checked per scenario, sampled evenly
    /// (0: check every distinct state).
    #[arg(long, default_value_t = 0)]
    pub max_states_per_scenario: usize,
    /// Print the names of the writer mutants (deliberately broken writers) and exit.
    #[arg(long, conflicts_with = "mutant")]
    pub list_mutants: bool,
    /// Run the power-loss model against one writer mutant only; exits 1 listing the
    /// violations that kill it (0 would mean the model cannot see that bug).
    #[arg(long, value_name = "NAME")]
    pub mutant: Option<String>,
    #[command(flatten)]
    pub kernel: super::crash_matrix_kernel::KernelMatrixArgs,
}

pub fn run_crash_matrix(args: CrashMatrixArgs) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the shardlift executable")?;
    let config = shardlift::lab::matrix::MatrixConfig {
        seed: args.seed,
        max_states_per_scenario: args.max_states_per_scenario,
        ..shardlift::lab::matrix::MatrixConfig::default()
    };
    if args.list_mutants {
        for mutant in &shardlift::lab::mutants::MUTANTS {
            outln!("{}", mutant.name);
        }
        return Ok(());
    }
    if args.kernel.file_system != "model" {
        return super::crash_matrix_kernel::run(
            &args.kernel,
            &super::crash_matrix_kernel::MatrixOptions {
                seed: args.seed,
                max_states_per_scenario: args.max_states_per_scenario,
                mutant: args.mutant.as_deref(),
                json: args.json,
            },
        );
    }
    if let Some(name) = &args.mutant {
        return run_one_mutant(name, &config, args.json);
    }
    let mut progress = super::progress::StderrProgress::new();
    let summary = shardlift::lab::run::run_matrix(&exe, &config, &mut progress)?;
    let mutants = shardlift::lab::mutants::run_all(&config, &mut progress)?;
    if args.json {
        print_json(&CrashMatrixReport {
            summary: &summary,
            mutants: &mutants,
        })?;
    } else {
        print_matrix_text(&summary, &mutants);
    }
    if !summary.violations.is_empty() {
        anyhow::bail!("{} invariant violations", summary.violations.len());
    }
    if !mutants.survived.is_empty() {
        anyhow::bail!(
            "writer mutants survived the model (holes in it): {}",
            mutants.survived.join(", ")
        );
    }
    Ok(())
}

/// `crash-matrix` without `--json`: the counts, every violation, each mutant's fate.
fn print_matrix_text(
    summary: &shardlift::lab::run::MatrixSummary,
    mutants: &shardlift::lab::mutants::MutantTally,
) {
    outln!(
        "{} barriers; {} barrier kills; {} operations traced, {} operation-boundary kills; {} random kills ({} runs finished first); {} crash states built, {} distinct; {} corruption cases; {} violations",
        summary.barriers.len(),
        summary.barrier_kills,
        summary.trace_operations,
        summary.op_boundary_kills,
        summary.random_kills,
        summary.random_runs_finished_first,
        summary.crash_images,
        summary.distinct_states,
        summary.corruption_cases,
        summary.violations.len()
    );
    for v in &summary.violations {
        outln!("VIOLATION: {v}");
    }
    for detail in &mutants.details {
        outln!(
            "mutant {}: expected {}; {} of {} violations break it{}",
            detail.name,
            detail.expected_invariant,
            detail.killed_by.len(),
            detail.violations,
            if detail.killed_by.is_empty() {
                " (SURVIVED)"
            } else {
                ""
            }
        );
    }
    outln!(
        "{} of {} mutants killed by their expected invariant; survived: {:?}",
        mutants.killed,
        mutants.total,
        mutants.survived
    );
    outln!("caveat: {}", summary.caveat);
}

/// `crash-matrix --json`: the matrix's summary and the mutants' fate, one record.
#[derive(serde::Serialize)]
struct CrashMatrixReport<'a> {
    #[serde(flatten)]
    summary: &'a shardlift::lab::run::MatrixSummary,
    mutants: &'a shardlift::lab::mutants::MutantTally,
}

/// `crash-matrix --mutant NAME`: the model against one broken writer.
fn run_one_mutant(
    name: &str,
    config: &shardlift::lab::matrix::MatrixConfig,
    json: bool,
) -> anyhow::Result<()> {
    let Some(mutant) = shardlift::lab::mutants::find(name) else {
        let names: Vec<&str> = shardlift::lab::mutants::MUTANTS
            .iter()
            .map(|m| m.name)
            .collect();
        anyhow::bail!("no mutant {name:?}; the mutants are: {}", names.join(", "));
    };
    eprintln!("crash-matrix: mutant {}: {}", mutant.name, mutant.breaks);
    let outcome = shardlift::lab::mutants::run_mutant(mutant, config)?;
    if json {
        print_json(&outcome)?;
    } else {
        outln!(
            "mutant {}: {} crash states, {} violations, {} of its expected invariant {}",
            outcome.name,
            outcome.crash_states,
            outcome.violations.len(),
            outcome.killed_by.len(),
            outcome.expected_invariant
        );
        for v in &outcome.violations {
            outln!("VIOLATION: {v}");
        }
    }
    if outcome.killed {
        anyhow::bail!(
            "mutant {} broke its expected invariant {} ({} violations of it): caught",
            outcome.name,
            outcome.expected_invariant,
            outcome.killed_by.len()
        );
    }
    eprintln!(
        "crash-matrix: mutant {} SURVIVED: no violation of its expected invariant {} ({} of others)",
        outcome.name,
        outcome.expected_invariant,
        outcome.violations.len()
    );
    Ok(())
}
