//! `shardlift store publish-synthetic|recover|verify --store s3://bucket/prefix`: the
//! object-store backend (endpoint, region and credentials from the `AWS_*` variables).
//! JSON on stdout, as for a local store, with the conditional-create capability.
use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions};
use shardlift::store::barrier::NoHooks;

use super::{print_json, print_report};

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

/// Publishes a synthetic state to `url`, probing conditional create first.
pub fn publish(url: &str, state: &LogicalState, workers: u32, json: bool) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let store = ObjStore::open(url, ObjStoreOptions::default(), true).map_err(|e| fail(e, json))?;
    eprintln!(
        "objstore: {url}: conditional create {:?}",
        store.conditional_create()
    );
    let summary = store
        .publish(state, topology, &mut NoHooks)
        .map_err(|e| fail(e, json))?;
    print_report(json, &summary, || {
        format!(
            "published generation {} ({})",
            summary.generation, summary.commit_key
        )
    })
}

/// Reshards generation `generation` of `url` onto `workers` workers, as the next generation.
pub fn reshard(url: &str, generation: u64, workers: u32, json: bool) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let store = ObjStore::open(url, ObjStoreOptions::default(), true).map_err(|e| fail(e, json))?;
    let summary = store
        .reshard(generation, topology, &mut NoHooks)
        .map_err(|e| fail(e, json))?;
    print_report(json, &summary, || {
        format!(
            "generation {} = generation {generation} on {workers} workers (root {})",
            summary.generation, summary.logical_state_root
        )
    })
}

/// Verifies generation `generation` of `url` (a loader's checks, RFC 0001 §9.4) and writes
/// its export directory `out`; the caller prints the summary.
pub fn export(
    url: &str,
    generation: u64,
    out: &std::path::Path,
    json: bool,
) -> anyhow::Result<shardlift::interop::ExportSummary> {
    let store =
        ObjStore::open(url, ObjStoreOptions::default(), false).map_err(|e| fail(e, json))?;
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

/// Checks the export directory `from` and publishes its state to `url` on `workers`
/// workers, as the next generation.
pub fn import(url: &str, from: &std::path::Path, workers: u32, json: bool) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let (state, _) = shardlift::interop::read_export(from)?;
    let store = ObjStore::open(url, ObjStoreOptions::default(), true).map_err(|e| fail(e, json))?;
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

/// Recovers `url` read-only and prints the report.
pub fn recover(url: &str, json: bool, expect_root: &[String]) -> anyhow::Result<()> {
    let store =
        ObjStore::open(url, ObjStoreOptions::default(), false).map_err(|e| fail(e, json))?;
    let report = store.recover().map_err(|e| fail(e, json))?;
    if json {
        print_json(&serde_json::json!({ "report": report }))?;
    } else {
        super::store::print_recovery(&report.scan)?;
    }
    super::store::check_expected_root(&report.scan, expect_root)
}

/// Loads and fully verifies one generation of `url`.
pub fn verify(url: &str, generation: u64, json: bool) -> anyhow::Result<()> {
    let store =
        ObjStore::open(url, ObjStoreOptions::default(), false).map_err(|e| fail(e, json))?;
    let (state, topology) = store
        .load_generation(generation)
        .map_err(|e| fail(e, json))?;
    let root = state.logical_state_root();
    let mut report = super::store::verified_report(generation, &state, topology);
    report["location"] = serde_json::json!(url);
    report["conditional_create"] = serde_json::json!(store.conditional_create());
    print_report(json, &report, || {
        format!("generation {generation} verifies: root {root}")
    })
}
