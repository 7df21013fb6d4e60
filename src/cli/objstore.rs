//! What only an object store (`--store s3://bucket/prefix`) does on the command line: its
//! client's bounds and typed failure report (used by [`super::opened_store`]), `store
//! publish-synthetic` with a paused publisher, `store bench`, and the child side of
//! `store-child publish|recover --store s3://…`, the publisher and recovery children of the
//! crash harness (killer-demo's crash store on an object store).

use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::objstore::bench::PublishProgress;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions, S3Location};
use shardlift::store::barrier::NoHooks;
use shardlift::store::writer::SyntheticSpec;

use super::{print_json, print_report};

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

/// Publishes a synthetic state to `location`, probing conditional create first. With
/// `pause_at_barriers` it stops after every barrier event until the parent acknowledges
/// it (`shardlift::lab::harness::stepping_barrier_hook`).
pub fn publish(
    location: &S3Location,
    state: &LogicalState,
    workers: u32,
    json: bool,
    pause_at_barriers: bool,
    synthetic: Option<SyntheticSpec>,
) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let store =
        ObjStore::open_at(location.clone(), client_options(), true).map_err(|e| fail(e, json))?;
    eprintln!(
        "objstore: {location}: conditional create {:?}",
        store.conditional_create()
    );
    let summary = match (pause_at_barriers, synthetic) {
        (true, None) => store.publish(
            state,
            topology,
            &mut shardlift::lab::harness::stepping_barrier_hook(),
        ),
        (true, Some(spec)) => store.publish_synthetic(
            state,
            topology,
            spec,
            &mut shardlift::lab::harness::stepping_barrier_hook(),
        ),
        (false, None) => store.publish(state, topology, &mut NoHooks),
        (false, Some(spec)) => store.publish_synthetic(
            state,
            topology,
            spec,
            &mut PublishProgress::new(&mut super::progress::StderrProgress::new(), &spec, state),
        ),
    }
    .map_err(|e| fail(e, json))?;
    print_report(json, &summary, || {
        format!(
            "published generation {} ({})",
            summary.generation, summary.commit_key
        )
    })
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
