//! The release directory assembled from the runs: its files, the refusal of any host
//! path or name in them, the checksums and signature that seal it, and its installation.
use super::*;

/// Every evidence file but SHA256SUMS and its signature: the runs' files, the summary,
/// the receipt (when given) and the Statement, in that order.
pub(super) fn assemble(
    checked: &Preflight,
    runs: BarrierRuns,
    loaded_libraries: Vec<LoadedLibrary>,
) -> Result<Vec<Emitted>, ReleaseError> {
    let source = &checked.source;
    let summary = ReleaseSummary {
        schema: SUMMARY_SCHEMA.into(),
        version: SUMMARY_VERSION,
        source: SourceSummary {
            commit: source.commit.clone(),
            tree: source.tree.clone(),
            runtime_sources: source.inputs.runtime.len() as u64,
        },
        runs: runs.summaries,
        nonclaims: pins::NONCLAIMS.iter().map(|s| s.to_string()).collect(),
    };
    let summary_bytes =
        shardlift::core::canonical::encode(&summary).map_err(|e| ReleaseError::Encode {
            name: pins::SUMMARY.into(),
            message: e.to_string(),
        })?;
    let mut emitted = runs.emitted;
    emitted.push((pins::SUMMARY.into(), summary_bytes));
    if let Some(bytes) = &checked.receipt {
        emitted.push((pins::RECEIPT.into(), bytes.clone()));
    }
    let binaries = Binaries {
        shardlift_sha256: checked.shardlift_sha256,
        pipeline_sha256: checked.pipeline_sha256,
        loaded_libraries,
    };
    let statement = build_statement(source, &emitted, binaries);
    let statement_bytes =
        serde_json_canonicalizer::to_vec(&statement).map_err(|e| ReleaseError::Encode {
            name: pins::STATEMENT.into(),
            message: e.to_string(),
        })?;
    emitted.push((pins::STATEMENT.into(), statement_bytes));
    Ok(emitted)
}

/// The host-specific strings no emitted file may contain: this run's paths, HOME, and
/// the host name when it cannot be an ordinary word of a transcript ("test", "main":
/// machine names like "ip-10-0-0-1" or "build7.example" are searched for).
pub(super) fn host_needles(
    options: &ProduceOptions,
    checked: &Preflight,
    scratch: &Scratch,
) -> Vec<String> {
    let mut needles: Vec<String> = vec![
        checked.repository.to_string_lossy().into_owned(),
        scratch.path.to_string_lossy().into_owned(),
        options.cache_directory.to_string_lossy().into_owned(),
        checked.shardlift.to_string_lossy().into_owned(),
        checked.pipeline_exe.to_string_lossy().into_owned(),
    ];
    if let Some(dir) = &options.source_directory {
        needles.push(dir.to_string_lossy().into_owned());
    }
    if let Some(home) = std::env::var_os("HOME") {
        needles.push(home.to_string_lossy().into_owned());
    }
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if host.len() >= 6
            && host
                .bytes()
                .any(|b| b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            needles.push(host.to_owned());
        }
    }
    needles.retain(|n| n.len() > 1);
    needles
}

/// Nothing host-specific may leave this machine in the evidence.
pub(super) fn refuse_host_text(
    emitted: &[Emitted],
    needles: &[String],
) -> Result<(), ReleaseError> {
    // The receipt is an input recorded by ci/test, bound here by its digest; it keeps the
    // lane environment it recorded verbatim, so it is not held to path-freeness.
    for (name, bytes) in emitted.iter().filter(|(name, _)| name != pins::RECEIPT) {
        let text = String::from_utf8_lossy(bytes);
        if let Some((needle, excerpt)) = scan::find_any(&text, needles) {
            return Err(ReleaseError::HostLeak {
                name: name.clone(),
                what: format!("{needle:?} in {excerpt:?}"),
            });
        }
        if let Some(excerpt) = scan::absolute_path_excerpt(&text) {
            return Err(ReleaseError::HostLeak {
                name: name.clone(),
                what: format!("an absolute path in {excerpt:?}"),
            });
        }
    }
    Ok(())
}

/// SHA256SUMS over every emitted file, and its signature when a key is given.
pub(super) struct Sealed {
    pub(super) sums_text: String,
    pub(super) signature: Option<String>,
}

pub(super) fn seal(emitted: &[Emitted], sign_key: Option<&Path>) -> Result<Sealed, ReleaseError> {
    let sums_entries: Vec<(String, Digest)> = emitted
        .iter()
        .map(|(name, bytes)| (name.clone(), Digest::of(bytes)))
        .collect();
    let sums_text = sums::render(&sums_entries);
    let signature = match sign_key {
        Some(key) => Some(
            crate::sshsig::sign(key, pins::SIGNATURE_NAMESPACE, sums_text.as_bytes())
                .map_err(ReleaseError::Sign)?,
        ),
        None => None,
    };
    Ok(Sealed {
        sums_text,
        signature,
    })
}

/// Writes the staged files durably into `out`, which must not exist.
pub(super) fn install(
    out: &Path,
    emitted: &[Emitted],
    sealed: &Sealed,
) -> Result<(), ReleaseError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        durable::ensure_dir_all(parent)?;
    }
    // Created here, not by ensure_dir_*, so that an `out` made concurrently is refused.
    std::fs::create_dir(out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => ReleaseError::OutExists {
            path: out.to_owned(),
        },
        _ => ReleaseError::Io {
            path: out.to_owned(),
            error: e,
        },
    })?;
    let result = (|| {
        // Makes the new `out` entry durable in its parent.
        durable::ensure_dir_with(&durable::RealFs, out)?;
        for (name, bytes) in emitted {
            write_file(out, name, bytes)?;
        }
        write_file(out, pins::SHA256SUMS, sealed.sums_text.as_bytes())?;
        if let Some(signature) = &sealed.signature {
            write_file(out, pins::SIGNATURE, signature.as_bytes())?;
        }
        // Each write fsyncs its folder, and each folder was made durable in its parent.
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(out);
    }
    result
}
