//! `crash-matrix --file-system ext4|xfs|btrfs`: the store's writer and its mutants on the pinned
//! kernel; and the hidden `kernel-store-writer`, the writer the guest runs.
use std::path::PathBuf;

use anyhow::Context;
use shardlift::lab::kernel::matrix::{self, KernelMatrixConfig, KernelVerdict};
use shardlift::lab::kernel::states::StateLimits;
use shardlift::lab::kernel::store_writer::{self, KernelScenario, KERNEL_SCENARIOS};
use shardlift::lab::kernel::{FileSystem, KernelError};

/// The kernel mode's options of `crash-matrix`.
#[derive(clap::Args, Debug)]
pub struct KernelMatrixArgs {
    /// `model` (the power-loss model; default) or a file system on the pinned kernel
    /// (`ext4`, `xfs`, `btrfs`): the store's writer and the writer mutants run in a QEMU guest, every
    /// crash state of its disk is recovered and held to the matrix's invariants
    /// (ci/kernel install; a torch-free build).
    #[arg(long, default_value = "model", value_name = "NAME")]
    pub file_system: String,
    /// Kernel mode: the output directory (new or empty).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Kernel mode: the pinned kernel's install directory (default: the per-user cache).
    #[arg(long, value_name = "DIR")]
    pub kernel_dir: Option<PathBuf>,
    /// Kernel mode: the scenarios run, comma-separated (default: genesis,
    /// over-generation, reshard, repair-latest, over-killed-writer): the correct writer
    /// runs each; a mutant runs those among its own.
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub kernel_scenarios: Vec<String>,
    /// Kernel mode: the writer mutants run, comma-separated (default: every writer
    /// mutant; `none`: only the correct writer).
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    pub kernel_mutants: Vec<String>,
    /// Kernel mode: most crash states checked per guest run (flush points first).
    #[arg(long, default_value_t = 400)]
    pub kernel_max_states: usize,
    /// Kernel mode: seeded reordered states drawn per flush epoch.
    #[arg(long, default_value_t = 8)]
    pub kernel_reordered_per_epoch: usize,
    /// Kernel mode: seeded reordered states, in all, per guest run.
    #[arg(long, default_value_t = 40)]
    pub kernel_max_reordered: usize,
    /// Kernel mode: torn states, in all, per guest run.
    #[arg(long, default_value_t = 10)]
    pub kernel_max_torn: usize,
    /// Kernel mode: the deadline of each guest, in milliseconds.
    #[arg(long, default_value_t = 300_000)]
    pub guest_timeout_ms: u64,
}

/// What `crash-matrix` says for both of its modes that the kernel mode reads.
pub struct MatrixOptions<'a> {
    /// Seed for sampled states.
    pub seed: u64,
    /// Upper bound on distinct model states checked per scenario (0: all).
    pub max_states_per_scenario: usize,
    /// Run one writer mutant only.
    pub mutant: Option<&'a str>,
    /// Print the report as JSON.
    pub json: bool,
}

/// Runs the kernel crash matrix; exit 1 when the correct writer fails a state or a
/// mutant survives the model.
pub fn run(kernel: &KernelMatrixArgs, args: &MatrixOptions<'_>) -> anyhow::Result<()> {
    let file_system: FileSystem = kernel.file_system.parse()?;
    let out = kernel
        .out
        .clone()
        .context("crash-matrix --file-system needs --out DIR")?;
    let config = KernelMatrixConfig {
        agent_exe: std::env::current_exe().context("locating the shardlift executable")?,
        kernel_dir: kernel.kernel_dir.clone(),
        file_system,
        out,
        seed: args.seed,
        scenarios: scenarios(&kernel.kernel_scenarios)?,
        mutants: mutants(&kernel.kernel_mutants, args.mutant)?,
        states: StateLimits {
            reordered_per_epoch: kernel.kernel_reordered_per_epoch,
            max_reordered: kernel.kernel_max_reordered,
            max_torn: kernel.kernel_max_torn,
            seed: args.seed,
            ..StateLimits::default()
        },
        max_states: kernel.kernel_max_states,
        guest_timeout_ms: kernel.guest_timeout_ms,
        model: shardlift::lab::matrix::MatrixConfig {
            seed: args.seed,
            max_states_per_scenario: args.max_states_per_scenario,
            ..shardlift::lab::matrix::MatrixConfig::default()
        },
    };
    let report = matrix::run_matrix(&config, &mut |line| eprintln!("crash-matrix: {line}"))
        .context("crash-matrix")?;
    if args.json {
        super::print_json(&report)?;
    } else {
        for run in &report.correct {
            outln!(
                "correct writer, {}: {} states checked, {} failing",
                run.scenario.name(),
                run.states_checked,
                run.failing_states
            );
        }
        for row in &report.mutants {
            outln!(
                "mutant {}: expected {}; model {}; {:?} {}",
                row.name,
                row.expected_invariant,
                if row.model_caught {
                    "caught"
                } else {
                    "SURVIVED"
                },
                row.file_system,
                match row.kernel {
                    KernelVerdict::Caught => "caught",
                    KernelVerdict::Masked => "masked",
                    KernelVerdict::NotRun => "not run",
                }
            );
        }
    }
    if report.correct_failing_states > 0 {
        anyhow::bail!(
            "the correct writer failed {} crash states on {:?}",
            report.correct_failing_states,
            report.file_system
        );
    }
    if !report.model_survivors.is_empty() {
        anyhow::bail!(
            "writer mutants survived the model (holes in it): {}",
            report.model_survivors.join(", ")
        );
    }
    Ok(())
}

fn scenarios(names: &[String]) -> Result<Vec<KernelScenario>, KernelError> {
    if names.is_empty() {
        return Ok(KERNEL_SCENARIOS.to_vec());
    }
    names
        .iter()
        .map(|name| {
            KernelScenario::find(name).ok_or_else(|| KernelError::UnknownScenario {
                name: name.clone(),
                known: KERNEL_SCENARIOS.map(KernelScenario::name).join(", "),
            })
        })
        .collect()
}

fn mutants(
    names: &[String],
    one: Option<&str>,
) -> Result<Vec<&'static shardlift::lab::mutants::Mutant>, KernelError> {
    let all = matrix::writer_mutants();
    let names: Vec<&str> = match one {
        Some(name) => vec![name],
        None if names.is_empty() => return Ok(all),
        None if names == ["none"] => return Ok(Vec::new()),
        None => names.iter().map(String::as_str).collect(),
    };
    names
        .into_iter()
        .map(|name| {
            all.iter()
                .find(|m| m.name == name)
                .copied()
                .ok_or_else(|| KernelError::UnknownMutant {
                    name: name.to_owned(),
                    known: all.iter().map(|m| m.name).collect::<Vec<_>>().join(", "),
                })
        })
        .collect()
}

/// The guest's store writer's arguments.
#[derive(clap::Args, Debug)]
pub struct StoreWriterArgs {
    /// The scenario.
    #[arg(long)]
    pub scenario: String,
    /// The seed of the states.
    #[arg(long)]
    pub seed: u64,
    /// A writer mutant's faults (none: the correct writer).
    #[arg(long)]
    pub mutant: Option<String>,
}

/// Runs the store's writer in a crash-test guest, on `store` in the working directory
/// (the file system under test), printing its acknowledgement lines. Outside a guest it
/// does nothing and exits 2: its mutants write unsafely on purpose.
pub fn store_writer(args: StoreWriterArgs) -> anyhow::Result<()> {
    let cmdline = std::fs::read_to_string("/proc/cmdline").unwrap_or_default();
    if !shardlift::lab::kernel::agent::is_guest(&cmdline) {
        eprintln!(
            "shardlift kernel-store-writer runs only inside a crash-test guest (the kernel \
             command line lacks {}); nothing was done",
            shardlift::lab::kernel::agent::GUEST_TOKEN
        );
        std::process::exit(2);
    }
    let scenario = scenarios(std::slice::from_ref(&args.scenario))?[0];
    let faults = match &args.mutant {
        Some(name) => mutants(&[], Some(name))?[0].faults.writer,
        None => shardlift::lab::writer_mutants::WriterFaults::NONE,
    };
    let root = std::path::Path::new(store_writer::STORE_DIR);
    let generation = store_writer::run_scenario(root, scenario, faults, args.seed, &mut |line| {
        outln!("{line}")
    })?;
    outln!("generation {generation}");
    Ok(())
}
