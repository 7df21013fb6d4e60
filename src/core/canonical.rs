//! RFC 8785 canonical JSON under closed, versioned schemas.
//!
//! Decoding checks, in this order: (1) the size cap, (2) the schema id, (3) the version,
//! (4) the closed schema (types declare `deny_unknown_fields`), (5) that re-encoding
//! gives the very same bytes. Every accepted record therefore has exactly one byte form,
//! so its SHA-256 identifies it.
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A record type with a schema id, one accepted version and a size cap.
pub trait CanonicalRecord: Serialize + DeserializeOwned {
    /// The schema id every record of this type carries.
    const SCHEMA: &'static str;
    /// The one schema version this build reads and writes.
    const VERSION: u32;
    /// The largest encoding, in bytes, that is decoded at all.
    const CAP: u64;
}

/// Declares a type a [`CanonicalRecord`]: `canonical_record!(Type, SCHEMA, VERSION, CAP);`.
#[macro_export]
macro_rules! canonical_record {
    ($record:ty, $schema:expr, $version:expr, $cap:expr) => {
        impl $crate::core::canonical::CanonicalRecord for $record {
            const SCHEMA: &'static str = $schema;
            const VERSION: u32 = $version;
            const CAP: u64 = $cap;
        }
    };
}

/// Why bytes are not a valid canonical record.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CanonicalError {
    /// The bytes exceed the record type's cap.
    #[error("{schema}: {found} bytes exceeds the cap of {cap}")]
    TooLarge {
        /// The record's schema id.
        schema: &'static str,
        /// The cap, in bytes.
        cap: u64,
        /// The length found, in bytes.
        found: u64,
    },
    /// The bytes are not JSON of the record's closed schema.
    #[error("{schema}: not decodable: {message}")]
    Undecodable {
        /// The record's schema id.
        schema: &'static str,
        /// The decoder's message.
        message: String,
    },
    /// The record names another schema.
    #[error("expected schema {expected}, found {found}")]
    WrongSchema {
        /// The schema id expected.
        expected: &'static str,
        /// The schema id found.
        found: String,
    },
    /// The record has a version this build does not read.
    #[error(
        "{schema}: version {found} is not supported (this build reads exactly version {expected})"
    )]
    UnsupportedVersion {
        /// The record's schema id.
        schema: &'static str,
        /// The one version this build reads.
        expected: u32,
        /// The version found, as text.
        found: String,
    },
    /// The bytes decode but are not their own canonical encoding.
    #[error("{schema}: the bytes are valid JSON but not the canonical (RFC 8785) encoding")]
    NotCanonical {
        /// The record's schema id.
        schema: &'static str,
    },
    /// The record could not be serialised.
    #[error("{schema}: cannot encode: {message}")]
    Encode {
        /// The record's schema id.
        schema: &'static str,
        /// The serialiser's message.
        message: String,
    },
}

#[derive(Deserialize)]
struct Header {
    schema: serde_json::Value,
    version: serde_json::Value,
}

/// Canonical bytes of a record.
pub fn encode<R: CanonicalRecord>(record: &R) -> Result<Vec<u8>, CanonicalError> {
    serde_json_canonicalizer::to_vec(record).map_err(|error| CanonicalError::Encode {
        schema: R::SCHEMA,
        message: error.to_string(),
    })
}

/// Decodes a record, enforcing the checks in the module docs in order.
pub fn decode<R: CanonicalRecord>(bytes: &[u8]) -> Result<R, CanonicalError> {
    if bytes.len() as u64 > R::CAP {
        return Err(CanonicalError::TooLarge {
            schema: R::SCHEMA,
            cap: R::CAP,
            found: bytes.len() as u64,
        });
    }
    let undecodable = |message: String| CanonicalError::Undecodable {
        schema: R::SCHEMA,
        message,
    };
    let header: Header = serde_json::from_slice(bytes).map_err(|e| undecodable(e.to_string()))?;
    if header.schema.as_str() != Some(R::SCHEMA) {
        return Err(CanonicalError::WrongSchema {
            expected: R::SCHEMA,
            found: header.schema.to_string(),
        });
    }
    if header.version.as_u64() != Some(u64::from(R::VERSION)) {
        return Err(CanonicalError::UnsupportedVersion {
            schema: R::SCHEMA,
            expected: R::VERSION,
            found: header.version.to_string(),
        });
    }
    let record: R = serde_json::from_slice(bytes).map_err(|e| undecodable(e.to_string()))?;
    if encode(&record)? != bytes {
        return Err(CanonicalError::NotCanonical { schema: R::SCHEMA });
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Probe {
        schema: String,
        version: u32,
        value: u64,
    }
    crate::canonical_record!(Probe, "test.probe", 2, 100);

    #[test]
    fn each_check_has_its_own_error() {
        let probe = Probe {
            schema: "test.probe".into(),
            version: 2,
            value: 7,
        };
        let bytes = encode(&probe).expect("encode");
        assert_eq!(bytes, br#"{"schema":"test.probe","value":7,"version":2}"#);
        assert_eq!(decode::<Probe>(&bytes), Ok(probe));
        assert!(matches!(
            decode::<Probe>(&[b' '; 101]),
            Err(CanonicalError::TooLarge { .. })
        ));
        assert!(matches!(
            decode::<Probe>(b"{"),
            Err(CanonicalError::Undecodable { .. })
        ));
        assert!(matches!(
            decode::<Probe>(br#"{"schema":"other","value":7,"version":2}"#),
            Err(CanonicalError::WrongSchema { .. })
        ));
        assert!(matches!(
            decode::<Probe>(br#"{"schema":"test.probe","value":7,"version":3}"#),
            Err(CanonicalError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            decode::<Probe>(br#"{"schema":"test.probe","value":7,"version":2,"extra":1}"#),
            Err(CanonicalError::Undecodable { .. })
        ));
        assert!(matches!(
            decode::<Probe>(br#"{"version":2,"schema":"test.probe","value":7}"#),
            Err(CanonicalError::NotCanonical { .. })
        ));
    }
}
