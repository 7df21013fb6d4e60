//! The object-store commit protocol (RFC 0001 §9) against a real three-node Garage
//! cluster (lane `objectstore`; `ci/test objectstore` starts it). Nothing is mocked.
//! Each test first shows the outcome it checks can go the other way (a control on the
//! same cluster), so the assertion that follows can fail.
mod objectstore_support;

use objectstore_support::{fresh_url, open, shardlift_json};
use shardlift::core::topology::Topology;
use shardlift::objstore::{ConditionalCreate, ObjStoreError};
use shardlift::store::barrier::{Barrier, FnHook, NoHooks};
use shardlift::store::layout::{chunk_entries, synthetic_state};
use shardlift::store::recovery::LatestStatus;
use shardlift::store::RejectionKind;

const CHUNK_ELEMENTS: u32 = 8192;

/// `shardlift store verify --store URL --generation 0 --json`, a fresh process.
fn verify_generation_0(url: &str) -> (bool, serde_json::Value, String) {
    shardlift_json(&[
        "store",
        "verify",
        "--store",
        url,
        "--generation",
        "0",
        "--json",
    ])
}

#[test]
fn publish_then_a_fresh_process_recovers_and_verifies_it() {
    let url = fresh_url("publish-recover");
    // Control: an empty prefix has nothing to select.
    let (ok, empty, stderr) = shardlift_json(&["store", "recover", "--store", &url, "--json"]);
    assert!(ok, "recover of an empty prefix failed: {stderr}");
    assert!(empty["report"]["selected"].is_null(), "{empty}");

    let (ok, published, stderr) = shardlift_json(&[
        "store",
        "publish-synthetic",
        "--store",
        &url,
        "--seed",
        "7",
        "--step",
        "3",
        "--workers",
        "4",
        "--json",
    ]);
    assert!(ok, "publish-synthetic failed: {stderr}");
    let expected_root = synthetic_state(7, 3, CHUNK_ELEMENTS)
        .logical_state_root()
        .to_string();
    assert_eq!(published["generation"], 0, "{published}");
    assert_eq!(published["logical_state_root"], expected_root.as_str());
    // Garage ignores If-None-Match on PUT: the probe must find that out and say so.
    assert_eq!(published["conditional_create"], "ignored", "{published}");
    let commit_key = published["commit_key"].as_str().expect("commit_key");
    assert!(
        commit_key.starts_with("commits/00000000000000000000/") && commit_key.ends_with(".json"),
        "{commit_key}"
    );

    // A fresh process recovers it: selects generation 0, verifies every object.
    let (ok, recovered, stderr) = shardlift_json(&[
        "store",
        "recover",
        "--store",
        &url,
        "--json",
        "--expect-root",
        &expected_root,
    ]);
    assert!(ok, "recover failed: {stderr}");
    let report = &recovered["report"];
    assert_eq!(report["selected"]["generation"], 0, "{report}");
    assert_eq!(report["selected_key"], commit_key);
    assert_eq!(report["latest"]["status"], "consistent");
    assert!(report["rejected"].as_array().is_some_and(|r| r.is_empty()));
    // The capability is in every output; recovery and verify write nothing, so they do
    // not probe and say so (RFC 0001 §9.8), where the publish above said `ignored`.
    assert_eq!(report["conditional_create"], "not-probed", "{report}");

    let (ok, verified, stderr) = verify_generation_0(&url);
    assert!(ok, "verify failed: {stderr}");
    assert_eq!(verified["logical_state_root"], expected_root.as_str());
    assert_eq!(verified["workers"], 4);
    assert_eq!(verified["conditional_create"], "not-probed", "{verified}");

    // The next publish takes generation 1; the library loads it bit-exactly.
    let store = open(&url, true);
    assert_eq!(store.conditional_create(), ConditionalCreate::Ignored);
    let state = synthetic_state(7, 4, CHUNK_ELEMENTS);
    let summary = store
        .publish(&state, Topology::new(2).expect("topology"), &mut NoHooks)
        .expect("publish generation 1");
    assert_eq!(summary.generation, 1);
    let (loaded, topology) = store.load_generation(1).expect("load generation 1");
    assert_eq!(loaded, state);
    assert_eq!(topology.workers(), 2);
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.selected.map(|s| s.generation), Some(1));
    assert_eq!(report.scan.valid_generations, vec![0, 1]);
}

#[test]
fn a_corrupted_object_is_refused_naming_its_key() {
    let url = fresh_url("corrupt");
    let store = open(&url, false);
    let topology = Topology::new(2).expect("topology");
    let old = synthetic_state(11, 1, CHUNK_ELEMENTS);
    let new = synthetic_state(11, 2, CHUNK_ELEMENTS);
    store
        .publish(&old, topology, &mut NoHooks)
        .expect("publish 0");
    store
        .publish(&new, topology, &mut NoHooks)
        .expect("publish 1");
    // Control: both verify, generation 1 is selected.
    let report = store.recover().expect("recover before corruption");
    assert_eq!(report.scan.selected.as_ref().map(|s| s.generation), Some(1));

    // Corrupt one chunk object only generation 1 uses, through the S3 API.
    let digest = chunk_entries(&new)[1].exp_avg;
    assert!(!chunk_entries(&old)
        .iter()
        .any(|e| e.digests().iter().any(|(_, d)| *d == digest)));
    let rel = shardlift::objstore::keys::object_key(&digest);
    let key_url = store.client().location().key_url(&rel);
    let mut bytes = match store.client().get_capped(&rel, 1 << 20).expect("GET") {
        shardlift::objstore::client::Fetched::Bytes(bytes) => bytes,
        shardlift::objstore::client::Fetched::Missing => panic!("{key_url} is missing"),
    };
    bytes[17] ^= 0x40;
    store
        .client()
        .put(&rel, bytes)
        .expect("PUT the corrupted bytes");

    let report = store.recover().expect("recover after corruption");
    assert_eq!(
        report.scan.selected.as_ref().map(|s| s.generation),
        Some(0),
        "recovery must fall back to generation 0: {report:?}"
    );
    assert_eq!(report.scan.rejected.len(), 1, "{report:?}");
    let rejection = &report.scan.rejected[0];
    assert_eq!(rejection.generation, Some(1));
    assert_eq!(
        rejection.kind,
        shardlift::store::RejectionKind::DigestMismatch
    );
    assert!(
        rejection.reason.contains(&key_url),
        "the rejection must name {key_url}: {}",
        rejection.reason
    );
    // Loading it is refused with the typed error naming the key; no bytes come back.
    match store.load_generation(1) {
        Err(ObjStoreError::DigestMismatch { key, expected, .. }) => {
            assert_eq!(key, key_url);
            assert_eq!(expected, digest);
        }
        other => panic!("expected DigestMismatch naming {key_url}, got {other:?}"),
    }
    // A fresh process refuses it too, naming the key.
    let (ok, value, stderr) = shardlift_json(&[
        "store",
        "verify",
        "--store",
        &url,
        "--generation",
        "1",
        "--json",
    ]);
    assert!(!ok, "verify of a corrupted generation succeeded: {value}");
    assert_eq!(value["error"]["kind"], "digest-mismatch", "{stderr}");
    assert_eq!(value["error"]["key"], key_url.as_str());

    // A commit record whose bytes are not the digest its key carries is refused too.
    let record_rel = report.selected_key.clone().expect("selected key");
    let record_url = store.client().location().key_url(&record_rel);
    store
        .client()
        .put(&record_rel, b"{}".to_vec())
        .expect("PUT a garbage record");
    let report = store.recover().expect("recover");
    assert!(report.scan.selected.is_none(), "{report:?}");
    assert!(
        report
            .scan
            .rejected
            .iter()
            .any(|r| r.file == record_rel && r.reason.contains(&record_url)),
        "{report:?}"
    );
}

/// Synthetic objects (a state scaled by `--state-bytes`) are verified like chunk
/// payloads. A forged but internally consistent generation whose manifest names an
/// existing, verifiable object of the right length is selected (the control); ones whose
/// manifests name an object that is not there, or one a byte longer or shorter than the
/// manifest's object size, are rejected naming that object's key, and the generation
/// below stays selected.
#[test]
fn synthetic_objects_are_verified_and_a_missing_or_wrong_length_one_is_refused_by_key() {
    use shardlift::core::digest::Digest;
    use shardlift::objstore::keys::{commit_key, object_key};
    use shardlift::store::codec::{encode, CommitRecord, ManifestRecord, SyntheticPayloads};
    let url = fresh_url("synthetic");
    let store = open(&url, false);
    let state = synthetic_state(13, 1, CHUNK_ELEMENTS);
    store
        .publish(&state, Topology::new(2).expect("topology"), &mut NoHooks)
        .expect("publish 0");
    let report = store.recover().expect("recover");
    let record_rel = report.selected_key.clone().expect("selected key");
    let get = |rel: &str| match store.client().get_capped(rel, 1 << 20).expect("GET") {
        shardlift::objstore::client::Fetched::Bytes(bytes) => bytes,
        shardlift::objstore::client::Fetched::Missing => panic!("{rel} is missing"),
    };
    let record: CommitRecord = serde_json::from_slice(&get(&record_rel)).expect("record");
    let manifest: ManifestRecord =
        serde_json::from_slice(&get(&object_key(&record.manifest))).expect("manifest");
    // Control: re-encoding the untouched records gives the stored bytes and digests.
    assert_eq!(
        Digest::of(&encode(&manifest).expect("encode")),
        record.manifest
    );
    // Forges generation `generation` naming `object` as its one synthetic object.
    let forge = |generation: u64, object: Digest| -> (String, String) {
        let object_bytes = CHUNK_ELEMENTS * 4;
        let mut forged_manifest = manifest.clone();
        forged_manifest.synthetic = Some(SyntheticPayloads {
            seed: 13,
            object_bytes,
            total_bytes: u64::from(object_bytes),
            objects: vec![object],
        });
        let manifest_bytes = encode(&forged_manifest).expect("encode the forged manifest");
        let manifest_digest = Digest::of(&manifest_bytes);
        let manifest_rel = object_key(&manifest_digest);
        store
            .client()
            .put(&manifest_rel, manifest_bytes)
            .expect("PUT manifest");
        let forged = CommitRecord {
            generation,
            manifest: manifest_digest,
            ..record.clone()
        };
        let record_bytes = encode(&forged).expect("encode the forged record");
        let forged_rel = commit_key(generation, &Digest::of(&record_bytes));
        store
            .client()
            .put(&forged_rel, record_bytes)
            .expect("PUT record");
        (forged_rel, manifest_rel)
    };

    // An existing object of the right length (a chunk payload) verifies: generation 1 is
    // selected and loads.
    let existing = chunk_entries(&state)[0].parameters;
    forge(1, existing);
    let report = store.recover().expect("recover after the first forgery");
    assert_eq!(
        report.scan.selected.as_ref().map(|s| s.generation),
        Some(1),
        "{report:?}"
    );
    store.load_generation(1).expect("generation 1 loads");

    // Generation 2 names a synthetic object nobody PUT; generations 3 and 4 name objects
    // stored under their own digests (so they hash right) one byte longer and one byte
    // shorter than the manifest's object size. Each is rejected naming the object's key;
    // the longer one is cut off at the expected size (the GET's cap) and, as on the local
    // store, refused for its length before its digest: `synthetic-object-size`.
    let object_len = CHUNK_ELEMENTS as usize * 4;
    for (generation, bytes, stored, kind) in [
        (
            2,
            b"a synthetic object nobody PUT".to_vec(),
            false,
            RejectionKind::MissingObject,
        ),
        (
            3,
            vec![7u8; object_len + 1],
            true,
            RejectionKind::SyntheticObjectSize,
        ),
        (
            4,
            vec![7u8; object_len - 1],
            true,
            RejectionKind::SyntheticObjectSize,
        ),
    ] {
        let digest = Digest::of(&bytes);
        if stored {
            store
                .client()
                .put(&object_key(&digest), bytes)
                .expect("PUT the object of the wrong length");
        }
        let (forged_rel, _) = forge(generation, digest);
        let report = store.recover().expect("recover after a forgery");
        assert_eq!(
            report.scan.selected.as_ref().map(|s| s.generation),
            Some(1),
            "{report:?}"
        );
        let rejection = report
            .scan
            .rejected
            .iter()
            .find(|r| r.file == forged_rel)
            .unwrap_or_else(|| panic!("the forged record is not rejected: {report:?}"));
        assert_eq!(rejection.kind, kind, "{report:?}");
        let object_url = store.client().location().key_url(&object_key(&digest));
        assert!(
            rejection.reason.contains(&object_url),
            "{}",
            rejection.reason
        );
    }
}

/// `store bench --store s3://…` publishes a state scaled by synthetic objects, PUTs the
/// same bytes plainly, and prints both figures as JSON; the state it published recovers
/// and verifies in fresh processes. (Figures are printed, never asserted on.)
#[test]
fn store_bench_prints_publish_and_raw_put_throughput_of_the_same_bytes() {
    let url = fresh_url("bench");
    let state_bytes: u64 = 4 << 20;
    let (ok, bench, stderr) = shardlift_json(&[
        "store",
        "bench",
        "--store",
        &url,
        "--state-bytes",
        &state_bytes.to_string(),
        "--chunk-elements",
        "101770",
        "--json",
    ]);
    assert!(ok, "store bench failed: {stderr} {bench}");
    assert_eq!(bench["state_bytes"], state_bytes, "{bench}");
    assert_eq!(bench["conditional_create"], "ignored", "{bench}");
    let raw_bytes = bench["raw_put"]["bytes"].as_u64().expect("raw bytes");
    assert_eq!(raw_bytes, state_bytes, "raw PUT of the same bytes: {bench}");
    let published = bench["publish"]["bytes"].as_u64().expect("published bytes");
    assert!(published > state_bytes, "{bench}");
    for figure in ["publish", "raw_put"] {
        assert!(
            bench[figure]["mb_per_s"].as_f64().is_some_and(|v| v > 0.0),
            "{bench}"
        );
    }
    eprintln!(
        "objectstore bench ({state_bytes} bytes): publish {} MB/s, raw PUT {} MB/s",
        bench["publish"]["mb_per_s"], bench["raw_put"]["mb_per_s"]
    );
    assert_eq!(bench["raw_copies_left"], serde_json::json!([]), "{bench}");
    let leftovers = open(&url, false)
        .client()
        .list("bench-raw")
        .expect("list bench-raw/");
    assert!(
        leftovers.is_empty(),
        "raw copies left behind: {leftovers:?}; the bench's stderr: {stderr}"
    );
    let (ok, recovered, stderr) = shardlift_json(&["store", "recover", "--store", &url, "--json"]);
    assert!(ok, "recover failed: {stderr}");
    assert_eq!(
        recovered["report"]["selected"]["generation"], 0,
        "{recovered}"
    );
    let (ok, verified, stderr) = verify_generation_0(&url);
    assert!(ok, "verify failed: {stderr} {verified}");
}

#[test]
fn racing_publishers_keep_both_records_and_recovery_reports_the_split_brain() {
    let url = fresh_url("race");
    let topology = Topology::new(2).expect("topology");
    // Control: one publisher, no conflict.
    open(&url, false)
        .publish(
            &synthetic_state(5, 0, CHUNK_ELEMENTS),
            topology,
            &mut NoHooks,
        )
        .expect("publish 0");
    assert_eq!(
        open(&url, false)
            .recover()
            .expect("recover")
            .scan
            .selected
            .map(|s| s.generation),
        Some(0)
    );

    // Two publishers, each with its own client, both past their LIST of commits/ before
    // either commits: both claim generation 1.
    let rendezvous = std::sync::Arc::new(std::sync::Barrier::new(2));
    let summaries: Vec<_> = [1u64, 2]
        .into_iter()
        .map(|step| {
            let url = url.clone();
            let rendezvous = rendezvous.clone();
            std::thread::spawn(move || {
                let store = open(&url, false);
                let mut met = false;
                let mut hook = FnHook(
                    |event: &shardlift::store::BarrierEvent| -> Result<(), shardlift::store::HookStop> {
                        if event.barrier == Barrier::ObjectAfterWrite && !met {
                            met = true;
                            rendezvous.wait();
                        }
                        Ok(())
                    },
                );
                store.publish(
                    &synthetic_state(5, step, CHUNK_ELEMENTS),
                    topology,
                    &mut hook,
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|handle| handle.join().expect("publisher thread"))
        .collect();
    let summaries: Vec<_> = summaries
        .into_iter()
        .map(|s| s.expect("both publishes succeed (nothing refuses them on Garage)"))
        .collect();
    assert_eq!(summaries[0].generation, 1);
    assert_eq!(summaries[1].generation, 1);
    assert_ne!(summaries[0].commit_key, summaries[1].commit_key);

    // Both records are kept: the key carries the record's digest, nothing overwrote.
    let store = open(&url, false);
    let listed = store
        .client()
        .list("commits/00000000000000000001")
        .expect("LIST");
    for summary in &summaries {
        assert!(listed.contains(&summary.commit_key), "{listed:?}");
    }
    let expected: Vec<String> = {
        let mut keys: Vec<String> = summaries
            .iter()
            .map(|s| store.client().location().key_url(&s.commit_key))
            .collect();
        keys.sort();
        keys
    };
    match store.recover() {
        Err(ObjStoreError::SplitBrain {
            generation,
            records,
        }) => {
            assert_eq!(generation, 1);
            assert_eq!(records, expected);
        }
        other => panic!("expected a split brain at generation 1, got {other:?}"),
    }
    assert!(matches!(
        store.load_generation(1),
        Err(ObjStoreError::SplitBrain { generation: 1, .. })
    ));
    let (ok, value, _) = shardlift_json(&["store", "recover", "--store", &url, "--json"]);
    assert!(!ok, "recover chose silently: {value}");
    assert_eq!(value["error"]["kind"], "split-brain");
    assert_eq!(value["error"]["generation"], 1);

    // A later generation supersedes it; the split brain below stays reported.
    let later = store
        .publish(
            &synthetic_state(5, 9, CHUNK_ELEMENTS),
            topology,
            &mut NoHooks,
        )
        .expect("publish 2");
    assert_eq!(later.generation, 2);
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.selected.as_ref().map(|s| s.generation), Some(2));
    assert_eq!(report.split_brains.len(), 1);
    assert_eq!(report.split_brains[0].generation, 1);
    assert_eq!(report.scan.latest.status, LatestStatus::Consistent);
}

/// Not a benchmark: one figure of this run, publish throughput next to raw PUTs of the
/// same bytes through the same client (stderr; `--nocapture` shows it).
#[test]
fn publish_throughput_next_to_raw_put_of_the_same_bytes() {
    const STATES: u64 = 8;
    let url = fresh_url("throughput");
    let store = open(&url, false);
    let topology = Topology::new(4).expect("topology");
    let states: Vec<_> = (0..STATES)
        .map(|step| synthetic_state(31, step, CHUNK_ELEMENTS))
        .collect();
    let started = std::time::Instant::now();
    let mut published_bytes = 0u64;
    for state in &states {
        let summary = store
            .publish(state, topology, &mut NoHooks)
            .expect("publish");
        published_bytes += summary.bytes_put;
    }
    let publish_s = started.elapsed().as_secs_f64();
    let started = std::time::Instant::now();
    let mut raw_bytes = 0u64;
    for (i, state) in states.iter().enumerate() {
        for (j, chunk) in state.chunks().iter().enumerate() {
            for (k, payload) in shardlift::store::layout::chunk_payloads(chunk)
                .into_iter()
                .enumerate()
            {
                raw_bytes += payload.len() as u64;
                store
                    .client()
                    .put(&format!("raw/{i}/{j}/{k}"), payload)
                    .expect("raw PUT");
            }
        }
    }
    let raw_s = started.elapsed().as_secs_f64();
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.selected.map(|s| s.generation), Some(STATES - 1));
    eprintln!(
        "objectstore throughput: publish {:.1} MB/s ({published_bytes} bytes in {publish_s:.2} s, {STATES} generations), raw PUT {:.1} MB/s ({raw_bytes} bytes in {raw_s:.2} s)",
        published_bytes as f64 / publish_s / 1e6,
        raw_bytes as f64 / raw_s / 1e6
    );
}
