//! One conformance suite for every store backend: the same test functions, generic over
//! [`Backend`], run over the local store and `object_store`'s in-memory backend in the fast
//! lane (`tests/store_conformance.rs`) and over a real Garage cluster in the objectstore
//! lane (`tests/objectstore_conformance.rs`). Each corruption must be refused with the
//! same error kind on every backend, naming the same record or manifest.
#![allow(dead_code)]
use std::path::Path;

use shardlift::core::digest::Digest;
use shardlift::core::logical::LogicalState;
use shardlift::core::progress::NoProgress;
use shardlift::core::topology::Topology;
use shardlift::objstore::client::Fetched;
use shardlift::objstore::{ObjStore, ObjStoreError};
use shardlift::store::barrier::NoHooks;
use shardlift::store::codec::{decode, object_rel_path, ManifestRecord};
use shardlift::store::layout::{chunk_payloads, synthetic_state};
use shardlift::store::writer::SyntheticSpec;
use shardlift::store::{LatestStatus, ObjectCheck, RecoveryReport, RejectionKind};

/// Why a backend refused: its error's stable kind and the record, manifest or object the
/// error names (a path on the local store, a key's URL on an object store).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The error's kind (`StoreError::kind`, `ObjStoreError::kind`).
    pub kind: String,
    /// What the error names, when it names something.
    pub names: Option<String>,
}

/// What the suite needs of a backend: the store's operations, and raw access to what it
/// stores (to damage it as a crash, a bad disk or a bad actor would).
pub trait Backend {
    /// Publishes `state` on `workers` workers; returns the generation.
    fn publish(&self, state: &LogicalState, workers: u32) -> u64;
    /// Publishes `state` plus the synthetic objects of `spec`; returns the generation.
    fn publish_synthetic(&self, state: &LogicalState, workers: u32, spec: SyntheticSpec) -> u64;
    /// The recovery scan's report (the local store's fields on every backend).
    fn recover(&self) -> RecoveryReport;
    /// The fully verified state of `generation`.
    fn load(&self, generation: u64) -> Result<(LogicalState, Topology), Refusal>;
    /// Reshards `generation` onto `workers`; returns the new generation.
    fn reshard(&self, generation: u64, workers: u32, objects: ObjectCheck) -> Result<u64, Refusal>;
    /// The bytes stored at `rel` (relative to the store).
    fn read(&self, rel: &str) -> Vec<u8>;
    /// Stores `bytes` at `rel`, replacing what is there.
    fn replace(&self, rel: &str, bytes: Vec<u8>);
    /// Removes what is stored at `rel`.
    fn remove(&self, rel: &str);
    /// How this backend's errors name `rel`.
    fn names(&self, rel: &str) -> String;
}

/// An object store (any `object_store` backend behind the S3 client) as a suite backend.
pub struct ObjectStoreBackend {
    /// The open store.
    pub store: ObjStore,
}

fn object_refusal(error: ObjStoreError) -> Refusal {
    let names = match &error {
        // A store check names its record or manifest as its path.
        ObjStoreError::Invalid { source, .. } => source.path().map(|p| p.display().to_string()),
        ObjStoreError::GenerationNotFound { location, .. } => Some(location.clone()),
        other => other.key().map(str::to_owned),
    };
    Refusal {
        kind: error.kind().to_owned(),
        names,
    }
}

fn workers(count: u32) -> Topology {
    Topology::new(count).expect("topology")
}

impl Backend for ObjectStoreBackend {
    fn publish(&self, state: &LogicalState, count: u32) -> u64 {
        self.store
            .publish(state, workers(count), &mut NoHooks)
            .expect("publish")
            .generation
    }

    fn publish_synthetic(&self, state: &LogicalState, count: u32, spec: SyntheticSpec) -> u64 {
        self.store
            .publish_synthetic(state, workers(count), spec, &mut NoHooks, &mut NoProgress)
            .expect("publish synthetic")
            .generation
    }

    fn recover(&self) -> RecoveryReport {
        self.store.recover().expect("recover").scan
    }

    fn load(&self, generation: u64) -> Result<(LogicalState, Topology), Refusal> {
        self.store
            .load_generation(generation)
            .map_err(object_refusal)
    }

    fn reshard(&self, generation: u64, count: u32, objects: ObjectCheck) -> Result<u64, Refusal> {
        self.store
            .reshard(
                generation,
                workers(count),
                objects,
                &mut NoHooks,
                &mut NoProgress,
            )
            .map(|summary| summary.generation)
            .map_err(object_refusal)
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        match self.store.client().get_capped(rel, 1 << 30).expect("GET") {
            Fetched::Bytes(bytes) => bytes,
            Fetched::Missing => panic!("{rel} is missing"),
        }
    }

    fn replace(&self, rel: &str, bytes: Vec<u8>) {
        self.store.client().put(rel, bytes).expect("PUT");
    }

    fn remove(&self, rel: &str) {
        self.store.client().delete(rel).expect("DELETE");
    }

    fn names(&self, rel: &str) -> String {
        self.store.client().location().key_url(rel)
    }
}

const SEED: u64 = 36;
const CHUNK_ELEMENTS: u32 = 4096;

fn state_at(step: u64) -> LogicalState {
    synthetic_state(SEED, step, CHUNK_ELEMENTS)
}

/// SHA-256 of every chunk payload's exact bytes, in logical order.
fn payload_digests(state: &LogicalState) -> Vec<Digest> {
    state
        .chunks()
        .iter()
        .flat_map(|chunk| chunk_payloads(chunk).map(|bytes| Digest::of(&bytes)))
        .collect()
}

/// Publishes generations 0 and 1 (steps 1 and 2 on 4 workers); returns the manifest of
/// generation 1 and its relative path.
fn two_generations<B: Backend>(backend: &B) -> (ManifestRecord, String) {
    assert_eq!(backend.publish(&state_at(1), 4), 0);
    assert_eq!(backend.publish(&state_at(2), 4), 1);
    manifest_of(backend, 1)
}

/// The manifest of the selected `generation` and its relative path.
fn manifest_of<B: Backend>(backend: &B, generation: u64) -> (ManifestRecord, String) {
    let report = backend.recover();
    let selected = report.selected.expect("a selected generation");
    assert_eq!(selected.generation, generation);
    let rel = object_rel_path(&selected.manifest_digest);
    let manifest = decode(Path::new(&rel), &backend.read(&rel)).expect("manifest decodes");
    (manifest, rel)
}

/// The relative path of chunk `id`'s parameter payload in `manifest`.
fn parameters_rel(manifest: &ManifestRecord, id: usize) -> String {
    object_rel_path(&manifest.chunks[id].parameters)
}

/// Damages generation 1 with `damage`, then checks that recovery falls back to generation
/// 0 and rejects generation 1 with `kind`.
fn rejected_as<B: Backend>(backend: &B, kind: RejectionKind, damage: impl FnOnce(&ManifestRecord)) {
    let (manifest, _) = two_generations(backend);
    damage(&manifest);
    let report = backend.recover();
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
    assert_eq!(report.valid_generations, vec![0]);
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert_eq!(report.rejected[0].generation, Some(1));
    assert_eq!(
        report.rejected[0].kind, kind,
        "{}",
        report.rejected[0].reason
    );
}

/// Publish, recover, load: the newest generation is selected, LATEST agrees, and the
/// loaded state holds exactly the published bytes.
pub fn published_generations_recover_and_load_bit_for_bit<B: Backend>(backend: &B) {
    two_generations(backend);
    let report = backend.recover();
    assert_eq!(report.valid_generations, vec![0, 1]);
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert_eq!(report.latest.status, LatestStatus::Consistent);
    let selected = report.selected.expect("selected");
    assert_eq!(selected.workers, 4);
    assert_eq!(selected.step, 2);
    let (loaded, topology) = backend.load(1).expect("load generation 1");
    assert_eq!(topology.workers(), 4);
    assert_eq!(payload_digests(&loaded), payload_digests(&state_at(2)));
    assert_eq!(
        loaded.logical_state_root(),
        state_at(2).logical_state_root()
    );
    assert_eq!(selected.logical_state_root, loaded.logical_state_root());
}

/// A generation that was never committed is `generation-not-found`.
pub fn an_absent_generation_is_not_found<B: Backend>(backend: &B) {
    backend.publish(&state_at(1), 4);
    let refusal = backend.load(7).expect_err("generation 7 does not exist");
    assert_eq!(refusal.kind, "generation-not-found");
}

/// One bit flipped in a chunk payload: `digest-mismatch`, naming the object.
pub fn a_flipped_payload_bit_is_a_digest_mismatch<B: Backend>(backend: &B) {
    rejected_as(backend, RejectionKind::DigestMismatch, |manifest| {
        let rel = parameters_rel(manifest, 0);
        let mut bytes = backend.read(&rel);
        bytes[17] ^= 0x04;
        backend.replace(&rel, bytes);
    });
    let refusal = backend.load(1).expect_err("generation 1 is damaged");
    assert_eq!(refusal.kind, "digest-mismatch");
}

/// A chunk payload deleted: `missing-object`.
pub fn a_deleted_payload_is_a_missing_object<B: Backend>(backend: &B) {
    rejected_as(backend, RejectionKind::MissingObject, |manifest| {
        backend.remove(&parameters_rel(manifest, 1));
    });
}

/// A chunk payload one byte longer than its manifest says: `too-large` (the read is capped
/// at the length the manifest gives it).
pub fn an_extended_payload_is_too_large<B: Backend>(backend: &B) {
    rejected_as(backend, RejectionKind::TooLarge, |manifest| {
        let rel = parameters_rel(manifest, 0);
        let mut bytes = backend.read(&rel);
        bytes.push(0);
        backend.replace(&rel, bytes);
    });
}

/// The manifest deleted: `missing-object`.
pub fn a_deleted_manifest_is_a_missing_object<B: Backend>(backend: &B) {
    let (_, manifest_rel) = two_generations(backend);
    backend.remove(&manifest_rel);
    let report = backend.recover();
    assert_eq!(report.selected.map(|s| s.generation), Some(0));
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::MissingObject
    );
}

/// LATEST overwritten with garbage: reported as garbage, the selection unchanged.
pub fn a_garbage_latest_changes_nothing<B: Backend>(backend: &B) {
    two_generations(backend);
    backend.replace("refs/LATEST", b"{\"not\":\"a record\"}".to_vec());
    let report = backend.recover();
    assert_eq!(report.latest.status, LatestStatus::Garbage);
    assert_eq!(report.selected.map(|s| s.generation), Some(1));
    assert_eq!(report.valid_generations, vec![0, 1]);
}

/// An offline reshard 4 → 3 commits a new generation with the same logical-state root and
/// the same payload bytes, on either object check.
pub fn a_reshard_keeps_every_byte<B: Backend>(backend: &B) {
    two_generations(backend);
    let hashed = backend
        .reshard(1, 3, ObjectCheck::Hashed)
        .expect("reshard, hashed");
    let lengths = backend
        .reshard(hashed, 2, ObjectCheck::Lengths)
        .expect("reshard, lengths");
    assert_eq!((hashed, lengths), (2, 3));
    let (source, _) = backend.load(1).expect("load the source");
    for (generation, workers) in [(2, 3), (3, 2)] {
        let (resharded, topology) = backend.load(generation).expect("load the reshard");
        assert_eq!(topology.workers(), workers);
        assert_eq!(payload_digests(&resharded), payload_digests(&source));
        assert_eq!(resharded.logical_state_root(), source.logical_state_root());
    }
}

/// A truncated chunk payload under the length check: `chunk-size`, naming the manifest
/// that gives the length.
pub fn a_truncated_payload_fails_the_length_check_naming_the_manifest<B: Backend>(backend: &B) {
    let (manifest, manifest_rel) = two_generations(backend);
    let rel = parameters_rel(&manifest, 0);
    let mut bytes = backend.read(&rel);
    bytes.truncate(bytes.len() - 4);
    backend.replace(&rel, bytes);
    let refusal = backend
        .reshard(1, 3, ObjectCheck::Lengths)
        .expect_err("a truncated payload");
    assert_eq!(
        refusal,
        Refusal {
            kind: "chunk-size".into(),
            names: Some(backend.names(&manifest_rel)),
        }
    );
}

/// Publishes generation 0 with five synthetic objects (1000 bytes each, the last 500),
/// applies `damage` to the bytes of object `index`; returns the manifest's relative path.
fn with_damaged_synthetic_object<B: Backend>(
    backend: &B,
    index: usize,
    damage: impl FnOnce(&mut Vec<u8>),
) -> String {
    let spec = SyntheticSpec {
        seed: SEED,
        object_bytes: 1000,
        total_bytes: 4500,
    };
    assert_eq!(backend.publish_synthetic(&state_at(1), 4, spec), 0);
    let (manifest, manifest_rel) = manifest_of(backend, 0);
    let synthetic = manifest.synthetic.as_ref().expect("synthetic objects");
    let rel = object_rel_path(&synthetic.objects[index]);
    let mut bytes = backend.read(&rel);
    damage(&mut bytes);
    backend.replace(&rel, bytes);
    manifest_rel
}

/// A truncated synthetic object: `synthetic-object-size` under the length check and on a
/// hashed load, naming the manifest (what states the length) on every backend.
pub fn a_truncated_synthetic_object_is_refused_naming_the_manifest<B: Backend>(backend: &B) {
    let manifest_rel = with_damaged_synthetic_object(backend, 2, |bytes| bytes.truncate(999));
    let expected = Refusal {
        kind: "synthetic-object-size".into(),
        names: Some(backend.names(&manifest_rel)),
    };
    let lengths = backend
        .reshard(0, 3, ObjectCheck::Lengths)
        .expect_err("a truncated synthetic object, lengths");
    assert_eq!(lengths, expected);
    let hashed = backend
        .load(0)
        .expect_err("a truncated synthetic object, hashed");
    assert_eq!(hashed, expected);
    let report = backend.recover();
    assert_eq!(report.selected, None);
    assert_eq!(
        report.rejected[0].kind,
        shardlift::store::RejectionKind::SyntheticObjectSize
    );
}

/// A synthetic object one byte longer than its manifest says: `synthetic-object-size` on a
/// hashed load (the read stops at the cap), naming the manifest.
pub fn an_extended_synthetic_object_is_refused_naming_the_manifest<B: Backend>(backend: &B) {
    let manifest_rel = with_damaged_synthetic_object(backend, 4, |bytes| bytes.push(7));
    let refusal = backend.load(0).expect_err("an extended synthetic object");
    assert_eq!(
        refusal,
        Refusal {
            kind: "synthetic-object-size".into(),
            names: Some(backend.names(&manifest_rel)),
        }
    );
}

/// Instantiates every test of the suite for one backend: `$make` builds a fresh backend
/// for each test. The including file declares `#[macro_use] mod conformance;`.
macro_rules! conformance_suite {
    ($make:expr) => {
        conformance_suite!(
            $make;
            published_generations_recover_and_load_bit_for_bit,
            an_absent_generation_is_not_found,
            a_flipped_payload_bit_is_a_digest_mismatch,
            a_deleted_payload_is_a_missing_object,
            an_extended_payload_is_too_large,
            a_deleted_manifest_is_a_missing_object,
            a_garbage_latest_changes_nothing,
            a_reshard_keeps_every_byte,
            a_truncated_payload_fails_the_length_check_naming_the_manifest,
            a_truncated_synthetic_object_is_refused_naming_the_manifest,
            an_extended_synthetic_object_is_refused_naming_the_manifest,
        );
    };
    ($make:expr; $($test:ident),+ $(,)?) => {
        $(
            #[test]
            fn $test() {
                let backend = $make;
                conformance::$test(&backend);
            }
        )+
    };
}
