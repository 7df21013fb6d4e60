//! `release-evidence.json`: an in-toto Statement v1 whose predicate is SLSA provenance v1.
//!
//! The types are closed (`deny_unknown_fields`) and the file is written as RFC 8785
//! canonical JSON, so it has exactly one byte form and `verify-release` refuses any other.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";
/// What "building" means here: binding a source revision, running both killer-demo
/// barriers and verifying their bundles (a URN: no document host is claimed).
pub const BUILD_TYPE: &str = "urn:shardlift:release-evidence:v1";
/// The builder is the local host running `pipeline`; nothing attests it.
pub const BUILDER_ID: &str = "urn:shardlift:builder:local-unattested";
/// Size cap when reading the Statement back.
pub const STATEMENT_CAP: u64 = 1 << 20;

/// An in-toto ResourceDescriptor (the fields this project uses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceDescriptor {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Algorithm → lowercase hex (`sha256`, `gitCommit`, `gitTree`, `gitBlob`).
    pub digest: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, serde_json::Value>>,
}

impl ResourceDescriptor {
    pub fn named(name: impl Into<String>, digest: &[(&str, String)]) -> Self {
        ResourceDescriptor {
            name: Some(name.into()),
            uri: None,
            digest: digest
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
            annotations: None,
        }
    }

    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }

    pub fn annotate(mut self, key: &str, value: serde_json::Value) -> Self {
        self.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value);
        self
    }

    pub fn annotation(&self, key: &str) -> Option<&serde_json::Value> {
        self.annotations.as_ref().and_then(|a| a.get(key))
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<ResourceDescriptor>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    pub predicate: Provenance,
}

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
