//! `shardlift verify-bundle`.
use std::path::PathBuf;

use shardlift::evidence::bundle::reevaluate::{self, Reevaluation, RunStores};
use shardlift::evidence::bundle::{self, BundleSummary};

/// Verify an evidence bundle without changing it: closed schemas, canonical bytes,
/// SHA-256 digests, bindings between the four records, completeness (audit.json), regular
/// files only, each linked by its bundle name alone, read without following symlinks and
/// with their identity (device, inode, size, modification time) unchanged across the read,
/// that every claim follows from the recorded facts, and that every evaluation figure is
/// what it must be: the pinned test split's digests and image count, the probe's shape,
/// and, for two evaluations of one state, each other's.
///
/// Where the run's stores are beside the bundle (`<run>/reference-store`,
/// `<run>/crash-store`), a build with the torch engine loads each evaluated checkpoint
/// from its store and evaluates it again on the pinned test split (read from the dataset
/// cache, never downloaded): every recorded figure must match. The JSON's `reevaluation`
/// names the records re-evaluated and, for the others, why not.
///
/// Prints a JSON summary on stdout. Exit codes: 0 verified; 1 rejected (the JSON names
/// the error kind); 2 bad command line.
#[derive(clap::Args, Debug)]
pub struct VerifyBundleArgs {
    /// The bundle directory (a run directory's `bundle/`).
    #[arg(long, value_name = "DIR")]
    pub bundle_directory: PathBuf,
    /// Where the pinned Fashion-MNIST payloads are cached, for the re-evaluation (default:
    /// $SHARDLIFT_CACHE_DIR, else $XDG_CACHE_HOME/shardlift/data, else
    /// ~/.cache/shardlift/data).
    #[arg(long, value_name = "DIR")]
    pub cache_directory: Option<PathBuf>,
}

/// The verified bundle's record on stdout: the summary, and what re-evaluation did.
#[derive(serde::Serialize)]
struct Report<'a> {
    #[serde(flatten)]
    summary: &'a BundleSummary,
    reevaluation: &'a Reevaluation,
}

pub fn run(args: VerifyBundleArgs) -> anyhow::Result<()> {
    let cache_directory = args
        .cache_directory
        .clone()
        .unwrap_or_else(shardlift::dataset::defaults::cache_directory);
    let checked = bundle::verify_pinned(&args.bundle_directory, &shardlift::dataset::FASHION_MNIST)
        .and_then(|verified| {
            let reevaluation = reevaluate::reevaluate(
                &verified,
                &RunStores::beside(&args.bundle_directory),
                &mut || shardlift::dataset::load(&cache_directory).map(|data| data.test),
            )?;
            Ok((verified.summary, reevaluation))
        });
    match checked {
        Ok((summary, reevaluation)) => {
            for skipped in &reevaluation.not_reevaluated {
                eprintln!(
                    "verify-bundle: {} was not evaluated again: {}",
                    skipped.name,
                    skipped.reason.describe()
                );
            }
            if reevaluation.test_split_error.is_some() {
                // The error names the cache's path; a transcript of this command must not.
                eprintln!(
                    "verify-bundle: the pinned test split did not load from the dataset cache (fill it with `shardlift dataset fetch`, or name another with --cache-directory)"
                );
            }
            outln!(
                "{}",
                serde_json::to_string(&Report {
                    summary: &summary,
                    reevaluation: &reevaluation,
                })?
            );
            Ok(())
        }
        Err(error) => {
            outln!(
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
