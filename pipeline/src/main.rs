//! `pipeline`: ShardLift's release-evidence binary and test-lane receipts.
//!
//! Exit codes: 0 success; 1 the command ran and refused or failed (dirty checkout,
//! tampered evidence, inconsistent receipts, a policy violation); 2 bad command line.
use clap::{Parser, Subcommand};

mod cli;

/// ShardLift release evidence: bind the source revision, run both killer-demo barriers,
/// verify the bundles, emit checkable manifests; and record, merge and verify the
/// receipts of the test lanes.
#[derive(Parser, Debug)]
#[command(name = "pipeline", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Produce release evidence for a clean checkout.
    ReleaseEvidence(cli::release::ReleaseEvidenceArgs),
    /// Re-check a release-evidence directory.
    VerifyRelease(cli::release::VerifyReleaseArgs),
    /// Rerun both barriers of release evidence and compare the bundles byte for byte.
    Reproduce(cli::release::ReproduceArgs),
    /// Write reproducible release assets (source, evidence and binary tarballs, SHA256SUMS).
    ReleaseAssets(cli::release::ReleaseAssetsArgs),
    /// Test-lane receipts: record, merge, plan, verify.
    #[command(subcommand)]
    Receipt(cli::receipt::ReceiptCommand),
    /// Pictures of the committed release evidence: render, check.
    #[command(subcommand)]
    Visuals(cli::visuals::VisualsCommand),
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::ReleaseEvidence(args) => cli::release::run_release_evidence(args),
        Command::VerifyRelease(args) => cli::release::run_verify_release(args),
        Command::Reproduce(args) => cli::release::run_reproduce(args),
        Command::ReleaseAssets(args) => cli::release::run_release_assets(args),
        Command::Receipt(command) => cli::receipt::run(command),
        Command::Visuals(command) => cli::visuals::run(command),
    };
    if let Err(error) = result {
        eprintln!("pipeline: error: {error:#}");
        std::process::exit(1);
    }
}
