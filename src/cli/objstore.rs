//! `shardlift store publish-synthetic|recover|verify|reshard|export|import|bench --store
//! s3://bucket/prefix`: the object-store backend (endpoint, region and credentials from the
//! `AWS_*` variables).
//! JSON on stdout, as for a local store, with the conditional-create capability.
//! Also the child side of `store-child publish|recover --store s3://…`, the publisher and
//! recovery children of the crash harness (killer-demo's crash store on an object store).

use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::objstore::bench::PublishProgress;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions, S3Location};
use shardlift::store::barrier::NoHooks;
use shardlift::store::writer::SyntheticSpec;
use shardlift::store::ObjectCheck;

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
fn client_options() -> ObjStoreOptions {
    REQUEST_TIMEOUT_MS
        .get()
        .and_then(|ms| ObjStoreOptions::default().with_request_timeout_ms(*ms))
        .unwrap_or_default()
}

/// A typed object-store failure as JSON on stdout (kind, key, message), then the error.
fn fail(error: ObjStoreError, json: bool) -> anyhow::Error {
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

/// Reshards generation `generation` of `location` onto `workers` workers, as the next generation.
pub fn reshard(
    location: &S3Location,
    generation: u64,
    workers: u32,
    objects: ObjectCheck,
    json: bool,
) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let store =
        ObjStore::open_at(location.clone(), client_options(), true).map_err(|e| fail(e, json))?;
    let mut progress = super::progress::StderrProgress::new();
    let summary = store
        .reshard(generation, topology, objects, &mut NoHooks, &mut progress)
        .map_err(|e| fail(e, json))?;
    super::store_report::print_reshard_report(json, &summary, objects, || {
        format!(
            "generation {} = generation {generation} on {workers} workers (root {}; source \
             objects checked: {})",
            summary.generation,
            summary.logical_state_root,
            objects.name()
        )
    })
}

/// Verifies generation `generation` of `location` (a loader's checks, RFC 0001 §9.4) and writes
/// its export directory `out`; the caller prints the summary.
pub fn export(
    location: &S3Location,
    generation: u64,
    out: &std::path::Path,
    json: bool,
) -> anyhow::Result<shardlift::interop::ExportSummary> {
    shardlift::interop::check_output(out)?;
    let store =
        ObjStore::open_at(location.clone(), client_options(), false).map_err(|e| fail(e, json))?;
    let (state, _, commit_digest) = store
        .load_generation_record(generation)
        .map_err(|e| fail(e, json))?;
    Ok(shardlift::interop::export_state(
        &state,
        generation,
        commit_digest,
        out,
    )?)
}

/// Checks the export directory `from` and publishes its state to `location` on `workers`
/// workers, as the next generation.
pub fn import(
    location: &S3Location,
    from: &std::path::Path,
    workers: u32,
    json: bool,
) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let (state, _) = shardlift::interop::read_export(from)?;
    let store =
        ObjStore::open_at(location.clone(), client_options(), true).map_err(|e| fail(e, json))?;
    let commit = store
        .publish(&state, topology, &mut NoHooks)
        .map_err(|e| fail(e, json))?;
    let imported_root = state.logical_state_root();
    let summary = serde_json::json!({ "imported_root": imported_root, "commit": commit });
    print_report(json, &summary, || {
        format!(
            "imported as generation {} (root {imported_root})",
            commit.generation
        )
    })
}

/// Recovers `location` read-only and prints the report.
pub fn recover(location: &S3Location, json: bool, expect_root: &[String]) -> anyhow::Result<()> {
    let store =
        ObjStore::open_at(location.clone(), client_options(), false).map_err(|e| fail(e, json))?;
    let report = store.recover().map_err(|e| fail(e, json))?;
    if json {
        print_json(&serde_json::json!({ "report": report }))?;
    } else {
        super::store_report::print_recovery(&report.scan)?;
    }
    super::store_report::check_expected_root(&report.scan, expect_root)
}

/// Loads and fully verifies one generation of `location`.
pub fn verify(location: &S3Location, generation: u64, json: bool) -> anyhow::Result<()> {
    let store =
        ObjStore::open_at(location.clone(), client_options(), false).map_err(|e| fail(e, json))?;
    let (state, topology) = store
        .load_generation(generation)
        .map_err(|e| fail(e, json))?;
    let root = state.logical_state_root();
    let mut report = super::store_report::verified_report(generation, &state, topology);
    report["location"] = serde_json::json!(location.url());
    report["conditional_create"] = serde_json::json!(store.conditional_create());
    print_report(json, &report, || {
        format!("generation {generation} verifies: root {root}")
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
