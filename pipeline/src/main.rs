//! `pipeline`: ShardLift's release-evidence binary.
//!
//! It will bind the source revision through git2, run both killer-demo barriers, verify
//! the bundles and emit release manifests. Until that lands it only explains itself: it
//! prints no evidence it did not produce.
use clap::Parser;

/// ShardLift release-evidence pipeline (not yet implemented: see the release issue).
///
/// The finished pipeline opens a clean checkout with git2, records the commit and tree,
/// runs `shardlift killer-demo` for both barriers, verifies each bundle and writes
/// SHA256SUMS plus an in-toto/SLSA statement. None of that exists yet, so every
/// subcommand is refused with exit code 2 rather than printing invented evidence.
#[derive(Parser, Debug)]
#[command(name = "pipeline", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    eprintln!("pipeline: no subcommands are implemented yet; see `pipeline --help`");
    std::process::exit(2);
}
