//! What only an object store (`--store s3://bucket/prefix`) does on the command line: its
//! client's bounds and typed failure report (used by [`super::opened_store`]), `store
//! bench`, and the child side of
//! `store-child publish|recover --store s3://…`, the publisher and recovery children of the
//! crash harness (killer-demo's crash store on an object store).

use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions, S3Location};

use super::print_json;

/// The `--request-timeout-ms` of `shardlift store`, set once before the command runs.
static REQUEST_TIMEOUT_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Records `store --request-timeout-ms` (clap has checked its range) for every client
/// this process opens.
pub fn set_request_timeout_ms(request_timeout_ms: Option<u64>) {
    if let Some(ms) = request_timeout_ms {
        let _ = REQUEST_TIMEOUT_MS.set(ms);
    }
}

/// The client's bounds: the defaults, or those of `--request-timeout-ms`.
pub(super) fn client_options() -> ObjStoreOptions {
    REQUEST_TIMEOUT_MS
        .get()
        .and_then(|ms| ObjStoreOptions::default().with_request_timeout_ms(*ms))
        .unwrap_or_default()
}

/// A typed object-store failure as JSON on stdout (kind, key, message), then the error.
pub(super) fn fail(error: ObjStoreError, json: bool) -> anyhow::Error {
    if json {
        let mut value = serde_json::json!({
            "error": {
                "kind": error.kind(),
                "key": error.key(),
                "message": error.to_string(),
            }
        });
        if let ObjStoreError::SplitBrain {
            generation,
            records,
        } = &error
        {
            value["error"]["generation"] = serde_json::json!(generation);
            value["error"]["records"] = serde_json::json!(records);
        }
        let _ = print_json(&value);
    }
    anyhow::Error::new(error)
}

/// `store bench --store s3://…` ([`shardlift::objstore::bench`]): the report as JSON on
/// stdout, progress on stderr.
pub fn bench(
    location: &S3Location,
    state_bytes: u64,
    chunk_elements: u32,
    seed: u64,
) -> anyhow::Result<()> {
    let store =
        ObjStore::open_at(location.clone(), client_options(), true).map_err(|e| fail(e, true))?;
    let mut progress = super::progress::StderrProgress::new();
    let report =
        shardlift::objstore::bench::run(&store, state_bytes, chunk_elements, seed, &mut progress)
            .map_err(|e| fail(e, true))?;
    drop(progress);
    if !report.raw_copies_left.is_empty() {
        eprintln!(
            "warning: {} raw cop(ies) still listed under bench-raw/ after the deletes: {:?}",
            report.raw_copies_left.len(),
            report.raw_copies_left
        );
    }
    print_json(&report)
}

/// Child side of `store-child publish --store s3://…`: the handoff's state published to
/// `location` under the harness's pause protocol (`lab::harness::child_publish_on`), so a
/// parent can SIGKILL it at a named barrier as it does a local publisher.
pub fn child_publish(
    location: &S3Location,
    handoff: &std::path::Path,
    pause: shardlift::lab::harness::PublisherPause,
) -> anyhow::Result<()> {
    shardlift::lab::harness::child_publish_on(handoff, pause, |state, topology, hooks| {
        let store = ObjStore::open_at(location.clone(), client_options(), true)?;
        let summary = store.publish(state, topology, hooks)?;
        anyhow::Ok(summary.commit_summary())
    })?;
    Ok(())
}

/// Child side of `store-child recover --store s3://…`: the scan part of the object-store
/// recovery report (the local report's fields) as one JSON line; a split brain at the
/// highest valid generation fails the child.
pub fn child_recover(location: &S3Location) -> anyhow::Result<()> {
    let store = ObjStore::open_at(location.clone(), client_options(), false)?;
    let report = store.recover()?;
    shardlift::lab::harness::child_print_report(&report.scan)?;
    Ok(())
}
