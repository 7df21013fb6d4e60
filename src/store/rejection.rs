//! Why recovery rejects a commit record: the content checks of RFC 0001 §5, one list for
//! every backend. Only a failure of stored content rejects a record; an error that says
//! nothing about the content (a failed read or request) ends the scan instead.
use serde::{Deserialize, Serialize};

/// Why recovery rejected a commit record: the content check of RFC 0001 §5 that failed.
/// Only a failure of stored content rejects a record; an error that says nothing about
/// the content (a failed read or request) ends the scan instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectionKind {
    /// A record or object is not a regular file.
    NotRegularFile,
    /// A record or object is over its size cap.
    TooLarge,
    /// A record does not decode.
    Undecodable,
    /// A record names another schema.
    WrongSchema,
    /// A record's format version is not supported.
    UnsupportedVersion,
    /// A record is not in canonical form.
    NotCanonical,
    /// An object the manifest names is absent.
    MissingObject,
    /// An object's or record's bytes hash to another digest.
    DigestMismatch,
    /// The commit record's name gives another generation than its content.
    GenerationNameMismatch,
    /// The commit record and the manifest do not bind each other.
    BindingMismatch,
    /// The manifest is malformed.
    MalformedManifest,
    /// The manifest's ownership does not match its topology.
    OwnershipMismatch,
    /// A chunk object has the wrong size.
    ChunkSize,
    /// A synthetic object has another length than the manifest gives.
    SyntheticObjectSize,
    /// The decoded state is malformed.
    MalformedState,
    /// The state's root digest is not the one recorded.
    RootMismatch,
    /// The recorded topology is invalid.
    InvalidTopology,
    /// The generation the record names is not found.
    GenerationNotFound,
}

impl RejectionKind {
    /// Every kind, in declaration order.
    pub const ALL: [RejectionKind; 18] = [
        RejectionKind::NotRegularFile,
        RejectionKind::TooLarge,
        RejectionKind::Undecodable,
        RejectionKind::WrongSchema,
        RejectionKind::UnsupportedVersion,
        RejectionKind::NotCanonical,
        RejectionKind::MissingObject,
        RejectionKind::DigestMismatch,
        RejectionKind::GenerationNameMismatch,
        RejectionKind::BindingMismatch,
        RejectionKind::MalformedManifest,
        RejectionKind::OwnershipMismatch,
        RejectionKind::ChunkSize,
        RejectionKind::SyntheticObjectSize,
        RejectionKind::MalformedState,
        RejectionKind::RootMismatch,
        RejectionKind::InvalidTopology,
        RejectionKind::GenerationNotFound,
    ];

    /// Its name, as reports spell it (the error kind it comes from).
    pub const fn name(self) -> &'static str {
        match self {
            RejectionKind::NotRegularFile => "not-regular-file",
            RejectionKind::TooLarge => "too-large",
            RejectionKind::Undecodable => "undecodable",
            RejectionKind::WrongSchema => "wrong-schema",
            RejectionKind::UnsupportedVersion => "unsupported-version",
            RejectionKind::NotCanonical => "not-canonical",
            RejectionKind::MissingObject => "missing-object",
            RejectionKind::DigestMismatch => "digest-mismatch",
            RejectionKind::GenerationNameMismatch => "generation-name-mismatch",
            RejectionKind::BindingMismatch => "binding-mismatch",
            RejectionKind::MalformedManifest => "malformed-manifest",
            RejectionKind::OwnershipMismatch => "ownership-mismatch",
            RejectionKind::ChunkSize => "chunk-size",
            RejectionKind::SyntheticObjectSize => "synthetic-object-size",
            RejectionKind::MalformedState => "malformed-state",
            RejectionKind::RootMismatch => "root-mismatch",
            RejectionKind::InvalidTopology => "invalid-topology",
            RejectionKind::GenerationNotFound => "generation-not-found",
        }
    }
}

impl std::fmt::Display for RejectionKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rejection_kind_is_spelled_in_json_as_its_name() {
        for kind in RejectionKind::ALL {
            let json = serde_json::to_string(&kind).expect("encode");
            assert_eq!(json, format!("\"{}\"", kind.name()));
            let back: RejectionKind = serde_json::from_str(&json).expect("decode");
            assert_eq!(back, kind);
        }
        let mut names: Vec<&str> = RejectionKind::ALL.iter().map(|k| k.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(
            names.len(),
            RejectionKind::ALL.len(),
            "two kinds share a name"
        );
    }

    #[test]
    fn an_unknown_rejection_kind_is_refused() {
        let decoded = serde_json::from_str::<RejectionKind>("\"io\"");
        assert!(decoded.is_err(), "an I/O error is never a rejection");
    }
}
