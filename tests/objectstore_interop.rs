//! `store export`/`import` with `--store s3://…` against a real three-node Garage cluster
//! (lane `objectstore`): an export from the object store is byte-for-byte the export of the
//! same generation from a local store, an import commits through the object-store
//! protocol, and a tampered export is refused with nothing committed.
mod objectstore_support;

use objectstore_support::{fresh_url, open, shardlift_json};
use shardlift::core::topology::Topology;
use shardlift::store::barrier::NoHooks;
use shardlift::store::layout::synthetic_state;

const FILES: [&str; 3] = [
    "model.safetensors",
    "optimizer.safetensors",
    "metadata.json",
];

#[test]
fn an_export_from_the_object_store_equals_the_local_one_and_imports_back() {
    let scratch = tempfile::tempdir().expect("scratch");
    let state = synthetic_state(13, 4, 8192);
    let topology = Topology::new(4).expect("topology");
    let local = scratch.path().join("local-store");
    shardlift::store::publish(&local, &state, topology, &mut NoHooks).expect("local publish");
    let url = fresh_url("export");
    open(&url, true)
        .publish(&state, topology, &mut NoHooks)
        .expect("object-store publish");

    let from_local = scratch.path().join("from-local");
    let from_s3 = scratch.path().join("from-s3");
    for (store, out) in [
        (local.to_str().expect("utf-8"), &from_local),
        (&url, &from_s3),
    ] {
        let out_arg = out.to_str().expect("utf-8");
        let (ok, printed, stderr) = shardlift_json(&[
            "store",
            "export",
            "--store",
            store,
            "--generation",
            "0",
            "--out",
            out_arg,
            "--json",
        ]);
        assert!(ok, "export from {store} failed: {stderr}");
        assert_eq!(
            printed["metadata"]["logical_state_root"],
            state.logical_state_root().to_string().as_str()
        );
    }
    // The same generation, the same records: the same bytes, whichever backend held it.
    for file in FILES {
        let a = std::fs::read(from_local.join(file)).expect("local export file");
        let b = std::fs::read(from_s3.join(file)).expect("object-store export file");
        assert!(
            a == b,
            "{file} differs between the local and the object-store export"
        );
    }

    // Import into a fresh prefix on three workers; it loads back to the same state.
    let target = fresh_url("import");
    let (ok, imported, stderr) = shardlift_json(&[
        "store",
        "import",
        "--store",
        &target,
        "--from",
        from_s3.to_str().expect("utf-8"),
        "--workers",
        "3",
        "--json",
    ]);
    assert!(ok, "import failed: {stderr}");
    assert_eq!(imported["commit"]["generation"], 0, "{imported}");
    assert_eq!(imported["commit"]["workers"], 3, "{imported}");
    let (loaded, loaded_topology) = open(&target, false)
        .load_generation(0)
        .expect("load the import");
    assert_eq!(loaded, state);
    assert_eq!(loaded_topology.workers(), 3);
}

#[test]
fn a_tampered_export_is_refused_and_nothing_is_committed() {
    let scratch = tempfile::tempdir().expect("scratch");
    let state = synthetic_state(14, 1, 8192);
    let url = fresh_url("import-tampered");
    let store = open(&url, true);
    store
        .publish(&state, Topology::new(2).expect("topology"), &mut NoHooks)
        .expect("publish");
    let out = scratch.path().join("export");
    let (ok, _, stderr) = shardlift_json(&[
        "store",
        "export",
        "--store",
        &url,
        "--generation",
        "0",
        "--out",
        out.to_str().expect("utf-8"),
        "--json",
    ]);
    assert!(ok, "export failed: {stderr}");

    // Control: the intact export imports (generation 1).
    let import = |from: &std::path::Path| {
        shardlift_json(&[
            "store",
            "import",
            "--store",
            &url,
            "--from",
            from.to_str().expect("utf-8"),
            "--workers",
            "2",
            "--json",
        ])
    };
    let (ok, _, stderr) = import(&out);
    assert!(ok, "the intact export must import: {stderr}");

    // One flipped bit in the model file: its digest no longer matches metadata.json.
    let model = out.join("model.safetensors");
    let mut bytes = std::fs::read(&model).expect("read model");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::set_permissions(&model, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("make writable");
    std::fs::write(&model, bytes).expect("tamper");
    let commits_before = store.client().list("commits").expect("LIST");
    let (ok, _, stderr) = import(&out);
    assert!(!ok, "a tampered export must be refused");
    assert!(stderr.contains("model.safetensors"), "{stderr}");
    assert_eq!(
        store.client().list("commits").expect("LIST"),
        commits_before,
        "a refused import must commit nothing"
    );
}
