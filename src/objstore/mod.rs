//! The checkpoint store on an S3-compatible object store (RFC 0001 §9, "Object stores").
//!
//! The same records as the local store (`crate::store::codec`: canonical JSON, closed
//! schemas, size caps, validation order) under keys in a bucket prefix:
//!
//! - `objects/ab/cdef…`: chunk payloads and manifests, content-addressed (the key carries
//!   the SHA-256 of the bytes), so a re-PUT writes the same bytes and is harmless;
//! - `commits/<generation:020>/<sha256 of the record>.json`: commit records, the commit
//!   point. The key carries the record's own digest, so no PUT ever replaces a record;
//!   on a store that ignores conditional create, two publishers that race on one
//!   generation leave two records, and recovery reports that as a split brain instead of
//!   choosing;
//! - `claims/<generation:020>`: where the store honours conditional create, the fence a
//!   writer creates before its commit record, so a racing writer gets `generation-taken`
//!   (RFC 0001 §9.8); ignored by recovery;
//! - `refs/LATEST`: a hint, never trusted;
//! - `probes/`: the conditional-create probe's scratch keys, ignored by recovery.
//!
//! Entry points: [`ObjStore::open`], [`ObjStore::publish`], [`ObjStore::recover`],
//! [`ObjStore::load_generation`]. The API is synchronous (a small owned tokio runtime
//! runs the requests); every request has a timeout and bounded retries, every read a cap.
use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::progress::Progress;
use crate::core::topology::Topology;
use crate::store::barrier::BarrierHook;
use crate::store::recovery::ObjectCheck;

pub mod bench;
pub mod client;
pub mod error;
pub mod keys;
pub mod recovery;
pub mod writer;

pub use client::{ConditionalCreate, ObjClient, ObjStoreOptions, S3Location};
pub use error::ObjStoreError;
pub use recovery::{ObjRecoveryReport, SplitBrainRecords};
pub use writer::ObjCommitSummary;

/// An open object store: the client and what the probe found.
#[derive(Debug)]
pub struct ObjStore {
    client: ObjClient,
    conditional_create: ConditionalCreate,
}

impl ObjStore {
    /// Opens `url` (`s3://bucket[/prefix]`) with credentials from the `AWS_*` variables.
    /// With `probe` it probes conditional create (two creates of a fresh key under
    /// `probes/`); without, nothing is written and the capability is `not-probed`.
    pub fn open(url: &str, options: ObjStoreOptions, probe: bool) -> Result<Self, ObjStoreError> {
        Self::open_at(S3Location::parse(url)?, options, probe)
    }

    /// As [`Self::open`], at an already parsed location.
    pub fn open_at(
        location: S3Location,
        options: ObjStoreOptions,
        probe: bool,
    ) -> Result<Self, ObjStoreError> {
        Self::with_client(ObjClient::open(location, options)?, probe)
    }

    /// A store over an already built client (see [`ObjClient::with_store`]), probing
    /// conditional create when `probe`, as [`Self::open`] does.
    pub fn with_client(client: ObjClient, probe: bool) -> Result<Self, ObjStoreError> {
        let conditional_create = if probe {
            client.probe_conditional_create()?
        } else {
            ConditionalCreate::NotProbed
        };
        Ok(ObjStore {
            client,
            conditional_create,
        })
    }

    /// The client (for raw requests: the throughput comparison, fault tests).
    pub fn client(&self) -> &ObjClient {
        &self.client
    }

    /// What the conditional-create probe found at open.
    pub fn conditional_create(&self) -> ConditionalCreate {
        self.conditional_create
    }

    /// Publishes `state` on `topology` as the next generation (RFC 0001 §9.3).
    pub fn publish(
        &self,
        state: &LogicalState,
        topology: Topology,
        hooks: &mut dyn BarrierHook,
    ) -> Result<ObjCommitSummary, ObjStoreError> {
        writer::publish(
            &self.client,
            self.conditional_create,
            state,
            topology,
            hooks,
        )
    }

    /// Reshards `generation` onto `topology` as the next generation (RFC 0001 §9.9):
    /// checks the source first (its record and manifest in full, its objects as `objects`
    /// says), PUTs no chunk object.
    pub fn reshard(
        &self,
        generation: u64,
        topology: Topology,
        objects: ObjectCheck,
        hooks: &mut dyn BarrierHook,
        progress: &mut dyn Progress,
    ) -> Result<ObjCommitSummary, ObjStoreError> {
        writer::reshard(
            &self.client,
            self.conditional_create,
            generation,
            topology,
            objects,
            hooks,
            progress,
        )
    }

    /// Publishes `state` plus the synthetic objects of `spec` as the next generation
    /// (RFC 0001 §9.3; for benchmarks at scale).
    pub fn publish_synthetic(
        &self,
        state: &LogicalState,
        topology: Topology,
        spec: crate::store::writer::SyntheticSpec,
        hooks: &mut dyn BarrierHook,
        progress: &mut dyn Progress,
    ) -> Result<ObjCommitSummary, ObjStoreError> {
        writer::publish_synthetic(
            &self.client,
            self.conditional_create,
            state,
            topology,
            spec,
            hooks,
            progress,
        )
    }

    /// Read-only recovery scan (RFC 0001 §9.4). A split brain at the highest valid
    /// generation is an error, [`ObjStoreError::SplitBrain`]; one below it is reported.
    pub fn recover(&self) -> Result<ObjRecoveryReport, ObjStoreError> {
        recovery::recover(&self.client, self.conditional_create)
    }

    /// The fully verified state and topology of `generation`; never returns unverified
    /// bytes. Two different valid records for it are a split brain.
    pub fn load_generation(
        &self,
        generation: u64,
    ) -> Result<(LogicalState, Topology), ObjStoreError> {
        recovery::load_generation(&self.client, generation)
    }

    /// The logical-state root the one valid commit record of `generation` states, after
    /// verifying it as recovery does (record, manifest, every payload hashed and the root
    /// recomputed; the state is not decoded). The record's root is checked equal to its
    /// manifest's, so the manifest's is returned.
    pub fn committed_root(&self, generation: u64) -> Result<Digest, ObjStoreError> {
        Ok(
            recovery::verify_generation(&self.client, generation, false)?
                .manifest
                .logical_state_root,
        )
    }

    /// Whether any commit record of `generation` is listed (valid or not).
    pub fn commit_listed(&self, generation: u64) -> Result<bool, ObjStoreError> {
        let prefix = keys::commit_prefix(generation);
        Ok(self
            .client
            .list(&prefix)?
            .iter()
            .any(|key| keys::parse_commit_key(key).is_some_and(|(g, _)| g == generation)))
    }

    /// The generation the next publish or reshard will commit (RFC 0001 §9.3 step 1). A
    /// store opened without the probe is probed first, as its writers do, so claims count
    /// wherever the backend honours conditional create.
    pub fn next_generation(&self) -> Result<u64, ObjStoreError> {
        let conditional_create = writer::probed(&self.client, self.conditional_create)?;
        writer::next_generation(&self.client, conditional_create)
    }

    /// As [`Self::load_generation`], with the SHA-256 of the one commit record that
    /// verified (what an export records as its provenance).
    pub fn load_generation_record(
        &self,
        generation: u64,
    ) -> Result<(LogicalState, Topology, Digest), ObjStoreError> {
        recovery::load_generation_record(&self.client, generation)
    }
}
