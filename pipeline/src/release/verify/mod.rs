//! `verify-release`: re-check a release-evidence directory without changing it.
//!
//! Order, stopping at the first failure (each error names the file): the directory;
//! `SHA256SUMS` parses strictly; every file present is listed and every listed file is
//! present and a regular file; every digest matches; the layout is exactly the expected
//! one; the signature (when `--allowed-signers` is given); no file holds an absolute path;
//! both bundles verify; the Statement decodes, is canonical, and agrees with the files,
//! the pins and the bundles; the summary agrees with the bundles and the Statement; each
//! transcript agrees with its bundle. With a repository: the recorded commit is in it with
//! the recorded tree, and every source input the Statement binds (the runtime sources by
//! blob id, `Cargo.lock` and `ci/libtorch.lock` also by SHA-256) is recomputed from the
//! blobs at that commit. The bundled receipt, when present, records the same commit and
//! tree and verifies under the release policy ([`ReceiptPolicy::release`]): consistent,
//! clean, every test passed, no carried shard unless allowed (and then checked against
//! the repository). With `--shardlift`/`--pipeline`, those binaries' SHA-256 must be the
//! recorded ones.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use shardlift::core::canonical::CanonicalError;
use shardlift::core::digest::Digest;
use shardlift::evidence::bundle::BundleError;

use super::error::{io, ReleaseError};
use super::pins::{self, BARRIERS};
use super::scan;
use super::sources::{CommitTree, SourceInputs};
use super::statement::Statement;
use super::summary::{ReleaseSummary, RunStatus, RunSummary};
use super::sums;
use crate::git::Repo;
use crate::intoto::ResourceDescriptor;
use crate::receipt::verify::{self as receipt_verify, CarryCheck, Policy as ReceiptPolicy};
use statement::{check_statement, Bundles};

mod recorded;
mod statement;
use recorded::{check_receipt, check_summary, check_transcripts, is_hex, Recorded};

/// The largest file a release-evidence directory may hold.
const FILE_CAP: u64 = 16 << 20;

/// How the signature was handled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum SignatureCheck {
    /// Verified against the allowed signers; the matching principal.
    Verified {
        /// The principals field of the matching `allowed_signers` line.
        principal: String,
    },
    /// `SHA256SUMS.sig` exists but no `--allowed-signers` was given.
    PresentUnchecked,
    /// There is no `SHA256SUMS.sig`.
    Absent,
}

/// What `verify-release` checks beyond the directory itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct VerifyOptions<'a> {
    /// An OpenSSH allowed_signers file: `SHA256SUMS.sig` must verify against it.
    pub allowed_signers: Option<&'a Path>,
    /// A repository that must hold the recorded commit and tree, whose blobs at that
    /// commit must give every recorded source input.
    pub repository: Option<&'a Path>,
    /// Admit carried shards in the bundled receipt (only checked ones: needs `repository`).
    pub allow_carried: bool,
    /// The shardlift binary whose SHA-256 must be the recorded one.
    pub shardlift: Option<&'a Path>,
    /// The pipeline binary whose SHA-256 must be the recorded one.
    pub pipeline: Option<&'a Path>,
}

/// What the bundled receipt showed.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ReceiptCheck {
    /// How many shards the receipt holds.
    pub shards: usize,
    /// How many tests its test table holds.
    pub tests: u64,
    /// Carried shards, each of which met the five carry-forward conditions.
    pub carried: Vec<String>,
}

/// Whether the recorded source was checked against a repository.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum SourceCheck {
    /// No repository was given.
    NotChecked,
    /// The commit and tree are in the repository and the recorded inputs match its blobs.
    Matched {
        /// How many runtime sources were compared.
        runtime_sources: usize,
    },
}

/// A verified release-evidence directory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verified {
    /// Always `verified`.
    pub status: &'static str,
    /// The commit the evidence binds.
    pub commit: String,
    /// Its tree id.
    pub tree: String,
    /// How many files the directory holds, `SHA256SUMS` and its signature included.
    pub files: usize,
    /// How the signature was handled.
    pub signature: SignatureCheck,
    /// The bundled receipt, when there is one.
    pub receipt: Option<ReceiptCheck>,
    /// Whether the recorded source was checked against a repository.
    pub source: SourceCheck,
    /// The binaries whose SHA-256 was compared with the recorded one.
    pub binaries_checked: Vec<&'static str>,
    /// The CPU kernel path the evidence was recorded on (`None` before it was recorded).
    pub cpu_kernel_path: Option<String>,
    /// This machine's CPU kernel path: where it differs from the recorded one, a rerun
    /// here cannot reproduce the bundles (`pipeline reproduce` refuses).
    pub cpu_kernel_path_here: String,
    /// The runtime-source rule the evidence recorded.
    #[serde(skip)]
    pub rule: Vec<String>,
    /// Path → blob id of every runtime source the evidence recorded.
    #[serde(skip)]
    pub runtime_sources: BTreeMap<String, String>,
}

fn inconsistent(name: &str, claim: impl Into<String>) -> ReleaseError {
    ReleaseError::Inconsistent {
        name: name.to_owned(),
        claim: claim.into(),
    }
}

fn require(
    condition: bool,
    name: &str,
    claim: impl FnOnce() -> String,
) -> Result<(), ReleaseError> {
    if condition {
        Ok(())
    } else {
        Err(inconsistent(name, claim()))
    }
}

/// Every non-directory entry below `root`, relative, `/`-separated, sorted.
fn walk(root: &Path) -> Result<Vec<(String, bool)>, ReleaseError> {
    let mut found = Vec::new();
    let mut pending = vec![(root.to_owned(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let relative = format!("{prefix}{name}");
            let kind = entry.file_type().map_err(io(&entry.path()))?;
            if kind.is_dir() {
                pending.push((entry.path(), format!("{relative}/")));
            } else {
                found.push((relative, kind.is_file()));
            }
        }
    }
    found.sort();
    Ok(found)
}

fn read_member(dir: &Path, name: &str) -> Result<Vec<u8>, ReleaseError> {
    let path = dir.join(name);
    let metadata = path.symlink_metadata().map_err(|_| ReleaseError::Missing {
        name: name.to_owned(),
    })?;
    if !metadata.is_file() {
        return Err(ReleaseError::NotRegular {
            name: name.to_owned(),
        });
    }
    if metadata.len() > FILE_CAP {
        return Err(inconsistent(name, format!("larger than {FILE_CAP} bytes")));
    }
    std::fs::read(&path).map_err(io(&path))
}

/// The bundle member a bundle error concerns.
fn bundle_error_file(error: &BundleError) -> Option<&str> {
    match error {
        BundleError::MissingFile { name }
        | BundleError::UnexpectedFile { name }
        | BundleError::NotRegularFile { name }
        | BundleError::TooLarge { name, .. }
        | BundleError::NonCanonical { name }
        | BundleError::Malformed { name, .. }
        | BundleError::BindingMismatch { name, .. } => Some(name),
        BundleError::Incomplete | BundleError::SelfDigestMismatch { .. } => {
            Some(shardlift::evidence::bundle::AUDIT)
        }
        _ => None,
    }
}

/// Verifies the release evidence in `dir` (see the module documentation for the order).
pub fn verify(dir: &Path, options: &VerifyOptions<'_>) -> Result<Verified, ReleaseError> {
    let metadata = dir.symlink_metadata().map_err(io(dir))?;
    if !metadata.is_dir() {
        return Err(ReleaseError::NotADirectory(dir.to_owned()));
    }
    let sums = read_sums(dir)?;
    let files = read_listed_files(dir, &sums.listed)?;
    let signature = check_signature(dir, options.allowed_signers, &sums.text)?;
    refuse_paths(&files)?;
    let bundles = verify_bundles(dir, &files)?;
    let statement = check_statement(&files, &bundles)?;
    let recorded = Recorded::of(&statement);
    check_summary(&files, &bundles, &recorded)?;
    check_transcripts(&files, &bundles, &recorded.commit)?;
    let source_tree = match options.repository {
        Some(repository) => Some(CommitTree::at(repository, &recorded.commit)?),
        None => None,
    };
    let source = match &source_tree {
        Some(tree) => check_source_at(tree, &recorded)?,
        None => SourceCheck::NotChecked,
    };
    let receipt = check_receipt(
        &files,
        &recorded,
        &ReceiptPolicy::release(options.allow_carried),
        source_tree.as_ref().map(CommitTree::repository),
    )?;
    let binaries_checked = check_binaries(options, &recorded)?;
    let signature_present = signature != SignatureCheck::Absent;
    Ok(Verified {
        status: "verified",
        commit: recorded.commit,
        tree: recorded.tree,
        files: files.len() + 1 + usize::from(signature_present),
        signature,
        receipt,
        source,
        binaries_checked,
        cpu_kernel_path: recorded.cpu_kernel_path,
        cpu_kernel_path_here: shardlift::evidence::kernel_path::this_machine(),
        rule: recorded.rule,
        runtime_sources: recorded.runtime_sources,
    })
}

/// The recorded commit's tree is the recorded tree, and the source inputs recomputed from
/// its blobs under the recorded rule are exactly the recorded ones, descriptor for
/// descriptor (each runtime source's blob id; the lock files' SHA-256 too).
fn check_source_at(tree: &CommitTree, recorded: &Recorded) -> Result<SourceCheck, ReleaseError> {
    if tree.tree != recorded.tree {
        return Err(ReleaseError::TreeMismatch {
            commit: recorded.commit.clone(),
            recorded: recorded.tree.clone(),
            actual: tree.tree.clone(),
        });
    }
    let inputs = SourceInputs::read(tree, recorded.rule.clone())?;
    let expected: Vec<ResourceDescriptor> = inputs.descriptors().collect();
    let mismatch = |path: &str, claim: String| ReleaseError::SourceMismatch {
        path: path.to_owned(),
        commit: recorded.commit.clone(),
        claim,
    };
    let by_name = |list: &[ResourceDescriptor]| -> BTreeMap<String, ResourceDescriptor> {
        list.iter()
            .map(|d| (d.name.clone().unwrap_or_default(), d.clone()))
            .collect()
    };
    let expected_by_name = by_name(&expected);
    let recorded_by_name = by_name(&recorded.sources);
    for (path, found) in &recorded_by_name {
        match expected_by_name.get(path) {
            None => {
                return Err(mismatch(
                    path,
                    "is recorded, but the recorded rule selects no such blob".into(),
                ))
            }
            Some(wanted) if wanted != found => {
                return Err(mismatch(
                    path,
                    format!(
                        "is recorded with digests {:?}, but its blob gives {:?}",
                        found.digest, wanted.digest
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(path) = expected_by_name
        .keys()
        .find(|path| !recorded_by_name.contains_key(*path))
    {
        return Err(mismatch(
            path,
            "is selected by the recorded rule, but not recorded".into(),
        ));
    }
    if recorded.sources != expected {
        return Err(mismatch(
            "(all)",
            "list is recorded out of order or with a duplicate".into(),
        ));
    }
    Ok(SourceCheck::Matched {
        runtime_sources: expected.len(),
    })
}

/// Each binary given has the SHA-256 the Statement records for it.
fn check_binaries(
    options: &VerifyOptions<'_>,
    recorded: &Recorded,
) -> Result<Vec<&'static str>, ReleaseError> {
    let mut checked = Vec::new();
    for (binary, path, digest) in [
        ("shardlift", options.shardlift, &recorded.shardlift_sha256),
        ("pipeline", options.pipeline, &recorded.pipeline_sha256),
    ] {
        let Some(path) = path else { continue };
        let actual = shardlift::durable::file_sha256(path)?;
        if actual.to_hex() != *digest {
            return Err(ReleaseError::BinaryMismatch {
                binary,
                path: path.to_owned(),
                recorded: digest.clone(),
                actual,
            });
        }
        checked.push(binary);
    }
    Ok(checked)
}

/// `SHA256SUMS`: its text and the (name, digest) lines it lists.
struct Sums {
    text: String,
    listed: Vec<(String, Digest)>,
}

fn read_sums(dir: &Path) -> Result<Sums, ReleaseError> {
    let sums_path = dir.join(pins::SHA256SUMS);
    match sums_path.symlink_metadata() {
        Ok(m) if m.is_file() => {}
        Ok(_) => {
            return Err(ReleaseError::NotRegular {
                name: pins::SHA256SUMS.into(),
            })
        }
        Err(_) => return Err(ReleaseError::MissingSums),
    }
    let sums_bytes = read_member(dir, pins::SHA256SUMS)?;
    let text = String::from_utf8(sums_bytes).map_err(|_| ReleaseError::MalformedSums {
        line: 1,
        reason: "not UTF-8".into(),
    })?;
    let listed = sums::parse(&text)?;
    Ok(Sums { text, listed })
}

/// Every file present is listed and regular; every listed file matches its digest; and
/// the files are exactly the expected layout. Returns them by name.
fn read_listed_files(
    dir: &Path,
    listed: &[(String, Digest)],
) -> Result<BTreeMap<String, Vec<u8>>, ReleaseError> {
    refuse_unlisted(dir, listed)?;
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (name, expected) in listed {
        if name == pins::SHA256SUMS || name == pins::SIGNATURE {
            return Err(ReleaseError::MalformedSums {
                line: 0,
                reason: format!("{name} must not list itself or the signature"),
            });
        }
        let bytes = read_member(dir, name)?;
        let actual = Digest::of(&bytes);
        if actual != *expected {
            return Err(ReleaseError::DigestMismatch {
                name: name.clone(),
                expected: *expected,
                actual,
            });
        }
        files.insert(name.clone(), bytes);
    }
    let expected_files = pins::expected_files(files.contains_key(pins::RECEIPT));
    for name in files.keys() {
        if !expected_files.contains(name) {
            return Err(ReleaseError::UnexpectedFile { name: name.clone() });
        }
    }
    for name in &expected_files {
        if !files.contains_key(name) {
            return Err(ReleaseError::MissingExpected { name: name.clone() });
        }
    }
    Ok(files)
}

/// Every file present (but SHA256SUMS and its signature) is listed, and a regular file.
fn refuse_unlisted(dir: &Path, listed: &[(String, Digest)]) -> Result<(), ReleaseError> {
    let listed_names: BTreeSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    for (name, regular) in walk(dir)? {
        if name == pins::SHA256SUMS || name == pins::SIGNATURE {
            if !regular {
                return Err(ReleaseError::NotRegular { name });
            }
            continue;
        }
        if !listed_names.contains(name.as_str()) {
            return Err(ReleaseError::Unlisted { name });
        }
        if !regular {
            return Err(ReleaseError::NotRegular { name });
        }
    }
    Ok(())
}

fn check_signature(
    dir: &Path,
    allowed_signers: Option<&Path>,
    sums_text: &str,
) -> Result<SignatureCheck, ReleaseError> {
    let signature_present = dir.join(pins::SIGNATURE).symlink_metadata().is_ok();
    let Some(allowed) = allowed_signers else {
        return Ok(if signature_present {
            SignatureCheck::PresentUnchecked
        } else {
            SignatureCheck::Absent
        });
    };
    if !signature_present {
        return Err(ReleaseError::SignatureMissing);
    }
    let armored = read_member(dir, pins::SIGNATURE)?;
    let armored = String::from_utf8(armored)
        .map_err(|_| inconsistent(pins::SIGNATURE, "the signature is not UTF-8 text"))?;
    let principal = crate::sshsig::verify(
        allowed,
        pins::SIGNATURE_NAMESPACE,
        sums_text.as_bytes(),
        &armored,
    )
    .map_err(ReleaseError::SignatureRejected)?;
    Ok(SignatureCheck::Verified { principal })
}

/// No file but the receipt holds an absolute path.
fn refuse_paths(files: &BTreeMap<String, Vec<u8>>) -> Result<(), ReleaseError> {
    for (name, bytes) in files
        .iter()
        .filter(|(name, _)| name.as_str() != pins::RECEIPT)
    {
        if let Some(excerpt) = scan::absolute_path_excerpt(&String::from_utf8_lossy(bytes)) {
            return Err(ReleaseError::PathLeak {
                name: name.clone(),
                excerpt,
            });
        }
    }
    Ok(())
}

/// Both bundles verify, are of their barrier, passed, and have a decodable audit.
fn verify_bundles(
    dir: &Path,
    files: &BTreeMap<String, Vec<u8>>,
) -> Result<Bundles<'static>, ReleaseError> {
    let mut bundles = BTreeMap::new();
    for barrier in BARRIERS {
        let folder = pins::bundle_folder(barrier);
        let summary =
            shardlift::evidence::bundle::verify(&dir.join(&folder)).map_err(|source| {
                let name = match bundle_error_file(&source) {
                    Some(file) => format!("{folder}/{file}"),
                    None => folder.clone(),
                };
                ReleaseError::BundleRejected {
                    name,
                    error: Box::new(source),
                }
            })?;
        let audit_name = format!("{folder}/{}", shardlift::evidence::bundle::AUDIT);
        require(summary.outcome.barrier == barrier, &audit_name, || {
            format!(
                "the bundle in {folder} is of barrier {}",
                summary.outcome.barrier
            )
        })?;
        let run_status = RunStatus::from(summary.run_status.as_str());
        require(run_status == RunStatus::Passed, &audit_name, || {
            format!(
                "the run's status is {:?}, not \"passed\"",
                summary.run_status
            )
        })?;
        let audit: shardlift::evidence::bundle::AuditRecord = files
            .get(&audit_name)
            .and_then(|bytes| shardlift::core::canonical::decode(bytes).ok())
            .ok_or_else(|| inconsistent(&audit_name, "does not decode"))?;
        bundles.insert(barrier, (summary, audit));
    }
    Ok(bundles)
}

/// Reads a release directory's recorded runtime sources and compares them with the HEAD
/// tree of `repository`.
pub fn staleness(
    verified: &Verified,
    repository: &Path,
) -> Result<super::sources::Staleness, ReleaseError> {
    let head = CommitTree::head(repository)?;
    let current = head.blobs(&verified.rule)?;
    Ok(super::sources::compare(
        &verified.commit,
        &verified.runtime_sources,
        &head.commit,
        &current,
    ))
}
