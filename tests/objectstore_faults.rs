//! Node faults during a publish, against a real three-node Garage cluster (lane
//! `objectstore`): nodes are stopped with `ci/garage node DIR stop N` between two
//! requests of a running publish. Clients talk to node 0; nodes 1 and 2 are the ones
//! stopped. The tests take one lock: they stop nodes of the one shared cluster.
mod objectstore_support;

use std::sync::Mutex;

use objectstore_support::{
    fresh_url, garage_healthy, garage_node, open, short_options, RestartOnDrop,
};
use shardlift::core::topology::Topology;
use shardlift::objstore::{ObjStore, ObjStoreError, ObjStoreOptions};
use shardlift::store::barrier::{Barrier, FnHook, NoHooks};
use shardlift::store::layout::synthetic_state;

static CLUSTER: Mutex<()> = Mutex::new(());

const CHUNK_ELEMENTS: u32 = 8192;

#[test]
fn one_node_stopped_mid_publish_the_publish_completes_and_recovers() {
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    garage_healthy();
    let url = fresh_url("one-node-down");
    // The product's default bounds: the first requests after a node stops can wait on it
    // for seconds (more on a loaded machine) before the cluster answers from the other two.
    let store = ObjStore::open(&url, ObjStoreOptions::default(), false).expect("open");
    let topology = Topology::new(3).expect("topology");
    let state = synthetic_state(21, 4, CHUNK_ELEMENTS);
    let _restart = RestartOnDrop(vec![2]);
    let mut stopped = false;
    let mut hook = FnHook(
        |event: &shardlift::store::BarrierEvent| -> Result<(), shardlift::store::HookStop> {
            if event.barrier == Barrier::ObjectAfterRename && event.occurrence == 2 && !stopped {
                stopped = true;
                garage_node("stop", 2);
            }
            Ok(())
        },
    );
    let summary = store
        .publish(&state, topology, &mut hook)
        .expect("with one node of three down the publish completes");
    assert!(stopped, "the hook never stopped node 2");
    assert_eq!(summary.generation, 0);
    // Recovered with the node still down, then again after it rejoined.
    let report = store.recover().expect("recover with node 2 down");
    assert_eq!(report.scan.selected.map(|s| s.generation), Some(0));
    garage_node("start", 2);
    // A restarted node answers before it has rejoined: wait until all three see each other.
    garage_healthy();
    let (loaded, _) = open(&url, false)
        .load_generation(0)
        .expect("load after node 2 rejoined");
    assert_eq!(loaded, state);
}

#[test]
fn two_nodes_stopped_mid_publish_fail_typed_and_nothing_is_committed() {
    let _cluster = CLUSTER.lock().unwrap_or_else(|e| e.into_inner());
    garage_healthy();
    let url = fresh_url("two-nodes-down");
    let store = ObjStore::open(&url, short_options(), false).expect("open");
    let topology = Topology::new(2).expect("topology");
    let committed = synthetic_state(23, 1, CHUNK_ELEMENTS);
    store
        .publish(&committed, topology, &mut NoHooks)
        .expect("publish generation 0 with every node up");

    let _restart = RestartOnDrop(vec![1, 2]);
    let mut stopped = false;
    let mut hook = FnHook(
        |event: &shardlift::store::BarrierEvent| -> Result<(), shardlift::store::HookStop> {
            if event.barrier == Barrier::ObjectAfterRename && event.occurrence == 2 && !stopped {
                stopped = true;
                garage_node("stop", 1);
                garage_node("stop", 2);
            }
            Ok(())
        },
    );
    let started = std::time::Instant::now();
    let result = store.publish(&synthetic_state(23, 2, CHUNK_ELEMENTS), topology, &mut hook);
    let elapsed_ms = started.elapsed().as_millis();
    assert!(stopped, "the hook never stopped nodes 1 and 2");
    match &result {
        Err(ObjStoreError::Request { op, key, .. })
        | Err(ObjStoreError::Timeout { op, key, .. }) => {
            eprintln!("publish failed as it must ({elapsed_ms} ms): {op} {key}");
            assert!(
                key.contains("/objects/"),
                "it failed on a chunk object: {key}"
            );
        }
        other => panic!("expected a typed request or timeout error, got {other:?}"),
    }
    assert!(
        elapsed_ms < 60_000,
        "the failure took {elapsed_ms} ms: the bounds do not hold"
    );

    garage_node("start", 1);
    garage_node("start", 2);
    // Reads need a quorum of two: wait until the restarted nodes have rejoined.
    garage_healthy();
    let store = open(&url, false);
    let listed = store.client().list("commits").expect("LIST commits/");
    assert!(
        listed
            .iter()
            .all(|k| k.starts_with("commits/00000000000000000000/")),
        "the failed publish left a commit record: {listed:?}"
    );
    let report = store.recover().expect("recover after restart");
    assert_eq!(
        report.scan.selected.as_ref().map(|s| s.generation),
        Some(0),
        "{report:?}"
    );
    let (loaded, _) = store.load_generation(0).expect("load generation 0");
    assert_eq!(loaded, committed);
    // The store takes the next publish normally.
    let next = store
        .publish(
            &synthetic_state(23, 3, CHUNK_ELEMENTS),
            topology,
            &mut NoHooks,
        )
        .expect("publish after restart");
    assert_eq!(next.generation, 1);
}
