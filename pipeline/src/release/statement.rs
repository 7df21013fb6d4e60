//! `release-evidence.json`: an in-toto Statement v1 whose predicate is SLSA provenance v1.
//!
//! The types are closed (`deny_unknown_fields`) and the file is written as RFC 8785
//! canonical JSON, so it has exactly one byte form and `verify-release` refuses any other.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::intoto::{self, ResourceDescriptor};

/// The SLSA provenance v1 predicate type.
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

/// The SLSA provenance v1 predicate.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Provenance {
    /// `buildDefinition`: what was run and from what.
    pub build_definition: BuildDefinition,
    /// `runDetails`: who ran it and what else it produced.
    pub run_details: RunDetails,
}

/// SLSA `buildDefinition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildDefinition {
    /// `buildType`: [`BUILD_TYPE`].
    pub build_type: String,
    /// `externalParameters`.
    pub external_parameters: ExternalParameters,
    /// `internalParameters`.
    pub internal_parameters: InternalParameters,
    /// `resolvedDependencies`: the source commit and tree, the libtorch wheels, the dataset
    /// files and every runtime source by blob id (the lock files with their SHA-256 too).
    pub resolved_dependencies: Vec<ResourceDescriptor>,
}

/// What the caller chose.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExternalParameters {
    /// The barrier names run, in order ([`super::pins::BARRIERS`]).
    pub barriers: Vec<String>,
    /// The seed of both runs.
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
    /// The binaries that ran and the libtorch they loaded.
    pub build_identity: BuildIdentity,
    /// What the evidence does not prove ([`super::pins::NONCLAIMS`]).
    pub nonclaims: Vec<String>,
}

/// The binaries that ran and the libtorch they loaded (no paths, no timestamps).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BuildIdentity {
    /// SHA-256 of the `shardlift` binary, lowercase hex.
    pub shardlift_sha256: String,
    /// SHA-256 of the `pipeline` binary, lowercase hex.
    pub pipeline_sha256: String,
    /// The `pipeline` crate version.
    pub pipeline_version: String,
    /// The `tch` crate version the `shardlift` binary was built with.
    pub tch_version: String,
    /// The libtorch version the wheels provide.
    pub libtorch_version: String,
    /// Each libtorch library mapped by a running killer-demo process, named relative to
    /// the wheel prefix (e.g. `torch/lib/libtorch_cpu.so`), with its SHA-256.
    pub loaded_libraries: Vec<LoadedLibrary>,
    /// The CPU kernel path the runs took (`shardlift::evidence::kernel_path`): the bundles
    /// are reproduced byte for byte only on this path. Absent from evidence recorded
    /// before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_kernel_path: Option<String>,
}

/// One libtorch library a killer-demo process mapped.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadedLibrary {
    /// Its path relative to the wheel prefix, e.g. `torch/lib/libtorch_cpu.so`.
    pub name: String,
    /// The SHA-256 of its bytes, lowercase hex.
    pub sha256: String,
}

/// SLSA `runDetails`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunDetails {
    /// Who ran the build.
    pub builder: Builder,
    /// The summary and transcripts, with their SHA-256.
    pub byproducts: Vec<ResourceDescriptor>,
}

/// SLSA `builder`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Builder {
    /// [`BUILDER_ID`]: the local host, unattested.
    pub id: String,
    /// Component → version: `pipeline` and its crate version.
    pub version: BTreeMap<String, String>,
}
