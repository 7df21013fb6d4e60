//! The killer demo's crash store: a directory in the run directory, or an empty prefix of
//! an S3-compatible object store (RFC 0001 §9). Only the store the publisher is killed on
//! moves; the reference store stays a local directory.
//!
//! On an object store the named barriers are the object-store protocol's steps (RFC 0001
//! §9.6): `commit-after-file-fsync` is reached with the commit record's bytes ready and
//! not sent, `commit-after-rename` once its PUT is acknowledged. The outcome table is the
//! same on both backends.
//!
//! Invariant: the demo reads the crash store only through loaders that verify what they
//! return (`store::load_generation`, `ObjStore::load_generation`).
use std::path::{Path, PathBuf};

use crate::core::digest::Digest;
use crate::core::logical::LogicalState;
use crate::core::topology::Topology;
use crate::lab::{ChildStore, LabError, LocalStore};
use crate::objstore::{ConditionalCreate, ObjStore, ObjStoreError, ObjStoreOptions};
use crate::store::{self, CommitSummary, ObjectCheck};

use super::error::store_error;
use super::DemoError;

/// What the run's record says about an object-store crash store.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct CrashStoreEntry {
    /// The store's location (`s3://bucket/prefix`).
    pub location: String,
    /// What the conditional-create probe found when the run opened it.
    pub conditional_create: ConditionalCreate,
}

/// Where the crash store lives.
pub(super) enum CrashStore {
    /// A store directory.
    Local(PathBuf),
    /// An object-store prefix; `argument` is its URL as the children's `--store`.
    Object {
        /// The URL, as a child's `--store` argument.
        argument: PathBuf,
        /// The store, opened (and probed) by the run.
        store: ObjStore,
    },
}

fn object_error(context: &'static str) -> impl FnOnce(ObjStoreError) -> DemoError {
    move |source| DemoError::ObjStore {
        context,
        source: Box::new(source),
    }
}

/// Refuses an object-store location the run cannot use before any work: a bad URL, an
/// unreachable store, or a prefix that holds anything (the run numbers its generations
/// from 0 and never mixes with another run's records).
pub fn check_object_crash_store(url: &str) -> Result<(), DemoError> {
    let store = ObjStore::open(url, ObjStoreOptions::default(), false)
        .map_err(object_error("opening the crash store"))?;
    let keys = store
        .client()
        .list("")
        .map_err(object_error("listing the crash store"))?;
    match keys.first() {
        None => Ok(()),
        Some(first) => Err(DemoError::CrashStoreNotEmpty {
            location: url.to_owned(),
            first_key: first.clone(),
            keys: keys.len() as u64,
        }),
    }
}

impl CrashStore {
    /// The crash store of a run: `url`'s prefix, opened and probed, or `directory`.
    pub(super) fn open(url: Option<&str>, directory: PathBuf) -> Result<Self, DemoError> {
        match url {
            None => Ok(CrashStore::Local(directory)),
            Some(url) => Ok(CrashStore::Object {
                argument: PathBuf::from(url),
                store: ObjStore::open(url, ObjStoreOptions::default(), true)
                    .map_err(object_error("opening the crash store"))?,
            }),
        }
    }

    /// The record's entry: `None` for a local store (its output is unchanged).
    pub(super) fn entry(&self) -> Option<CrashStoreEntry> {
        match self {
            CrashStore::Local(_) => None,
            CrashStore::Object { store, .. } => Some(CrashStoreEntry {
                location: store.client().location().url(),
                conditional_create: store.conditional_create(),
            }),
        }
    }

    /// The fully verified state and placement of `generation`.
    pub(super) fn load_generation(
        &self,
        generation: u64,
        context: &'static str,
    ) -> Result<(LogicalState, Topology), DemoError> {
        match self {
            CrashStore::Local(directory) => {
                store::load_generation(directory, generation).map_err(store_error(context))
            }
            CrashStore::Object { store, .. } => store
                .load_generation(generation)
                .map_err(object_error(context)),
        }
    }

    /// `generation` resharded offline onto `topology` as the next generation.
    pub(super) fn reshard(
        &self,
        generation: u64,
        topology: Topology,
    ) -> Result<CommitSummary, DemoError> {
        match self {
            CrashStore::Local(directory) => {
                store::reshard(directory, generation, topology, ObjectCheck::Lengths)
                    .map_err(store_error("resharding"))
            }
            CrashStore::Object { store, .. } => store
                .reshard(
                    generation,
                    topology,
                    ObjectCheck::Lengths,
                    &mut store::NoHooks,
                    &mut crate::core::progress::NoProgress,
                )
                .map(|summary| summary.commit_summary())
                .map_err(object_error("resharding")),
        }
    }

    /// The root `generation`'s commit record states, read back from the store.
    pub(super) fn committed_root(&self, generation: u64) -> Result<Digest, DemoError> {
        const CONTEXT: &str = "reading the reshard's commit record";
        match self {
            CrashStore::Local(directory) => Ok(store::recovery::verify_generation_with(
                &store::RealFs,
                directory,
                generation,
                false,
            )
            .map_err(store_error(CONTEXT))?
            .commit
            .logical_state_root),
            CrashStore::Object { store, .. } => store
                .committed_root(generation)
                .map_err(object_error(CONTEXT)),
        }
    }
}

impl ChildStore for CrashStore {
    fn argument(&self) -> &Path {
        match self {
            CrashStore::Local(directory) => directory,
            CrashStore::Object { argument, .. } => argument,
        }
    }

    fn next_generation(&self) -> Result<u64, LabError> {
        match self {
            CrashStore::Local(directory) => LocalStore(directory).next_generation(),
            CrashStore::Object { store, .. } => {
                store.next_generation().map_err(|e| observation(store, e))
            }
        }
    }

    fn commit_visible(&self, generation: u64) -> Result<bool, LabError> {
        match self {
            CrashStore::Local(directory) => LocalStore(directory).commit_visible(generation),
            CrashStore::Object { store, .. } => store
                .commit_listed(generation)
                .map_err(|e| observation(store, e)),
        }
    }
}

fn observation(store: &ObjStore, error: ObjStoreError) -> LabError {
    LabError::StoreObservation {
        store: store.client().location().url(),
        message: error.to_string(),
    }
}
