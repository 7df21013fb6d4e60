//! Offline reshard on an object store (RFC 0001 §9.9) against a real three-node Garage
//! cluster (lane `objectstore`): it changes placement, not state, PUTs no chunk object,
//! checks the source's objects by their listed lengths by default (fetching none), and
//! refuses a source that does not check — a truncated object by default, a same-length
//! corruption with `--verify-objects` — without committing anything.
mod objectstore_support;

use objectstore_support::{fresh_url, open, shardlift_json};
use shardlift::core::progress::{NoProgress, RecordedProgress};
use shardlift::core::topology::Topology;
use shardlift::objstore::client::Fetched;
use shardlift::objstore::keys::object_key;
use shardlift::objstore::ObjStoreError;
use shardlift::store::barrier::{Barrier, NoHooks, RecordingHooks};
use shardlift::store::codec::CommitKind;
use shardlift::store::layout::{chunk_entries, synthetic_state};
use shardlift::store::ObjectCheck;

const CHUNK_ELEMENTS: u32 = 8192;

/// `shardlift store reshard --store URL --generation 0 --workers 3 --json` (plus `extra`),
/// a fresh process.
fn reshard_generation_0_to_w3(url: &str, extra: &[&str]) -> (bool, serde_json::Value, String) {
    let mut args = vec![
        "store",
        "reshard",
        "--store",
        url,
        "--generation",
        "0",
        "--workers",
        "3",
        "--json",
    ];
    args.extend_from_slice(extra);
    shardlift_json(&args)
}

#[test]
fn reshard_w4_to_w3_changes_placement_not_state_and_puts_no_chunk() {
    let url = fresh_url("reshard");
    let store = open(&url, true);
    let state = synthetic_state(5, 9, CHUNK_ELEMENTS);
    store
        .publish(&state, Topology::new(4).expect("topology"), &mut NoHooks)
        .expect("publish generation 0");

    // The CLI, in a fresh process; it adds exactly one object, its manifest.
    let objects_before = store.client().list("objects").expect("LIST objects");
    let (ok, resharded, stderr) = reshard_generation_0_to_w3(&url, &[]);
    assert!(ok, "reshard failed: {stderr}");
    // Progress on stderr: the source checked, then the commit.
    let line = |prefix: &str| {
        stderr
            .lines()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no '{prefix}' line in {stderr}"))
    };
    assert!(line("checking generation 0: done in") < line("committing the reshard: done in"));
    assert_eq!(resharded["source_objects"], "lengths", "{resharded}");
    assert_eq!(resharded["generation"], 1, "{resharded}");
    assert_eq!(resharded["kind"], "reshard", "{resharded}");
    assert_eq!(resharded["workers"], 3, "{resharded}");
    assert_eq!(resharded["objects_put"], 0, "{resharded}");
    let objects_after = store.client().list("objects").expect("LIST objects");
    let added: Vec<&String> = objects_after
        .iter()
        .filter(|k| !objects_before.contains(k))
        .collect();
    let manifest_digest = shardlift::core::digest::Digest::from_hex(
        resharded["manifest_digest"]
            .as_str()
            .expect("manifest_digest"),
    )
    .expect("a digest");
    let manifest_key = object_key(&manifest_digest);
    assert_eq!(
        added,
        vec![&manifest_key],
        "the reshard PUT no chunk object"
    );
    assert_eq!(
        resharded["logical_state_root"],
        state.logical_state_root().to_string().as_str()
    );

    // Recovery selects the reshard; it loads to the same state on the new placement.
    let report = store.recover().expect("recover");
    assert_eq!(report.scan.selected.as_ref().map(|s| s.generation), Some(1));
    assert_eq!(report.scan.selected.as_ref().map(|s| s.workers), Some(3));
    let (loaded, topology) = store.load_generation(1).expect("load the reshard");
    assert_eq!(loaded, state);
    assert_eq!(topology.workers(), 3);
    let (source, source_topology) = store.load_generation(0).expect("load the source");
    assert_eq!(source, state);
    assert_eq!(source_topology.workers(), 4);

    // The library reports the same, and its barriers are those of RFC 0001 §7: no object
    // barrier, then manifest, commit and LATEST.
    let mut hooks = RecordingHooks::default();
    let mut progress = RecordedProgress::default();
    let again = store
        .reshard(
            1,
            Topology::new(2).expect("topology"),
            ObjectCheck::Lengths,
            &mut hooks,
            &mut progress,
        )
        .expect("reshard W3 to W2");
    assert_eq!(again.generation, 2);
    assert_eq!(again.kind, CommitKind::Reshard);
    assert_eq!(again.objects_put, 0);
    assert_eq!(hooks.events.len(), 12, "{:?}", hooks.events);
    assert!(hooks.events.iter().all(|e| !matches!(
        e.barrier,
        Barrier::ObjectAfterWrite | Barrier::ObjectAfterRename
    )));
    assert_eq!(hooks.events[0].barrier, Barrier::ManifestAfterWrite);
    assert_eq!(hooks.events[11].barrier, Barrier::LatestAfterDirectoryFsync);
    // Progress: every payload object's listed length checked, in order, then the commit.
    let objects = state.chunks().len() as u64 * 3;
    let mut expected = vec!["phase checking generation 1 ?".to_owned()];
    expected.extend((1..=objects).map(|done| format!("advance {done}")));
    expected.extend(["finish", "phase committing the reshard ?", "finish"].map(String::from));
    assert_eq!(progress.events, expected);
}

#[test]
fn resharding_a_source_with_a_corrupted_object_fails_naming_it_and_commits_nothing() {
    let url = fresh_url("reshard-corrupt");
    let store = open(&url, true);
    let state = synthetic_state(6, 2, CHUNK_ELEMENTS);
    let topology = Topology::new(4).expect("topology");
    store
        .publish(&state, topology, &mut NoHooks)
        .expect("publish generation 0");
    // Control: the intact source reshards (generation 1), its objects re-hashed.
    store
        .reshard(
            0,
            Topology::new(3).expect("topology"),
            ObjectCheck::Hashed,
            &mut NoHooks,
            &mut NoProgress,
        )
        .expect("reshard the intact source");

    // Corrupt one chunk object through the S3 API (re-PUT with one bit flipped).
    let digest = chunk_entries(&state)[2].exp_avg_sq;
    let rel = object_key(&digest);
    let mut bytes = match store.client().get_capped(&rel, 1 << 20).expect("GET") {
        Fetched::Bytes(bytes) => bytes,
        Fetched::Missing => panic!("{rel} is missing"),
    };
    bytes[3] ^= 0x01;
    store
        .client()
        .put(&rel, bytes)
        .expect("PUT the corrupted bytes");

    let commits_before = store.client().list("commits").expect("LIST commits");
    let objects_before = store.client().list("objects").expect("LIST objects");
    let latest = |store: &shardlift::objstore::ObjStore| match store
        .client()
        .get_capped("refs/LATEST", 4096)
        .expect("GET LATEST")
    {
        Fetched::Bytes(bytes) => bytes,
        Fetched::Missing => panic!("no LATEST"),
    };
    let latest_before = latest(&store);
    let mut progress = RecordedProgress::default();
    let error = store
        .reshard(
            0,
            Topology::new(3).expect("topology"),
            ObjectCheck::Hashed,
            &mut NoHooks,
            &mut progress,
        )
        .expect_err("a source that does not verify must not reshard");
    // The verifying phase is left unfinished and the commit phase never starts.
    assert_eq!(
        progress.events.first().map(String::as_str),
        Some("phase verifying generation 0 ?")
    );
    assert!(
        progress
            .events
            .iter()
            .all(|e| e != "finish" && !e.contains("committing")),
        "{:?}",
        progress.events
    );
    match &error {
        ObjStoreError::DigestMismatch { key, .. } => {
            assert!(key.ends_with(&rel), "{key} should name {rel}")
        }
        other => panic!("expected digest-mismatch, got {other:?}"),
    }
    assert_eq!(
        store.client().list("commits").expect("LIST commits"),
        commits_before,
        "a refused reshard must commit nothing"
    );
    assert_eq!(
        store.client().list("objects").expect("LIST objects"),
        objects_before,
        "a refused reshard must PUT no object"
    );
    assert_eq!(
        latest(&store),
        latest_before,
        "a refused reshard must not move LATEST"
    );

    // The CLI with --verify-objects exits non-zero with the typed error as JSON.
    let (ok, printed, _) = reshard_generation_0_to_w3(&url, &["--verify-objects"]);
    assert!(!ok, "the CLI reshard must fail: {printed}");
    assert_eq!(printed["error"]["kind"], "digest-mismatch", "{printed}");
    assert_eq!(
        store.client().list("commits").expect("LIST commits"),
        commits_before
    );

    // By default the same-length corruption passes the length check and the reshard
    // commits; recovery then selects none of the three generations (the object is shared),
    // each rejected for that object's digest: no bad byte is ever loaded.
    let (ok, printed, stderr) = reshard_generation_0_to_w3(&url, &[]);
    assert!(ok, "the default reshard checks lengths only: {stderr}");
    assert_eq!(printed["source_objects"], "lengths", "{printed}");
    let report = store.recover().expect("recover");
    assert!(report.scan.selected.is_none(), "{:?}", report.scan);
    assert_eq!(report.scan.rejected.len(), 3, "{:?}", report.scan.rejected);
    assert!(report.scan.rejected.iter().all(|r| r.kind
        == shardlift::store::RejectionKind::DigestMismatch
        && r.reason.contains(&rel)));
}

#[test]
fn the_default_reshard_refuses_a_truncated_or_missing_object_by_its_listed_length() {
    let url = fresh_url("reshard-truncated");
    let store = open(&url, true);
    let state = synthetic_state(8, 1, CHUNK_ELEMENTS);
    store
        .publish(&state, Topology::new(4).expect("topology"), &mut NoHooks)
        .expect("publish generation 0");
    let digest = chunk_entries(&state)[1].parameters;
    let rel = object_key(&digest);
    let bytes = match store.client().get_capped(&rel, 1 << 20).expect("GET") {
        Fetched::Bytes(bytes) => bytes,
        Fetched::Missing => panic!("{rel} is missing"),
    };
    store
        .client()
        .put(&rel, bytes[..bytes.len() - 4].to_vec())
        .expect("PUT the truncated bytes");
    let commits_before = store.client().list("commits").expect("LIST commits");
    let (ok, printed, _) = reshard_generation_0_to_w3(&url, &[]);
    assert!(!ok, "a truncated object must refuse the reshard: {printed}");
    assert_eq!(printed["error"]["kind"], "chunk-size", "{printed}");
    store.client().delete(&rel).expect("DELETE the object");
    let (ok, printed, _) = reshard_generation_0_to_w3(&url, &[]);
    assert!(!ok, "a missing object must refuse the reshard: {printed}");
    assert_eq!(printed["error"]["kind"], "missing-object", "{printed}");
    assert!(
        printed["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(&rel)),
        "{printed}"
    );
    assert_eq!(
        store.client().list("commits").expect("LIST commits"),
        commits_before,
        "a refused reshard must commit nothing"
    );
}
