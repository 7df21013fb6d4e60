//! `verify-release`: re-check a release-evidence directory without changing it.
//!
//! Order, stopping at the first failure (each error names the file): the directory;
//! `SHA256SUMS` parses strictly; every file present is listed and every listed file is
//! present and a regular file; every digest matches; the layout is exactly the expected
//! one; the signature (when `--allowed-signers` is given); no file holds an absolute path;
//! both bundles verify; the Statement decodes, is canonical, and agrees with the files,
//! the pins and the bundles; the summary agrees with the bundles and the Statement; each
//! transcript agrees with its bundle.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use shardlift::core::canonical::CanonicalError;
use shardlift::core::digest::Digest;
use shardlift::dataset::FASHION_MNIST;
use shardlift::evidence::bundle::BundleError;

use super::error::{io, ReleaseError};
use super::pins::{self, BARRIERS, LIBTORCH_WHEELS};
use super::scan;
use super::statement::{Statement, BUILDER_ID, BUILD_TYPE, PREDICATE_TYPE, STATEMENT_CAP};
use super::summary::{ReleaseSummary, RunStatus, RunSummary};
use super::sums;
use crate::intoto::{ResourceDescriptor, STATEMENT_TYPE};

/// The largest file a release-evidence directory may hold.
const FILE_CAP: u64 = 16 << 20;

/// How the signature was handled.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "status", rename_all = "kebab-case")]
pub enum SignatureCheck {
    /// Verified against the allowed signers; the matching principal.
    Verified {
        principal: String,
    },
    /// `SHA256SUMS.sig` exists but no `--allowed-signers` was given.
    PresentUnchecked,
    Absent,
}

/// A verified release-evidence directory.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Verified {
    pub status: &'static str,
    pub commit: String,
    pub tree: String,
    pub files: usize,
    pub signature: SignatureCheck,
    /// The runtime-source rule and blob ids the evidence recorded.
    #[serde(skip)]
    pub rule: Vec<String>,
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

/// Verifies the release evidence in `dir`; with `allowed_signers`, a valid signature over
/// `SHA256SUMS` in the release namespace is required.
pub fn verify(dir: &Path, allowed_signers: Option<&Path>) -> Result<Verified, ReleaseError> {
    let metadata = dir.symlink_metadata().map_err(io(dir))?;
    if !metadata.is_dir() {
        return Err(ReleaseError::NotADirectory(dir.to_owned()));
    }
    // ---- SHA256SUMS and the files it lists ----
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
    let sums_text = String::from_utf8(sums_bytes).map_err(|_| ReleaseError::MalformedSums {
        line: 1,
        reason: "not UTF-8".into(),
    })?;
    let listed = sums::parse(&sums_text)?;
    let listed_names: BTreeSet<&str> = listed.iter().map(|(n, _)| n.as_str()).collect();
    let present = walk(dir)?;
    for (name, regular) in &present {
        if name == pins::SHA256SUMS || name == pins::SIGNATURE {
            if !regular {
                return Err(ReleaseError::NotRegular { name: name.clone() });
            }
            continue;
        }
        if !listed_names.contains(name.as_str()) {
            return Err(ReleaseError::Unlisted { name: name.clone() });
        }
        if !regular {
            return Err(ReleaseError::NotRegular { name: name.clone() });
        }
    }
    let mut files: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (name, expected) in &listed {
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
    let with_receipt = files.contains_key(pins::RECEIPT);
    let expected_files = pins::expected_files(with_receipt);
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

    // ---- signature ----
    let signature_path = dir.join(pins::SIGNATURE);
    let signature_present = signature_path.symlink_metadata().is_ok();
    let signature = match allowed_signers {
        Some(allowed) => {
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
            SignatureCheck::Verified { principal }
        }
        None if signature_present => SignatureCheck::PresentUnchecked,
        None => SignatureCheck::Absent,
    };

    // ---- path-free ----
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

    // ---- bundles ----
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

    // ---- the Statement ----
    let statement = check_statement(&files, &bundles)?;
    if let Some(bytes) = files.get(pins::RECEIPT) {
        let receipt = crate::receipt::schema::Receipt::decode(bytes).map_err(|e| {
            ReleaseError::Malformed {
                name: pins::RECEIPT.into(),
                message: e.to_string(),
            }
        })?;
        let revision = &statement
            .predicate
            .build_definition
            .external_parameters
            .source_revision;
        require(&receipt.shardlift.commit == revision, pins::RECEIPT, || {
            format!(
                "the receipt records commit {}, not {revision}",
                receipt.shardlift.commit
            )
        })?;
    }
    let source = &statement.predicate.build_definition.resolved_dependencies[0];
    let commit = source.digest.get("gitCommit").cloned().unwrap_or_default();
    let tree = source.digest.get("gitTree").cloned().unwrap_or_default();
    let runtime_sources: BTreeMap<String, String> = statement
        .predicate
        .build_definition
        .resolved_dependencies
        .iter()
        .filter(|d| d.annotation("runtimeSource") == Some(&serde_json::Value::Bool(true)))
        .filter_map(|d| Some((d.name.clone()?, d.digest.get("gitBlob")?.clone())))
        .collect();

    // ---- the summary ----
    let summary_bytes = &files[pins::SUMMARY];
    let summary: ReleaseSummary =
        shardlift::core::canonical::decode(summary_bytes).map_err(|e| match e {
            CanonicalError::NotCanonical { .. } => ReleaseError::NonCanonical {
                name: pins::SUMMARY.into(),
            },
            e => ReleaseError::Malformed {
                name: pins::SUMMARY.into(),
                message: e.to_string(),
            },
        })?;
    require(
        summary.source.commit == commit && summary.source.tree == tree,
        pins::SUMMARY,
        || "its commit/tree differ from the Statement's".into(),
    )?;
    require(
        summary.source.runtime_sources == runtime_sources.len() as u64,
        pins::SUMMARY,
        || "its runtime-source count differs from the Statement's".into(),
    )?;
    let expected_runs: Vec<RunSummary> = BARRIERS
        .iter()
        .map(|barrier| RunSummary::from_bundle(&pins::bundle_folder(barrier), &bundles[barrier].0))
        .collect();
    require(summary.runs == expected_runs, pins::SUMMARY, || {
        "its runs differ from what the bundles show".into()
    })?;
    require(
        summary.nonclaims
            == pins::NONCLAIMS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        pins::SUMMARY,
        || "its nonclaims differ from this pipeline's".into(),
    )?;

    // ---- transcripts ----
    for barrier in BARRIERS {
        let audit_sha256 = bundles[barrier].0.audit_sha256;
        check_transcript(
            &files,
            &pins::demo_transcript(barrier),
            &format!("$ shardlift killer-demo --run-directory <runs>/{barrier} --barrier {barrier} --seed 0 --repository <repository> --expected-revision {commit} "),
            barrier,
            audit_sha256,
            "passed",
        )?;
        check_transcript(
            &files,
            &pins::verify_transcript(barrier),
            &format!("$ shardlift verify-bundle --bundle-directory <runs>/{barrier}/bundle\n"),
            barrier,
            audit_sha256,
            "verified",
        )?;
    }

    Ok(Verified {
        status: "verified",
        commit,
        tree,
        files: files.len() + 1 + usize::from(signature_present),
        signature,
        rule: statement
            .predicate
            .build_definition
            .internal_parameters
            .runtime_source_rule
            .clone(),
        runtime_sources,
    })
}

fn check_transcript(
    files: &BTreeMap<String, Vec<u8>>,
    name: &str,
    header: &str,
    barrier: &str,
    audit_sha256: Digest,
    status: &str,
) -> Result<(), ReleaseError> {
    let text = String::from_utf8_lossy(&files[name]);
    require(text.starts_with(header), name, || {
        format!(
            "does not start with the expected command line {:?}",
            header.trim_end()
        )
    })?;
    let Some((_, rest)) = text.split_once("\nresult: exit code 0\n--- stderr ---\n") else {
        return Err(inconsistent(name, "does not record a successful exit"));
    };
    let Some((_, stdout)) = rest.rsplit_once("--- stdout ---\n") else {
        return Err(inconsistent(name, "has no stdout section"));
    };
    let record: serde_json::Value = serde_json::from_str(stdout.trim())
        .map_err(|e| inconsistent(name, format!("its stdout is not one JSON record: {e}")))?;
    require(
        record.get("status").and_then(|v| v.as_str()) == Some(status)
            && record.get("barrier").and_then(|v| v.as_str()) == Some(barrier)
            && record.get("audit_sha256").and_then(|v| v.as_str())
                == Some(audit_sha256.to_hex().as_str()),
        name,
        || format!("its record does not show status {status:?} for the bundle of {barrier}"),
    )
}

fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn check_statement(
    files: &BTreeMap<String, Vec<u8>>,
    bundles: &BTreeMap<
        &str,
        (
            shardlift::evidence::bundle::BundleSummary,
            shardlift::evidence::bundle::AuditRecord,
        ),
    >,
) -> Result<Statement, ReleaseError> {
    let name = pins::STATEMENT;
    let bytes = &files[name];
    if bytes.len() as u64 > STATEMENT_CAP {
        return Err(inconsistent(name, "too large"));
    }
    let statement: Statement =
        serde_json::from_slice(bytes).map_err(|e| ReleaseError::Malformed {
            name: name.into(),
            message: e.to_string(),
        })?;
    let canonical =
        serde_json_canonicalizer::to_vec(&statement).map_err(|e| ReleaseError::Malformed {
            name: name.into(),
            message: e.to_string(),
        })?;
    if canonical != *bytes {
        return Err(ReleaseError::NonCanonical { name: name.into() });
    }
    require(
        statement.statement_type == STATEMENT_TYPE && statement.predicate_type == PREDICATE_TYPE,
        name,
        || "not an in-toto Statement v1 with a SLSA provenance v1 predicate".into(),
    )?;
    let definition = &statement.predicate.build_definition;
    require(
        definition.build_type == BUILD_TYPE
            && statement.predicate.run_details.builder.id == BUILDER_ID,
        name,
        || "unknown buildType or builder".into(),
    )?;

    // Subjects: exactly the bundle files, with their SHA-256.
    let mut expected_subjects = Vec::new();
    let mut expected_byproducts = Vec::new();
    for file in pins::expected_files(files.contains_key(pins::RECEIPT)) {
        let descriptor = ResourceDescriptor::named(
            file.clone(),
            &[("sha256", Digest::of(&files[&file]).to_hex())],
        );
        if file.starts_with("bundles/") {
            expected_subjects.push(descriptor);
        } else if file != pins::STATEMENT {
            expected_byproducts.push(descriptor);
        }
    }
    // A subject or byproduct whose digest differs names the file it describes.
    for (kind, listed, expected) in [
        ("subject", &statement.subject, &expected_subjects),
        (
            "byproduct",
            &statement.predicate.run_details.byproducts,
            &expected_byproducts,
        ),
    ] {
        let names = |list: &[ResourceDescriptor]| -> Vec<Option<String>> {
            list.iter().map(|d| d.name.clone()).collect()
        };
        require(names(listed) == names(expected), name, || {
            format!("its {kind}s are not exactly {:?}", names(expected))
        })?;
        for (found, wanted) in listed.iter().zip(expected.iter()) {
            let file = wanted.name.as_deref().unwrap_or_default();
            require(found == wanted, file, || {
                format!("its SHA-256 is not the {kind} digest release-evidence.json binds")
            })?;
        }
    }

    // Dependencies: the source first, then the wheels, the dataset and runtime sources.
    let dependencies = &definition.resolved_dependencies;
    let source = dependencies
        .first()
        .filter(|d| d.name.as_deref() == Some("source"))
        .ok_or_else(|| inconsistent(name, "the first resolved dependency is not the source"))?;
    let commit = source
        .digest
        .get("gitCommit")
        .map(String::as_str)
        .unwrap_or("");
    let tree = source
        .digest
        .get("gitTree")
        .map(String::as_str)
        .unwrap_or("");
    require(
        is_hex(commit, 40) && is_hex(tree, 40) && source.digest.len() == 2,
        name,
        || "the source does not bind a 40-hex gitCommit and gitTree".into(),
    )?;
    require(
        definition.external_parameters.source_revision == commit,
        name,
        || "externalParameters.sourceRevision differs from gitCommit".into(),
    )?;
    require(
        definition.external_parameters.barriers == BARRIERS.map(String::from)
            && definition.external_parameters.seed == 0,
        name,
        || "externalParameters name other barriers or another seed".into(),
    )?;
    let find = |dependency: &str| {
        dependencies
            .iter()
            .find(|d| d.name.as_deref() == Some(dependency))
    };
    for wheel in LIBTORCH_WHEELS {
        let found = find(wheel.file_name);
        require(
            found.is_some_and(|d| {
                d.digest.get("sha256").map(String::as_str) == Some(wheel.sha256)
                    && d.uri.as_deref()
                        == Some(&format!("pkg:pypi/{}@{}", wheel.package, wheel.version))
            }),
            name,
            || {
                format!(
                    "the wheel {} is not bound to its pinned SHA-256",
                    wheel.file_name
                )
            },
        )?;
    }
    for pin in FASHION_MNIST.resources {
        let dependency = format!("fashion-mnist/{}.gz", pin.name);
        let found = find(&dependency);
        require(
            found.is_some_and(|d| {
                d.digest.get("sha256") == Some(&pin.gzip.sha256.to_hex())
                    && d.annotation("payloadSha256")
                        == Some(&serde_json::Value::String(pin.payload.sha256.to_hex()))
            }),
            name,
            || format!("{dependency} is not bound to its pins"),
        )?;
    }
    let rule = &definition.internal_parameters.runtime_source_rule;
    require(!rule.is_empty(), name, || {
        "the runtime-source rule is empty".into()
    })?;
    let mut runtime = 0usize;
    for dependency in dependencies {
        if dependency.annotation("runtimeSource") != Some(&serde_json::Value::Bool(true)) {
            continue;
        }
        runtime += 1;
        let path = dependency.name.as_deref().unwrap_or("");
        require(
            pins::rule_selects(rule, path)
                && dependency
                    .digest
                    .get("gitBlob")
                    .is_some_and(|b| is_hex(b, 40)),
            name,
            || format!("runtime source {path:?} is not selected by the rule or has no gitBlob"),
        )?;
    }
    require(runtime > 0, name, || {
        "no runtime sources are recorded".into()
    })?;
    for lock in ["Cargo.lock", "ci/libtorch.lock"] {
        require(
            find(lock).is_some_and(|d| {
                d.digest.get("sha256").is_some_and(|s| is_hex(s, 64))
                    && d.digest.get("gitBlob").is_some_and(|b| is_hex(b, 40))
            }),
            name,
            || format!("{lock} is not bound by sha256 and gitBlob"),
        )?;
    }

    // Build identity.
    let identity = &definition.internal_parameters.build_identity;
    require(
        is_hex(&identity.shardlift_sha256, 64)
            && is_hex(&identity.pipeline_sha256, 64)
            && identity.tch_version == pins::TCH_VERSION
            && identity.libtorch_version == pins::LIBTORCH_VERSION,
        name,
        || "the build identity is malformed or names other versions".into(),
    )?;
    for required in ["torch/lib/libtorch_cpu.so", "torch/lib/libc10.so"] {
        require(
            identity
                .loaded_libraries
                .iter()
                .any(|l| l.name == required && is_hex(&l.sha256, 64)),
            name,
            || format!("the loaded libraries do not include {required} with its SHA-256"),
        )?;
    }
    require(
        definition.internal_parameters.nonclaims
            == pins::NONCLAIMS
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
        name,
        || "its nonclaims differ from this pipeline's".into(),
    )?;

    // The bundles were bound to the same commit, dataset and libtorch.
    let payloads: Vec<Digest> = FASHION_MNIST
        .resources
        .iter()
        .map(|p| p.payload.sha256)
        .collect();
    for (barrier, (_, audit)) in bundles {
        require(
            audit.build.source_revision.as_deref() == Some(commit)
                && audit.build.libtorch_version == pins::LIBTORCH_VERSION
                && audit.build.tch_version == pins::TCH_VERSION
                && audit.build.dataset_payload_sha256 == payloads,
            name,
            || {
                format!(
                    "the bundle of {barrier} was bound to revision {:?}, libtorch {}, and other dataset pins than the Statement's",
                    audit.build.source_revision, audit.build.libtorch_version
                )
            },
        )?;
    }
    Ok(statement)
}

/// Reads a release directory's recorded runtime sources and compares them with the HEAD
/// tree of `repository`.
pub fn staleness(
    verified: &Verified,
    repository: &Path,
) -> Result<super::sources::Staleness, ReleaseError> {
    let head = super::sources::HeadTree::open(repository)?;
    let current = head.blobs(&verified.rule)?;
    Ok(super::sources::compare(
        &verified.commit,
        &verified.runtime_sources,
        &head.commit,
        &current,
    ))
}
