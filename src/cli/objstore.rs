//! `shardlift store publish-synthetic|recover|verify --store s3://bucket/prefix`: the
//! object-store backend (endpoint, region and credentials from the `AWS_*` variables).
//! JSON on stdout, as for a local store, with the conditional-create capability.
use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions};
use shardlift::store::barrier::NoHooks;

fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
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

/// Publishes a synthetic state to `url`, probing conditional create first. With
/// `pause_at_barriers` it stops after every barrier event until the parent acknowledges
/// it (`shardlift::lab::harness::stepping_barrier_hook`).
pub fn publish(
    url: &str,
    state: &LogicalState,
    workers: u32,
    json: bool,
    pause_at_barriers: bool,
) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let store = ObjStore::open(url, ObjStoreOptions::default(), true).map_err(|e| fail(e, json))?;
    eprintln!(
        "objstore: {url}: conditional create {:?}",
        store.conditional_create()
    );
    let summary = if pause_at_barriers {
        store.publish(
            state,
            topology,
            &mut shardlift::lab::harness::stepping_barrier_hook(),
        )
    } else {
        store.publish(state, topology, &mut NoHooks)
    }
    .map_err(|e| fail(e, json))?;
    if json {
        return print_json(&summary);
    }
    println!(
        "published generation {} ({})",
        summary.generation, summary.commit_key
    );
    Ok(())
}

/// Recovers `url` read-only and prints the report.
pub fn recover(url: &str, json: bool, expect_root: &[String]) -> anyhow::Result<()> {
    let store =
        ObjStore::open(url, ObjStoreOptions::default(), false).map_err(|e| fail(e, json))?;
    let report = store.recover().map_err(|e| fail(e, json))?;
    if json {
        print_json(&serde_json::json!({ "report": report }))?;
    } else {
        match &report.selected {
            Some(s) => println!(
                "selected generation {} (step {}, {} workers, root {})",
                s.generation, s.step, s.workers, s.logical_state_root
            ),
            None => println!("no valid generation"),
        }
        for r in &report.rejected {
            println!("rejected {}: {}", r.file, r.reason);
        }
    }
    if !expect_root.is_empty() {
        let selected = report
            .selected
            .as_ref()
            .map(|s| s.logical_state_root.to_string());
        match selected {
            Some(root) if expect_root.iter().any(|e| e.eq_ignore_ascii_case(&root)) => {}
            Some(root) => {
                anyhow::bail!("the selected generation's root {root} is not an expected one")
            }
            None => anyhow::bail!("no valid generation (expected one with a given root)"),
        }
    }
    Ok(())
}

/// Loads and fully verifies one generation of `url`.
pub fn verify(url: &str, generation: u64, json: bool) -> anyhow::Result<()> {
    let store =
        ObjStore::open(url, ObjStoreOptions::default(), false).map_err(|e| fail(e, json))?;
    let (state, topology) = store
        .load_generation(generation)
        .map_err(|e| fail(e, json))?;
    let root = state.logical_state_root();
    if json {
        return print_json(&serde_json::json!({
            "location": url,
            "generation": generation,
            "step": state.step(),
            "cursor": state.cursor(),
            "workers": topology.workers(),
            "chunks": state.chunks().len(),
            "logical_state_root": root,
            "conditional_create": store.conditional_create(),
        }));
    }
    println!("generation {generation} verifies: root {root}");
    Ok(())
}
