//! What the release records of itself, checked against what it holds: the receipt it
//! names, the summary of each run, and each transcript line by line.
use super::*;

/// What the (checked) Statement records about the source and the binaries.
pub(super) struct Recorded {
    pub(super) commit: String,
    pub(super) tree: String,
    pub(super) rule: Vec<String>,
    /// Runtime-source path → blob id.
    pub(super) runtime_sources: BTreeMap<String, String>,
    /// The runtime-source dependencies as recorded, in order.
    pub(super) sources: Vec<ResourceDescriptor>,
    pub(super) shardlift_sha256: String,
    pub(super) pipeline_sha256: String,
    pub(super) cpu_kernel_path: Option<String>,
}

impl Recorded {
    pub(super) fn of(statement: &Statement) -> Recorded {
        let definition = &statement.predicate.build_definition;
        // check_statement made sure the first dependency is the source.
        let source = definition.resolved_dependencies.first();
        let digest = |key: &str| {
            source
                .and_then(|s| s.digest.get(key))
                .cloned()
                .unwrap_or_default()
        };
        let sources: Vec<ResourceDescriptor> = definition
            .resolved_dependencies
            .iter()
            .filter(|d| d.annotation("runtimeSource") == Some(&serde_json::Value::Bool(true)))
            .cloned()
            .collect();
        let identity = &definition.internal_parameters.build_identity;
        Recorded {
            commit: digest("gitCommit"),
            tree: digest("gitTree"),
            rule: definition.internal_parameters.runtime_source_rule.clone(),
            runtime_sources: sources
                .iter()
                .filter_map(|d| Some((d.name.clone()?, d.digest.get("gitBlob")?.clone())))
                .collect(),
            sources,
            shardlift_sha256: identity.shardlift_sha256.clone(),
            pipeline_sha256: identity.pipeline_sha256.clone(),
            cpu_kernel_path: identity.cpu_kernel_path.clone(),
        }
    }
}

/// The receipt, when present, records the Statement's commit and tree and verifies under
/// `policy`, its carried shards (if the policy admits any) checked against `repo`.
pub(super) fn check_receipt(
    files: &BTreeMap<String, Vec<u8>>,
    recorded: &Recorded,
    policy: &ReceiptPolicy,
    repo: Option<&Repo>,
) -> Result<Option<ReceiptCheck>, ReleaseError> {
    let Some(bytes) = files.get(pins::RECEIPT) else {
        return Ok(None);
    };
    let receipt =
        crate::receipt::schema::Receipt::decode(bytes).map_err(|e| ReleaseError::Malformed {
            name: pins::RECEIPT.into(),
            message: e.to_string(),
        })?;
    let ext = &receipt.shardlift;
    for (field, in_receipt, in_statement) in [
        ("commit", &ext.commit, &recorded.commit),
        ("tree", &ext.tree, &recorded.tree),
    ] {
        if in_receipt != in_statement {
            return Err(ReleaseError::ReceiptSource {
                field,
                receipt: in_receipt.clone(),
                statement: in_statement.clone(),
            });
        }
    }
    let carry = receipt_verify::check_receipt(&receipt, policy, repo)
        .map_err(|e| ReleaseError::ReceiptRejected(Box::new(e)))?;
    Ok(Some(ReceiptCheck {
        shards: ext.shards.len(),
        tests: receipt.counts().total(),
        carried: match carry {
            CarryCheck::NoneCarried => Vec::new(),
            CarryCheck::Checked(shards) | CarryCheck::Unchecked(shards) => shards,
        },
    }))
}

/// The summary decodes canonically and agrees with the Statement and the bundles.
pub(super) fn check_summary(
    files: &BTreeMap<String, Vec<u8>>,
    bundles: &Bundles<'_>,
    recorded: &Recorded,
) -> Result<(), ReleaseError> {
    let summary: ReleaseSummary = shardlift::core::canonical::decode(&files[pins::SUMMARY])
        .map_err(|e| match e {
            CanonicalError::NotCanonical { .. } => ReleaseError::NonCanonical {
                name: pins::SUMMARY.into(),
            },
            e => ReleaseError::Malformed {
                name: pins::SUMMARY.into(),
                message: e.to_string(),
            },
        })?;
    require(
        summary.source.commit == recorded.commit && summary.source.tree == recorded.tree,
        pins::SUMMARY,
        || "its commit/tree differ from the Statement's".into(),
    )?;
    require(
        summary.source.runtime_sources == recorded.runtime_sources.len() as u64,
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
    )
}

/// Each transcript shows its command and a record of its bundle.
pub(super) fn check_transcripts(
    files: &BTreeMap<String, Vec<u8>>,
    bundles: &Bundles<'_>,
    commit: &str,
) -> Result<(), ReleaseError> {
    for barrier in BARRIERS {
        let audit_sha256 = bundles[barrier].0.audit_sha256;
        check_transcript(
            files,
            &pins::demo_transcript(barrier),
            &format!("$ shardlift killer-demo --run-directory <runs>/{barrier} --barrier {barrier} --seed 0 --repository <repository> --expected-revision {commit} "),
            barrier,
            audit_sha256,
            "passed",
        )?;
        check_transcript(
            files,
            &pins::verify_transcript(barrier),
            &format!("$ shardlift verify-bundle --bundle-directory <runs>/{barrier}/bundle\n"),
            barrier,
            audit_sha256,
            "verified",
        )?;
    }
    Ok(())
}

pub(super) fn check_transcript(
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

pub(super) fn is_hex(text: &str, len: usize) -> bool {
    text.len() == len
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}
