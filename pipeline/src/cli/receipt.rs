//! `receipt record|merge|plan|verify|sign`: the clap arguments and the printing around
//! [`pipeline::receipt`].
use std::path::PathBuf;

use anyhow::Context as _;
use pipeline::receipt::{self, merge, record, schema, verify};

#[derive(clap::Subcommand, Debug)]
pub enum ReceiptCommand {
    /// Run a lane command and write its receipt (a failed lane still gets one, then exit 1).
    Record(Box<RecordArgs>),
    /// Merge receipts into one, optionally carrying forward unchanged shards.
    Merge(Box<MergeArgs>),
    /// Dry-run carry-forward: report, per shard of an old receipt, carryable or stale.
    Plan(Box<PlanArgs>),
    /// Check a receipt's consistency, signature and policy.
    Verify(Box<VerifyArgs>),
    /// Sign a receipt file with an SSH key (writes FILE.sig).
    Sign(Box<SignArgs>),
}

#[derive(clap::Args, Debug)]
pub struct RecordArgs {
    /// The lane (shard) name, unique among the receipts to be merged.
    #[arg(long)]
    lane: String,
    /// Tracked paths (files or directories, `.` for all) forming the shard's narrow manifest.
    #[arg(long, value_delimiter = ',', required = true)]
    fingerprint_paths: Vec<String>,
    /// Untracked or generated paths whose content digests join the manifest.
    #[arg(long, value_delimiter = ',')]
    fingerprint_extra_paths: Vec<String>,
    /// Paths left out of the manifest (under the listed paths).
    #[arg(long, value_delimiter = ',')]
    fingerprint_exclude_paths: Vec<String>,
    /// The receipt file to write.
    #[arg(long)]
    out: PathBuf,
    /// The git repository (default: the current directory).
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// The run's mode (default: `ci` when CI is set, else `local`); merge requires agreement.
    #[arg(long)]
    mode: Option<String>,
    /// Sign the receipt with this OpenSSH private key (writes OUT.sig).
    #[arg(long)]
    sign_key: Option<PathBuf>,
    /// Read the lane's results from this JUnit report (cargo-nextest's, e.g.
    /// `target/nextest/ci/junit.xml` for a profile with `[profile.ci.junit] path =
    /// "junit.xml"`) instead of libtest's console output; removed before the lane runs.
    #[arg(long, value_name = "PATH")]
    junit: Option<PathBuf>,
    /// The lane command (a `cargo test` or `cargo nextest run` invocation, or a shell
    /// running several `cargo test`s).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args, Debug)]
pub struct MergeArgs {
    /// Receipts to merge.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[arg(long)]
    out: PathBuf,
    /// Require every input to carry a valid signature from an allowed signer.
    #[arg(long, requires = "allowed_signers")]
    verify_inputs: bool,
    /// OpenSSH allowed_signers file.
    #[arg(long)]
    allowed_signers: Option<PathBuf>,
    /// An older receipt whose absent shards are carried forward when still valid.
    #[arg(long, requires = "repo")]
    carry_from: Option<PathBuf>,
    /// The git repository for carry-forward.
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Sign the merged receipt with this OpenSSH private key (writes OUT.sig).
    #[arg(long)]
    sign_key: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The old receipt.
    #[arg(long)]
    receipt: PathBuf,
    #[arg(long, default_value = ".")]
    repo: PathBuf,
    /// Fresh receipts whose test IDs count for condition (d).
    #[arg(long)]
    fresh: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    file: PathBuf,
    /// The policy (JSON).
    #[arg(long)]
    policy: PathBuf,
    /// OpenSSH allowed_signers file; FILE.sig must then verify against it.
    #[arg(long)]
    allowed_signers: Option<PathBuf>,
    /// The git repository holding the receipt's commit: checks that commit and its tree,
    /// and the five carry-forward conditions of every carried shard. Without it, carried
    /// shards are refused unless the policy sets `allow_unchecked_carry`.
    #[arg(long, value_name = "DIR")]
    repository: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct SignArgs {
    file: PathBuf,
    /// OpenSSH private key.
    #[arg(long)]
    key: PathBuf,
}

pub fn run(command: ReceiptCommand) -> anyhow::Result<()> {
    match command {
        ReceiptCommand::Record(args) => run_record(*args),
        ReceiptCommand::Merge(args) => run_merge(*args),
        ReceiptCommand::Plan(args) => run_plan(*args),
        ReceiptCommand::Verify(args) => run_verify(*args),
        ReceiptCommand::Sign(args) => run_sign(*args),
    }
}

fn run_record(args: RecordArgs) -> anyhow::Result<()> {
    let out = args.out.clone();
    let receipt = record::record(record::RecordOptions {
        lane: args.lane,
        repo: args.repo,
        mode: args.mode,
        scope: schema::Scope {
            paths: args.fingerprint_paths,
            extra_paths: args.fingerprint_extra_paths,
            excluded_paths: args.fingerprint_exclude_paths,
        },
        out,
        sign_key: args.sign_key,
        junit: args.junit,
        command: args.command,
    })?;
    eprintln!(
        "pipeline: receipt: lane {} recorded {} tests -> {}",
        receipt.shardlift.shards[0].name,
        receipt.counts().total(),
        args.out.display()
    );
    Ok(())
}

fn run_merge(args: MergeArgs) -> anyhow::Result<()> {
    let out = args.out.clone();
    let (receipt, stale) = merge::merge(merge::MergeOptions {
        inputs: args.inputs,
        out,
        verify_inputs: args.verify_inputs,
        allowed_signers: args.allowed_signers,
        carry_from: args.carry_from,
        repo: args.repo,
        sign_key: args.sign_key,
    })?;
    for (shard, reason) in &stale {
        eprintln!("pipeline: receipt: not carried: {shard}: {reason}");
    }
    let carried = receipt
        .shardlift
        .shards
        .iter()
        .filter(|s| s.carried.is_some())
        .count();
    let counts = receipt.counts();
    println!(
        "merged {} shards ({} carried): {} tests ({} passed, {} failed, {} ignored), {:?} -> {}",
        receipt.shardlift.shards.len(),
        carried,
        counts.total(),
        counts.passed,
        counts.failed,
        counts.ignored,
        receipt.shardlift.session.outcome,
        args.out.display()
    );
    Ok(())
}

fn run_plan(args: PlanArgs) -> anyhow::Result<()> {
    let plan = merge::plan(&args.receipt, &args.repo, &args.fresh)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
    } else {
        for entry in &plan.shards {
            let reasons: Vec<String> = entry.reasons.iter().map(ToString::to_string).collect();
            if reasons.is_empty() {
                println!("{}: {}", entry.shard, entry.status);
            } else {
                println!("{}: {}: {}", entry.shard, entry.status, reasons.join("; "));
            }
        }
    }
    Ok(())
}

fn run_verify(args: VerifyArgs) -> anyhow::Result<()> {
    let policy = verify::read_policy(&args.policy)?;
    let verified = verify::verify(
        &args.file,
        &policy,
        args.allowed_signers.as_deref(),
        args.repository.as_deref(),
    )
    .with_context(|| format!("receipt {} refused", args.file.display()))?;
    let carried = match &verified.carry {
        verify::CarryCheck::NoneCarried => String::new(),
        verify::CarryCheck::Checked(shards) => format!(
            "; carried shards {} meet the five carry-forward conditions at the receipt's commit",
            shards.join(", ")
        ),
        verify::CarryCheck::Unchecked(shards) => format!(
            "; carried shards {}: the carry-forward conditions were NOT checked (no --repository)",
            shards.join(", ")
        ),
    };
    println!(
        "receipt {} verified: {} shards, {} tests, {:?}{}{carried}",
        args.file.display(),
        verified.receipt.shardlift.shards.len(),
        verified.tests,
        verified.receipt.shardlift.session.outcome,
        verified
            .signer
            .map(|s| format!(", signed by {s}"))
            .unwrap_or_default()
    );
    Ok(())
}

fn run_sign(args: SignArgs) -> anyhow::Result<()> {
    let bytes = receipt::read_file(&args.file)?;
    let sig = receipt::write_signature(&args.file, &args.key, &bytes)?;
    println!("{}", sig.display());
    Ok(())
}
