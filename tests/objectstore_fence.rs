//! The conditional-create fence of RFC 0001 §9.8, where a backend honours conditional
//! create (lane `objectstore`). No S3 service that honours it runs here (Garage 2.5.0
//! ignores `If-None-Match: *`; the cluster tests show the split brain that follows), so
//! these tests run the same client code over `object_store`'s in-memory backend, which
//! refuses a second create as AWS S3, R2 and MinIO do.
use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use shardlift::core::topology::Topology;
use shardlift::objstore::client::{ObjClient, ObjStoreOptions, S3Location};
use shardlift::objstore::keys::claim_key;
use shardlift::objstore::{writer, ConditionalCreate, ObjStore, ObjStoreError};
use shardlift::store::barrier::{BarrierEvent, FnHook, NoHooks};
use shardlift::store::layout::synthetic_state;

/// A store over `backend`; `probe` false leaves the capability `not-probed` until a
/// writer probes it.
fn store_over(backend: &Arc<dyn ObjectStore>, probe: bool) -> ObjStore {
    let location = S3Location::parse("s3://fence-test/store").expect("location");
    let client = ObjClient::with_store(location, Arc::clone(backend), ObjStoreOptions::default())
        .expect("client");
    ObjStore::with_client(client, probe).expect("open")
}

/// Writer B lists (candidate 0); at its first barrier, before any of its PUTs, writer A
/// publishes generation 0 whole. Returns B's result. Unfenced, both writers act as on a
/// store that ignores conditional create (the writer told `ignored`: no claim).
fn race(fenced: bool) -> (Arc<dyn ObjectStore>, Result<u64, ObjStoreError>) {
    let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = store_over(&backend, true);
    let b = store_over(&backend, true);
    let capability = if fenced {
        ConditionalCreate::Honoured
    } else {
        ConditionalCreate::Ignored
    };
    let topology = Topology::new(2).expect("topology");
    let state_a = synthetic_state(21, 1, 8192);
    let state_b = synthetic_state(22, 1, 8192);
    let mut hook = FnHook(|event: &BarrierEvent| {
        if event.seq == 0 {
            let summary = writer::publish(a.client(), capability, &state_a, topology, &mut NoHooks)
                .map_err(|e| shardlift::store::HookStop::from(e.to_string()))?;
            assert_eq!(summary.generation, 0);
        }
        Ok(())
    });
    let result = writer::publish(b.client(), capability, &state_b, topology, &mut hook)
        .map(|s| s.generation);
    (backend, result)
}

#[test]
fn the_probe_finds_that_the_in_memory_backend_honours_conditional_create() {
    let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    assert_eq!(
        store_over(&backend, true).conditional_create(),
        ConditionalCreate::Honoured
    );
    assert_eq!(
        store_over(&backend, false).conditional_create(),
        ConditionalCreate::NotProbed
    );
}

#[test]
fn racing_writers_with_the_fence_one_is_refused_typed_and_there_is_no_split_brain() {
    // Control: without the fence (writers that act as on a store ignoring conditional
    // create) both records of generation 0 are committed, and recovery reports the split
    // brain (as on Garage).
    let (backend, unfenced) = race(false);
    assert_eq!(unfenced.expect("the unfenced writer commits"), 0);
    match store_over(&backend, false).recover() {
        Err(ObjStoreError::SplitBrain {
            generation,
            records,
        }) => {
            assert_eq!(generation, 0);
            assert_eq!(records.len(), 2);
        }
        other => panic!("expected a split brain without the fence, got {other:?}"),
    }

    // With the fence, the second claim of generation 0 is refused: a typed error, and
    // only the first writer's record exists.
    let (backend, fenced) = race(true);
    match fenced {
        Err(ObjStoreError::GenerationTaken { generation, key }) => {
            assert_eq!(generation, 0);
            assert!(key.ends_with(&claim_key(0)), "{key}");
        }
        other => panic!("expected generation-taken, got {other:?}"),
    }
    let store = store_over(&backend, true);
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.valid_generations, vec![0]);
    assert!(report.split_brains.is_empty(), "{report:?}");
    let (loaded, _) = store.load_generation(0).expect("load");
    assert_eq!(loaded, synthetic_state(21, 1, 8192));

    // The refused writer publishes again: generation 1.
    let again = store
        .publish(
            &synthetic_state(22, 1, 8192),
            Topology::new(2).expect("topology"),
            &mut NoHooks,
        )
        .expect("publish after the refusal");
    assert_eq!(again.generation, 1);
}

#[test]
fn a_claim_left_by_a_dead_writer_is_skipped_not_fatal() {
    let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = store_over(&backend, true);
    // A writer claimed generation 0 and died before its commit record.
    assert!(store
        .client()
        .put_create(&claim_key(0), b"dead writer".to_vec())
        .expect("claim"));
    let summary = store
        .publish(
            &synthetic_state(23, 1, 8192),
            Topology::new(2).expect("topology"),
            &mut NoHooks,
        )
        .expect("publish past the dead claim");
    assert_eq!(summary.generation, 1);
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.valid_generations, vec![1]);
}

#[test]
fn a_store_opened_without_the_probe_is_probed_before_a_write_so_the_fence_holds() {
    let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let unprobed = store_over(&backend, false);
    assert_eq!(unprobed.conditional_create(), ConditionalCreate::NotProbed);
    let summary = unprobed
        .publish(
            &synthetic_state(24, 1, 8192),
            Topology::new(2).expect("topology"),
            &mut NoHooks,
        )
        .expect("publish");
    assert_eq!(summary.conditional_create, ConditionalCreate::Honoured);
    // It claimed its generation.
    assert!(!store_over(&backend, false)
        .client()
        .put_create(&claim_key(0), b"late".to_vec())
        .expect("create"));
}

#[test]
fn a_claim_that_names_the_writers_own_record_is_its_own_not_taken() {
    // The record a writer commits as generation 0 of this state: its digest, from a
    // publish of the same state to a fresh store (the same bytes).
    let state = synthetic_state(25, 1, 8192);
    let topology = Topology::new(2).expect("topology");
    let reference: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let digest = store_over(&reference, true)
        .publish(&state, topology, &mut NoHooks)
        .expect("reference publish")
        .commit_digest;
    // The writer lists (candidate 0); before its claim, claims/0 appears naming its own
    // record, as when the store applied its create but answered with an error and the
    // client retried. The refused create is the writer's own claim: it commits.
    let backend: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let store = store_over(&backend, true);
    let mut hook = FnHook(|event: &BarrierEvent| {
        if event.seq == 0 {
            let created = store
                .client()
                .put_create(&claim_key(0), digest.to_hex().into_bytes())
                .map_err(|e| shardlift::store::HookStop::from(e.to_string()))?;
            assert!(created);
        }
        Ok(())
    });
    let committed = store
        .publish(&state, topology, &mut hook)
        .expect("the writer's own claim stands");
    assert_eq!(committed.generation, 0);
    assert_eq!(committed.commit_digest, digest);
    let report = store_over(&backend, false).recover().expect("recover");
    assert_eq!(report.scan.valid_generations, vec![0]);
}
