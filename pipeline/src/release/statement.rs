//! `release-evidence.json`: an in-toto Statement v1 whose predicate is SLSA provenance v1.
//!
//! The types are closed (`deny_unknown_fields`) and the file is written as RFC 8785
//! canonical JSON, so it has exactly one byte form and `verify-release` refuses any other.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::intoto::{self, ResourceDescriptor};

pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// What "building" means here: binding a source revision, running both killer-demo
/// barriers and verifying their bundles (a URN: no document host is claimed).
pub const BUILD_TYPE: &str = "urn:shardlift:release-evidence:v1";
/// The builder is the local host running `pipeline`; nothing attests it.
pub const BUILDER_ID: &str = "urn:shardlift:builder:local-unattested";
/// Size cap when reading the Statement back.
pub const STATEMENT_CAP: u64 = 1 << 20;

/// The release Statement: in-toto Statement v1 with the SLSA provenance v1 predicate.
pub type Statement = intoto::Statement<Provenance>;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provenance {
    pub build_definition: BuildDefinition,
    pub run_details: RunDetails,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildDefinition {
    pub build_type: String,
    pub external_parameters: ExternalParameters,
    pub internal_parameters: InternalParameters,
    pub resolved_dependencies: Vec<ResourceDescriptor>,
}

/// What the caller chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalParameters {
    pub barriers: Vec<String>,
    pub seed: u64,
    /// The git commit the runs were bound to (`--expected-revision` of each run).
    pub source_revision: String,
}

/// What the pipeline fixed or observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct InternalParameters {
    /// Which tracked files count as runtime sources (see `pins::RUNTIME_SOURCE_RULE`).
    pub runtime_source_rule: Vec<String>,
    /// Ignored files present in the checkout (allowed; listed for the record).
    pub ignored_files: Vec<String>,
    pub build_identity: BuildIdentity,
    pub nonclaims: Vec<String>,
}

/// The binaries that ran and the libtorch they loaded (no paths, no timestamps).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildIdentity {
    pub shardlift_sha256: String,
    pub pipeline_sha256: String,
    pub pipeline_version: String,
    pub tch_version: String,
    pub libtorch_version: String,
    /// Each libtorch library mapped by a running killer-demo process, named relative to
    /// the wheel prefix (e.g. `torch/lib/libtorch_cpu.so`), with its SHA-256.
    pub loaded_libraries: Vec<LoadedLibrary>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadedLibrary {
    pub name: String,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDetails {
    pub builder: Builder,
    /// The summary and transcripts, with their SHA-256.
    pub byproducts: Vec<ResourceDescriptor>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Builder {
    pub id: String,
    pub version: BTreeMap<String, String>,
}
