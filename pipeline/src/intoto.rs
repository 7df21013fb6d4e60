//! The in-toto attestation model, one for the whole pipeline: the Statement v1 envelope
//! and its ResourceDescriptor. Release evidence uses [`Statement`] with the SLSA
//! provenance predicate; a receipt is a Statement with the test-result predicate and
//! extra top-level fields, built from the same [`ResourceDescriptor`] and
//! [`STATEMENT_TYPE`] (serde cannot flatten a closed, `deny_unknown_fields` envelope,
//! so the receipt spells its envelope out in `receipt::schema`).
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The Statement v1 `_type` URI.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// An in-toto Statement v1 with predicate `P` (closed: unknown fields are refused).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Statement<P> {
    /// `_type`: [`STATEMENT_TYPE`].
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The artefacts the statement is about.
    pub subject: Vec<ResourceDescriptor>,
    /// `predicateType`: the URI of the predicate's schema.
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// The predicate, of that type.
    pub predicate: P,
}

/// An in-toto ResourceDescriptor (the fields this project uses).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceDescriptor {
    /// A name for the resource, e.g. a file path; optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the resource can be fetched; optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Algorithm → lowercase hex (`sha256`, `gitCommit`, `gitTree`, `gitBlob`).
    pub digest: BTreeMap<String, String>,
    /// Extra facts about the resource, by key; optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, serde_json::Value>>,
}

impl ResourceDescriptor {
    /// A descriptor with `name` and `digest` (pairs of algorithm and lowercase hex), no
    /// URI and no annotations.
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

    /// The descriptor with `uri` set.
    pub fn with_uri(mut self, uri: impl Into<String>) -> Self {
        self.uri = Some(uri.into());
        self
    }

    /// The descriptor with annotation `key` set to `value` (replacing any earlier one).
    pub fn annotate(mut self, key: &str, value: serde_json::Value) -> Self {
        self.annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_owned(), value);
        self
    }

    /// The annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&serde_json::Value> {
        self.annotations.as_ref().and_then(|a| a.get(key))
    }
}
