//! `reproduce`: the strongest check of release evidence is a rerun. Verify the evidence
//! against the repository, refuse a machine on another CPU kernel path than the recorded
//! one (libtorch computes other bits there), refuse a checkout whose HEAD has other runtime
//! sources than the recorded ones (the binary being run is built from it), rerun both barriers exactly as
//! `release-evidence` does — bound to a fresh clone of the repository at the recorded
//! commit in a scratch directory, so the runs bind the same commit and the caller's
//! checkout is never touched — and compare every file the runs produce (both bundles and
//! both transcripts) byte for byte with the recorded ones, naming the first difference.
//!
//! Not compared: the Statement, the summary and SHA256SUMS also bind the binaries' digests
//! (a build from another checkout path differs), and the receipt records a test run.
use std::path::{Path, PathBuf};

use super::error::ReleaseError;
use super::produce::{produce, ProduceOptions};
use super::sums;
use super::verify::{self, VerifyOptions};

/// The evidence folders a rerun reproduces byte for byte.
pub const REPRODUCED_FOLDERS: [&str; 2] = ["bundles/", "transcripts/"];

/// What the caller asked for.
#[derive(Clone, Debug)]
pub struct ReproduceOptions {
    /// The evidence directory to reproduce.
    pub dir: PathBuf,
    /// The repository holding the recorded commit; its HEAD's runtime sources must be the
    /// recorded ones.
    pub repository: PathBuf,
    /// The `shardlift` binary (built with `torch`) for the reruns.
    pub shardlift: PathBuf,
    /// The dataset cache the reruns use.
    pub cache_directory: PathBuf,
    /// The only dataset source, when given.
    pub source_directory: Option<PathBuf>,
}

/// A reproduced evidence directory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Reproduced {
    /// Always `reproduced`.
    pub status: &'static str,
    /// The commit the evidence records.
    pub recorded_commit: String,
    /// The commit the reruns were bound to (a fresh clone of it).
    pub rerun_commit: String,
    /// Every file compared (all identical).
    pub identical: Vec<String>,
}

/// Verifies the evidence against the repository, reruns it from a fresh clone of the
/// recorded commit, and requires every file of [`REPRODUCED_FOLDERS`] to be identical.
pub fn reproduce(options: &ReproduceOptions) -> Result<Reproduced, ReleaseError> {
    let verified = verify::verify(
        &options.dir,
        &VerifyOptions {
            allowed_signers: None,
            repository: Some(&options.repository),
            allow_carried: false,
            shardlift: None,
            pipeline: None,
        },
    )?;
    // Another kernel path computes other bits: refused before anything is rerun. Evidence
    // recorded before kernel paths were recorded is rerun (and compared) anywhere.
    if let Some(recorded) = &verified.cpu_kernel_path {
        if *recorded != verified.cpu_kernel_path_here {
            return Err(ReleaseError::OtherKernelPath {
                recorded: recorded.clone(),
                here: verified.cpu_kernel_path_here.clone(),
            });
        }
    }
    let staleness = verify::staleness(&verified, &options.repository)?;
    if staleness.stale {
        let mut differing: Vec<String> = staleness.changed.clone();
        differing.extend(staleness.added.iter().cloned());
        differing.extend(staleness.removed.iter().cloned());
        return Err(ReleaseError::NotReproducible {
            recorded: staleness.recorded_commit,
            head: staleness.current_commit,
            differing,
        });
    }
    let scratch = tempfile::Builder::new()
        .prefix("shardlift-reproduce-")
        .tempdir()
        .map_err(|e| super::error::io(&std::env::temp_dir())(e))?;
    let source = scratch.path().join("source");
    crate::git::Repo::clone_at(&options.repository, &source, &verified.commit)
        .map_err(|e| ReleaseError::Git(e.to_string()))?;
    let rerun = scratch.path().join("evidence");
    let produced = produce(&ProduceOptions {
        repository: source,
        out: rerun.clone(),
        sign_key: None,
        shardlift: options.shardlift.clone(),
        cache_directory: options.cache_directory.clone(),
        source_directory: options.source_directory.clone(),
        receipt: None,
    })?;
    let identical = compare(&options.dir, &rerun)?;
    Ok(Reproduced {
        status: "reproduced",
        recorded_commit: verified.commit,
        rerun_commit: produced.commit,
        identical,
    })
}

/// Compares every file of the reproduced folders, as SHA256SUMS lists them in both
/// directories: the same names, and the same bytes.
fn compare(recorded: &Path, rerun: &Path) -> Result<Vec<String>, ReleaseError> {
    let reproduced = |dir: &Path| -> Result<Vec<String>, ReleaseError> {
        let path = dir.join(super::pins::SHA256SUMS);
        let text = std::fs::read_to_string(&path).map_err(|e| super::error::io(&path)(e))?;
        Ok(sums::parse(&text)?
            .into_iter()
            .map(|(name, _)| name)
            .filter(|name| REPRODUCED_FOLDERS.iter().any(|f| name.starts_with(f)))
            .collect())
    };
    let recorded_names = reproduced(recorded)?;
    let rerun_names = reproduced(rerun)?;
    for name in &recorded_names {
        if !rerun_names.contains(name) {
            return Err(ReleaseError::NotReproduced {
                name: name.clone(),
                claim: "is recorded but the rerun did not produce it".into(),
            });
        }
    }
    for name in &rerun_names {
        if !recorded_names.contains(name) {
            return Err(ReleaseError::NotReproduced {
                name: name.clone(),
                claim: "was produced by the rerun but is not recorded".into(),
            });
        }
    }
    for name in &recorded_names {
        let read = |dir: &Path| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|e| super::error::io(&path)(e))
        };
        let (old, new) = (read(recorded)?, read(rerun)?);
        if old != new {
            let at = old
                .iter()
                .zip(&new)
                .position(|(a, b)| a != b)
                .unwrap_or(old.len().min(new.len()));
            return Err(ReleaseError::NotReproduced {
                name: name.clone(),
                claim: format!(
                    "differs from the rerun's at byte {at} ({} recorded bytes, {} rerun bytes)",
                    old.len(),
                    new.len()
                ),
            });
        }
    }
    Ok(recorded_names)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `files` under `dir` with a SHA256SUMS listing them.
    fn evidence(dir: &Path, files: &[(&str, &[u8])]) {
        let mut entries = Vec::new();
        for (name, bytes) in files {
            let path = dir.join(name);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(&path, bytes).expect("write");
            entries.push((
                (*name).to_owned(),
                shardlift::core::digest::Digest::of(bytes),
            ));
        }
        std::fs::write(
            dir.join(super::super::pins::SHA256SUMS),
            sums::render(&entries),
        )
        .expect("sums");
    }

    #[test]
    fn compare_names_the_first_file_whose_bytes_differ() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let common: &[u8] = b"same";
        evidence(
            &a,
            &[
                ("bundles/x/audit.json", common),
                ("transcripts/x.txt", b"one"),
                ("summary.json", b"names a commit"),
            ],
        );
        evidence(
            &b,
            &[
                ("bundles/x/audit.json", common),
                ("transcripts/x.txt", b"two"),
                ("summary.json", b"names another commit"),
            ],
        );
        match compare(&a, &b) {
            Err(ReleaseError::NotReproduced { name, claim }) => {
                assert_eq!(name, "transcripts/x.txt");
                assert!(claim.contains("at byte 0"), "{claim}");
            }
            other => panic!("{other:?}"),
        }
        // summary.json names the commit and is not compared.
        evidence(
            &b,
            &[
                ("bundles/x/audit.json", common),
                ("transcripts/x.txt", b"one"),
            ],
        );
        assert_eq!(
            compare(&a, &b).expect("identical"),
            vec!["bundles/x/audit.json", "transcripts/x.txt"]
        );
    }

    #[test]
    fn compare_names_a_file_the_rerun_did_not_produce() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        evidence(
            &a,
            &[
                ("bundles/x/audit.json", b"x"),
                ("bundles/x/extra.json", b"y"),
            ],
        );
        evidence(&b, &[("bundles/x/audit.json", b"x")]);
        match compare(&a, &b) {
            Err(ReleaseError::NotReproduced { name, .. }) => {
                assert_eq!(name, "bundles/x/extra.json")
            }
            other => panic!("{other:?}"),
        }
    }
}
