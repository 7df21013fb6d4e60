//! The store conformance suite (`tests/conformance`) over the local store on a real file
//! system and over the object store on `object_store`'s in-memory backend (the same S3
//! client code, no network). The objectstore lane runs it again over Garage.
use std::path::PathBuf;
use std::sync::Arc;

use object_store::memory::InMemory;
use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::objstore::client::{ObjClient, ObjStoreOptions, S3Location};
use shardlift::objstore::ObjStore;
use shardlift::store::barrier::NoHooks;
use shardlift::store::writer::SyntheticSpec;
use shardlift::store::{ObjectCheck, RecoveryReport};

#[macro_use]
mod conformance;

use conformance::{Backend, ObjectStoreBackend, Refusal};

/// The local store in a fresh temp directory.
struct LocalBackend {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl LocalBackend {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let root = dir.path().join("store");
        LocalBackend { _dir: dir, root }
    }
}

fn local_refusal(error: shardlift::store::StoreError) -> Refusal {
    Refusal {
        kind: error.kind().to_owned(),
        names: error.path().map(|p| p.display().to_string()),
    }
}

fn topology(workers: u32) -> Topology {
    Topology::new(workers).expect("topology")
}

impl Backend for LocalBackend {
    fn publish(&self, state: &LogicalState, workers: u32) -> u64 {
        shardlift::store::publish(&self.root, state, topology(workers), &mut NoHooks)
            .expect("publish")
            .committed
            .generation
    }

    fn publish_synthetic(&self, state: &LogicalState, workers: u32, spec: SyntheticSpec) -> u64 {
        shardlift::store::publish_synthetic(
            &self.root,
            state,
            topology(workers),
            spec,
            &mut NoHooks,
            &mut shardlift::core::progress::NoProgress,
        )
        .expect("publish synthetic")
        .committed
        .generation
    }

    fn recover(&self) -> RecoveryReport {
        shardlift::store::recover(&self.root).expect("recover")
    }

    fn load(&self, generation: u64) -> Result<(LogicalState, Topology), Refusal> {
        shardlift::store::load_generation(&self.root, generation).map_err(local_refusal)
    }

    fn reshard(&self, generation: u64, workers: u32, objects: ObjectCheck) -> Result<u64, Refusal> {
        shardlift::store::reshard(&self.root, generation, topology(workers), objects)
            .map(|summary| summary.committed.generation)
            .map_err(local_refusal)
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.root.join(rel)).expect("read")
    }

    fn replace(&self, rel: &str, bytes: Vec<u8>) {
        // Stored files are read-only: remove, then write anew.
        let path = self.root.join(rel);
        if path.exists() {
            std::fs::remove_file(&path).expect("remove");
        }
        std::fs::write(&path, bytes).expect("write");
    }

    fn remove(&self, rel: &str) {
        std::fs::remove_file(self.root.join(rel)).expect("remove");
    }

    fn names(&self, rel: &str) -> String {
        self.root.join(rel).display().to_string()
    }
}

/// The object store over a fresh in-memory backend.
fn in_memory_backend() -> ObjectStoreBackend {
    let location = S3Location::parse("s3://conformance/store").expect("location");
    let client = ObjClient::with_store(
        location,
        Arc::new(InMemory::new()),
        ObjStoreOptions::default(),
    )
    .expect("client");
    ObjectStoreBackend {
        store: ObjStore::with_client(client, true).expect("open"),
    }
}

mod local {
    use super::*;
    conformance_suite!(LocalBackend::new());
}

mod in_memory {
    use super::*;
    conformance_suite!(in_memory_backend());
}
