//! `shardlift verify-bundle`.
use std::path::PathBuf;

/// Verify an evidence bundle without changing it: closed schemas, canonical bytes,
/// SHA-256 digests, bindings between the four records, completeness (audit.json), regular
/// files only, read without following symlinks and with their identity (device, inode,
/// size, modification time) unchanged across the read, and that every claim follows from
/// the recorded facts. It has no store: roots are compared as the run recorded them, not
/// recomputed.
///
/// Prints a JSON summary on stdout. Exit codes: 0 verified; 1 rejected (the JSON names
/// the error kind); 2 bad command line.
#[derive(clap::Args, Debug)]
pub struct VerifyBundleArgs {
    /// The bundle directory (a run directory's `bundle/`).
    #[arg(long, value_name = "DIR")]
    pub bundle_directory: PathBuf,
}

pub fn run(args: VerifyBundleArgs) -> anyhow::Result<()> {
    match shardlift::evidence::bundle::verify(&args.bundle_directory) {
        Ok(summary) => {
            println!("{}", serde_json::to_string(&summary)?);
            Ok(())
        }
        Err(error) => {
            println!(
                "{}",
                serde_json::json!({"status": "rejected", "error_kind": error.kind(), "error": error.to_string()})
            );
            Err(anyhow::Error::new(error).context(format!(
                "bundle {} rejected",
                args.bundle_directory.display()
            )))
        }
    }
}
