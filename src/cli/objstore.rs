//! `shardlift store publish-synthetic|recover|verify|reshard|export|import|bench --store
//! s3://bucket/prefix`: the object-store backend (endpoint, region and credentials from the
//! `AWS_*` variables).
//! JSON on stdout, as for a local store, with the conditional-create capability.
//! Also the child side of `store-child publish|recover --store s3://…`, the publisher and
//! recovery children of the crash harness (killer-demo's crash store on an object store).
use std::time::Instant;

use shardlift::core::logical::LogicalState;
use shardlift::core::progress::Progress;
use shardlift::core::topology::Topology;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions, S3Location};
use shardlift::store::barrier::{Barrier, BarrierEvent, BarrierHook, HookStop, NoHooks};
use shardlift::store::layout::{chunk_payloads, synthetic_object, synthetic_state};
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
            &mut ProgressHook::new(&mut super::progress::StderrProgress::new(), &spec, state),
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

/// The synthetic objects that scale `state` to `state_bytes` chunk-payload bytes: objects
/// of the chunk size, seeded by `seed`, at least one (as for a local store).
pub fn synthetic_spec(state: &LogicalState, seed: u64, state_bytes: u64) -> SyntheticSpec {
    let object_bytes = state.hyperparameters().chunk_elements.saturating_mul(4);
    SyntheticSpec {
        seed,
        object_bytes,
        total_bytes: state_bytes
            .saturating_sub(model_bytes(state))
            .max(u64::from(object_bytes)),
    }
}

/// Chunk-payload bytes of `state` (three FP32 slots per parameter).
fn model_bytes(state: &LogicalState) -> u64 {
    state
        .chunks()
        .iter()
        .map(|c| c.parameters().len() as u64 * 12)
        .sum()
}

/// Progress on stderr from the writer's barrier events: one step per acknowledged object.
struct ProgressHook<'a> {
    progress: &'a mut dyn Progress,
    done: u64,
}

impl<'a> ProgressHook<'a> {
    fn new(progress: &'a mut dyn Progress, spec: &SyntheticSpec, state: &LogicalState) -> Self {
        progress.phase(
            "publish",
            Some(state.chunks().len() as u64 * 3 + spec.object_count()),
        );
        ProgressHook { progress, done: 0 }
    }
}

impl BarrierHook for ProgressHook<'_> {
    fn reached(&mut self, event: &BarrierEvent) -> Result<(), HookStop> {
        if event.barrier == Barrier::ObjectAfterDirectoryFsync {
            self.done += 1;
            self.progress.advance(self.done);
        }
        Ok(())
    }
}

/// One throughput figure.
#[derive(serde::Serialize)]
struct Throughput {
    bytes: u64,
    requests: u64,
    seconds: f64,
    mb_per_s: f64,
}

impl Throughput {
    fn new(bytes: u64, requests: u64, seconds: f64) -> Self {
        Throughput {
            bytes,
            requests,
            seconds,
            mb_per_s: if seconds > 0.0 {
                bytes as f64 / seconds / 1e6
            } else {
                0.0
            },
        }
    }
}

/// `store bench --store s3://…`: publishes one synthetic state of `state_bytes`
/// chunk-payload bytes (objects of `chunk_elements` × 4 bytes), then PUTs the same
/// objects' bytes again as plain PUTs through the same client under
/// `bench-raw/<run>/<index>` (both timings include making the bytes; the copies are
/// deleted afterwards, on failure too, best effort), and prints both figures as JSON on
/// stdout; progress goes to stderr. Requests run one after another,
/// as RFC 0001 §9.3 has the writer issue them.
pub fn bench(
    location: &S3Location,
    state_bytes: u64,
    chunk_elements: u32,
    seed: u64,
) -> anyhow::Result<()> {
    let store =
        ObjStore::open_at(location.clone(), client_options(), true).map_err(|e| fail(e, true))?;
    let state = synthetic_state(seed, 1, chunk_elements);
    let spec = synthetic_spec(&state, seed, state_bytes);
    let topology = Topology::new(4)?;
    let mut progress = super::progress::StderrProgress::new();
    let summary = store
        .publish_synthetic(
            &state,
            topology,
            spec,
            &mut ProgressHook::new(&mut progress, &spec, &state),
        )
        .map_err(|e| fail(e, true))?;
    progress.finish();
    let publish = Throughput::new(
        summary.bytes_put,
        summary.objects_put + 3,
        summary.elapsed_ms as f64 / 1e3,
    );

    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let objects = state.chunks().len() as u64 * 3 + spec.object_count();
    progress.phase("raw PUT", Some(objects));
    // Timed as the publish is: making each object's bytes and PUTting them (the publish
    // also hashes); the copies go under bench-raw/, which recovery ignores, and are
    // deleted afterwards.
    let raw_prefix = format!("bench-raw/{run}");
    let (mut raw_bytes, mut raw_requests) = (0u64, 0u64);
    let raw_started = Instant::now();
    let outcome = {
        let mut put = |bytes: Vec<u8>| -> anyhow::Result<()> {
            let len = bytes.len() as u64;
            let key = format!("{raw_prefix}/{raw_requests}");
            store.client().put(&key, bytes).map_err(|e| fail(e, true))?;
            raw_bytes += len;
            raw_requests += 1;
            progress.advance(raw_requests);
            Ok(())
        };
        let mut put_all = || -> anyhow::Result<()> {
            for chunk in state.chunks() {
                for payload in chunk_payloads(chunk) {
                    put(payload)?;
                }
            }
            for index in 0..spec.object_count() {
                let len = usize::try_from(spec.object_len(index))?;
                put(synthetic_object(spec.seed, index, len))?;
            }
            Ok(())
        };
        put_all()
    };
    let raw_seconds = raw_started.elapsed().as_secs_f64();
    // A PUT that failed may still have landed: its key is deleted too. After a failure the
    // deletes are best effort and the PUT's error is the one reported.
    let attempted = raw_requests + u64::from(outcome.is_err());
    progress.phase("deleting the raw copies", Some(attempted));
    let mut first_delete_error = None;
    for index in 0..attempted {
        if let Err(error) = store.client().delete(&format!("{raw_prefix}/{index}")) {
            first_delete_error.get_or_insert(error);
        }
        progress.advance(index + 1);
    }
    outcome?;
    if let Some(error) = first_delete_error {
        return Err(fail(error, true));
    }
    progress.finish();
    drop(progress);
    let raw_put = Throughput::new(raw_bytes, raw_requests, raw_seconds);
    let ratio = if raw_put.mb_per_s > 0.0 {
        publish.mb_per_s / raw_put.mb_per_s
    } else {
        0.0
    };
    print_json(&serde_json::json!({
        "location": location.url(),
        "state_bytes": model_bytes(&state) + spec.total_bytes,
        "object_bytes": spec.object_bytes,
        "objects": objects,
        "generation": summary.generation,
        "conditional_create": store.conditional_create(),
        "publish": publish,
        "raw_put": raw_put,
        "publish_over_raw_put": ratio,
    }))
}

/// Child side of `store-child publish --store s3://…`: the handoff's state published to
/// `location` under the harness's pause protocol (`lab::harness::child_publish_on`), so a
/// parent can SIGKILL it at a named barrier as it does a local publisher.
pub fn child_publish(
    location: &S3Location,
    handoff: &std::path::Path,
    pause: shardlift::supervise::process::PublisherPause,
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
