//! Canonical record codecs: RFC 8785 JSON under closed, versioned schemas.
//!
//! Decoding (1) caps the size, (2) checks the schema id and version, (3) parses under a
//! closed schema (`deny_unknown_fields`), and (4) re-encodes and requires the very same
//! bytes, so every accepted record has exactly one byte form and one digest. Integers that
//! may exceed 2^53 (seed, step, cursor, generation) are decimal strings; FP32
//! hyper-parameters are their IEEE-754 bit patterns, so nothing is lost to JSON numbers.
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::core::canonical::{self, CanonicalError, CanonicalRecord};
use crate::core::digest::Digest;
use crate::core::logical::{Hyperparameters, PARAMETER_COUNT};

use crate::store::error::StoreError;

/// Schema id of manifests.
pub const MANIFEST_SCHEMA: &str = "shardlift.store.manifest";
/// Schema id of commit records.
pub const COMMIT_SCHEMA: &str = "shardlift.store.commit";
/// Schema id of `refs/LATEST`.
pub const LATEST_SCHEMA: &str = "shardlift.store.latest";
/// The one schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

/// Largest commit record accepted.
pub const MAX_COMMIT_BYTES: u64 = 4096;
/// Largest LATEST record accepted.
pub const MAX_LATEST_BYTES: u64 = 4096;
/// Largest manifest accepted (one chunk entry is about 300 bytes; chunks ≤ PARAMETER_COUNT).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// Largest chunk object accepted: one slot of the whole parameter vector in FP32.
pub const MAX_CHUNK_OBJECT_BYTES: u64 = (PARAMETER_COUNT as u64) * 4;
/// Largest synthetic object accepted (16 MiB): a tensor of a large model's state. A
/// publishing thread holds one whole object, and so does an object store's verifying read.
pub const MAX_SYNTHETIC_OBJECT_BYTES: u64 = 16 << 20;

/// Decimal-string serde for u64 (JSON numbers are only exact up to 2^53).
pub mod dec_u64 {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the value as a decimal string.
    pub fn serialize<S: Serializer>(value: &u64, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.to_string())
    }

    /// Reads a canonical decimal string (see [`parse`]).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        parse(&text).map_err(serde::de::Error::custom)
    }

    /// Parses the one canonical decimal form (no sign, no leading zeros, ≤ 20 digits).
    pub fn parse(text: &str) -> Result<u64, String> {
        let canonical = !text.is_empty()
            && text.len() <= 20
            && text.bytes().all(|b| b.is_ascii_digit())
            && (text == "0" || !text.starts_with('0'));
        if !canonical {
            return Err(format!("{text:?} is not a canonical decimal u64"));
        }
        text.parse::<u64>()
            .map_err(|_| format!("{text:?} is out of range for u64"))
    }
}

/// Decimal-string serde for `Option<u64>` (null when absent).
pub mod dec_u64_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes a decimal string, or null for `None`.
    pub fn serialize<S: Serializer>(value: &Option<u64>, serializer: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(v) => serializer.serialize_str(&v.to_string()),
            None => serializer.serialize_none(),
        }
    }

    /// Reads null as `None`, else a canonical decimal string.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<u64>, D::Error> {
        let text = <Option<std::borrow::Cow<'de, str>>>::deserialize(deserializer)?;
        match text {
            None => Ok(None),
            Some(text) => crate::store::codec::dec_u64::parse(&text)
                .map(Some)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Hyper-parameters as stored: FP32 values as bit patterns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HyperparametersRecord {
    /// The seed (a decimal string in JSON).
    #[serde(with = "dec_u64")]
    pub seed: u64,
    /// Bits of the FP32 learning rate.
    pub learning_rate_bits: u32,
    /// Bits of the FP32 AdamW beta1.
    pub beta1_bits: u32,
    /// Bits of the FP32 AdamW beta2.
    pub beta2_bits: u32,
    /// Bits of the FP32 AdamW epsilon.
    pub epsilon_bits: u32,
    /// Bits of the FP32 weight decay.
    pub weight_decay_bits: u32,
    /// Samples per logical micro-batch.
    pub micro_batch_size: u32,
    /// Logical micro-batches per global batch.
    pub logical_micro_batches: u32,
    /// FP32 values per optimizer chunk.
    pub chunk_elements: u32,
}

impl From<&Hyperparameters> for HyperparametersRecord {
    fn from(h: &Hyperparameters) -> Self {
        HyperparametersRecord {
            seed: h.seed,
            learning_rate_bits: h.learning_rate.to_bits(),
            beta1_bits: h.beta1.to_bits(),
            beta2_bits: h.beta2.to_bits(),
            epsilon_bits: h.epsilon.to_bits(),
            weight_decay_bits: h.weight_decay.to_bits(),
            micro_batch_size: h.micro_batch_size,
            logical_micro_batches: h.logical_micro_batches,
            chunk_elements: h.chunk_elements,
        }
    }
}

impl HyperparametersRecord {
    /// The hyper-parameters these bits encode, exactly.
    pub fn to_hyperparameters(&self) -> Hyperparameters {
        Hyperparameters {
            seed: self.seed,
            learning_rate: f32::from_bits(self.learning_rate_bits),
            beta1: f32::from_bits(self.beta1_bits),
            beta2: f32::from_bits(self.beta2_bits),
            epsilon: f32::from_bits(self.epsilon_bits),
            weight_decay: f32::from_bits(self.weight_decay_bits),
            micro_batch_size: self.micro_batch_size,
            logical_micro_batches: self.logical_micro_batches,
            chunk_elements: self.chunk_elements,
        }
    }
}

/// One logical chunk in a manifest: its stable id, its length and the content addresses
/// of its three raw little-endian FP32 payloads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChunkEntry {
    /// The chunk's stable id.
    pub id: u32,
    /// FP32 values in the chunk.
    pub elements: u32,
    /// Address of the parameter payload.
    pub parameters: Digest,
    /// Address of the first-moment payload.
    pub exp_avg: Digest,
    /// Address of the second-moment payload.
    pub exp_avg_sq: Digest,
}

impl ChunkEntry {
    /// The three payload addresses with their slot names, in slot order.
    pub fn digests(&self) -> [(&'static str, Digest); 3] {
        [
            ("parameters", self.parameters),
            ("exp_avg", self.exp_avg),
            ("exp_avg_sq", self.exp_avg_sq),
        ]
    }

    /// The length of each of the chunk's three payloads: `elements` FP32 values of four
    /// bytes. A `u32` count times four always fits a `u64`, so no length overflows.
    pub fn payload_len(&self) -> u64 {
        u64::from(self.elements) * 4
    }
}

/// A manifest (stored as an object): everything needed to rebuild one `LogicalState`
/// and its placement on `workers` workers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestRecord {
    /// Always [`MANIFEST_SCHEMA`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`].
    pub version: u32,
    /// Optimizer steps taken.
    #[serde(with = "dec_u64")]
    pub step: u64,
    /// Global index of the next unconsumed sample.
    #[serde(with = "dec_u64")]
    pub cursor: u64,
    /// Digest of the data ledger up to `step`.
    pub ledger_digest: Digest,
    /// The hyper-parameters, as bits.
    pub hyperparameters: HyperparametersRecord,
    /// The worker count of the placement.
    pub workers: u32,
    /// Owner rank of each chunk, by chunk id (`chunk_owner(c) = c mod workers`).
    pub ownership: Vec<u32>,
    /// Every chunk, in logical order.
    pub chunks: Vec<ChunkEntry>,
    /// The projected logical-state root of the state this manifest describes.
    pub logical_state_root: Digest,
    /// Extra opaque objects that scale a synthetic state to benchmark size (absent in
    /// every trained state; RFC 0001 §3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub synthetic: Option<SyntheticPayloads>,
}

/// The opaque objects of a state made by `store publish-synthetic --state-bytes`: each is
/// verified like a chunk payload (SHA-256 and exact length) and kept by reshard; they are
/// not part of the logical-state root.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyntheticPayloads {
    /// Seed of their deterministic content.
    #[serde(with = "dec_u64")]
    pub seed: u64,
    /// Bytes of every object but the last (at most [`MAX_SYNTHETIC_OBJECT_BYTES`]).
    pub object_bytes: u32,
    /// Bytes of all objects together.
    #[serde(with = "dec_u64")]
    pub total_bytes: u64,
    /// The objects' digests, in order.
    pub objects: Vec<Digest>,
}

impl SyntheticPayloads {
    /// The length object `index` must have, or `None` if the record is inconsistent
    /// (zero sizes, too large objects, or a count that does not cover `total_bytes`).
    pub fn object_len(&self, index: usize) -> Option<u64> {
        let object_bytes = u64::from(self.object_bytes);
        if object_bytes == 0 || object_bytes > MAX_SYNTHETIC_OBJECT_BYTES || self.total_bytes == 0 {
            return None;
        }
        let count = self.total_bytes.div_ceil(object_bytes);
        if count != self.objects.len() as u64 || index as u64 >= count {
            return None;
        }
        let start = object_bytes.checked_mul(index as u64)?;
        Some(object_bytes.min(self.total_bytes - start))
    }
}

/// How a generation came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CommitKind {
    /// A publish of a trained state.
    Publish,
    /// An offline reshard of an earlier generation onto another worker count.
    Reshard,
}

/// An immutable commit record, installed as `commits/<generation:020>.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRecord {
    /// Always [`COMMIT_SCHEMA`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`].
    pub version: u32,
    /// The generation this record commits.
    #[serde(with = "dec_u64")]
    pub generation: u64,
    /// Publish or reshard.
    pub kind: CommitKind,
    /// For a reshard: the generation it was derived from.
    #[serde(with = "dec_u64_opt")]
    pub source_generation: Option<u64>,
    /// Address of the generation's manifest.
    pub manifest: Digest,
    /// Copies of manifest fields, bound: recovery checks they agree.
    pub workers: u32,
    /// The manifest's step (bound copy).
    #[serde(with = "dec_u64")]
    pub step: u64,
    /// The manifest's logical-state root (bound copy).
    pub logical_state_root: Digest,
}

/// `refs/LATEST`: a hint naming a generation and the digest of its commit record bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatestRecord {
    /// Always [`LATEST_SCHEMA`].
    pub schema: String,
    /// Always [`SCHEMA_VERSION`].
    pub version: u32,
    /// The generation named.
    #[serde(with = "dec_u64")]
    pub generation: u64,
    /// SHA-256 of that generation's commit record bytes.
    pub commit: Digest,
}

crate::canonical_record!(
    ManifestRecord,
    MANIFEST_SCHEMA,
    SCHEMA_VERSION,
    MAX_MANIFEST_BYTES
);
crate::canonical_record!(
    CommitRecord,
    COMMIT_SCHEMA,
    SCHEMA_VERSION,
    MAX_COMMIT_BYTES
);
crate::canonical_record!(
    LatestRecord,
    LATEST_SCHEMA,
    SCHEMA_VERSION,
    MAX_LATEST_BYTES
);

/// Canonical (RFC 8785) bytes of a record.
pub fn encode<R: CanonicalRecord>(record: &R) -> Result<Vec<u8>, StoreError> {
    canonical::encode(record).map_err(|error| StoreError::Encode {
        schema: R::SCHEMA,
        message: error.to_string(),
    })
}

/// Decodes a record with `crate::core::canonical` (cap, schema id, version, closed schema,
/// canonical form, in that order); `path` only names the source in errors.
pub fn decode<R: CanonicalRecord>(path: &Path, bytes: &[u8]) -> Result<R, StoreError> {
    let path = path.to_owned();
    canonical::decode(bytes).map_err(|error| match error {
        CanonicalError::TooLarge { cap, .. } => StoreError::TooLarge { path, cap },
        CanonicalError::Undecodable { schema, message } => StoreError::Undecodable {
            path,
            schema,
            message,
        },
        CanonicalError::WrongSchema { expected, found } => StoreError::WrongSchema {
            path,
            expected,
            found,
        },
        CanonicalError::UnsupportedVersion {
            expected, found, ..
        } => StoreError::UnsupportedVersion {
            path,
            expected,
            found,
        },
        CanonicalError::NotCanonical { .. } => StoreError::NotCanonical { path },
        CanonicalError::Encode { schema, message } => StoreError::Encode { schema, message },
    })
}

/// `objects/ab/cdef…` for a digest, relative to the store root.
pub fn object_rel_path(digest: &Digest) -> String {
    let hex = digest.to_hex();
    format!("objects/{}/{}", &hex[..2], &hex[2..])
}

/// `commits/<generation:020>.json`, relative to the store root.
pub fn commit_rel_path(generation: u64) -> String {
    format!("commits/{generation:020}.json")
}

/// The highest generation a store may hold. One below `u64::MAX`, so that "the highest
/// generation named plus one" is always representable: a name above it (such as
/// `18446744073709551615.json`) is not a commit record name but clutter, which recovery
/// lists as ignored and writers never count (RFC 0001 §2).
pub const MAX_GENERATION: u64 = u64::MAX - 1;

/// The generation that 20 decimal digits name, if they name one in `0..=MAX_GENERATION`.
pub fn parse_generation_digits(digits: &str) -> Option<u64> {
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits
        .parse()
        .ok()
        .filter(|generation| *generation <= MAX_GENERATION)
}

/// The generation after `highest` (0 when there is none), or `None` past
/// [`MAX_GENERATION`].
pub fn generation_after(highest: Option<u64>) -> Option<u64> {
    match highest {
        None => Some(0),
        Some(highest) => highest
            .checked_add(1)
            .filter(|next| *next <= MAX_GENERATION),
    }
}

/// The generation a `commits/` file name denotes, if it is a commit record name.
pub fn parse_commit_name(name: &str) -> Option<u64> {
    parse_generation_digits(name.strip_suffix(".json")?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn latest() -> LatestRecord {
        LatestRecord {
            schema: LATEST_SCHEMA.into(),
            version: SCHEMA_VERSION,
            generation: u64::MAX,
            commit: Digest::of(b"x"),
        }
    }

    #[test]
    fn round_trip_is_byte_exact() {
        let bytes = encode(&latest()).expect("encode");
        let back: LatestRecord = decode(Path::new("t"), &bytes).expect("decode");
        assert_eq!(back, latest());
        assert_eq!(encode(&back).expect("encode"), bytes);
    }

    #[test]
    fn rejects_non_canonical_unknown_and_foreign() {
        let bytes = encode(&latest()).expect("encode");
        let mut spaced = b" ".to_vec();
        spaced.extend_from_slice(&bytes);
        assert!(matches!(
            decode::<LatestRecord>(Path::new("t"), &spaced),
            Err(StoreError::NotCanonical { .. })
        ));
        let text = String::from_utf8(bytes.clone()).expect("utf8");
        let extra = text.replacen('{', "{\"aaa\":1,", 1);
        assert!(matches!(
            decode::<LatestRecord>(Path::new("t"), extra.as_bytes()),
            Err(StoreError::Undecodable { .. })
        ));
        assert!(matches!(
            decode::<CommitRecord>(Path::new("t"), &bytes),
            Err(StoreError::WrongSchema { .. })
        ));
        let v2 = text.replace("\"version\":1", "\"version\":2");
        assert!(matches!(
            decode::<LatestRecord>(Path::new("t"), v2.as_bytes()),
            Err(StoreError::UnsupportedVersion { ref found, .. }) if found == "2"
        ));
        let padded = text.replace("\"generation\":\"", "\"generation\":\"0");
        assert!(decode::<LatestRecord>(Path::new("t"), padded.as_bytes()).is_err());
    }

    #[test]
    fn commit_names() {
        assert_eq!(parse_commit_name(&commit_rel_path(42)[8..]), Some(42));
        assert_eq!(parse_commit_name("42.json"), None);
        assert_eq!(parse_commit_name("0000000000000000004x.json"), None);
        assert_eq!(
            parse_commit_name(&commit_rel_path(MAX_GENERATION)[8..]),
            Some(MAX_GENERATION)
        );
        assert_eq!(parse_commit_name(&commit_rel_path(u64::MAX)[8..]), None);
        assert_eq!(parse_commit_name("99999999999999999999.json"), None);
    }

    #[test]
    fn the_generation_after_the_last_stays_in_range() {
        assert_eq!(generation_after(None), Some(0));
        assert_eq!(generation_after(Some(41)), Some(42));
        assert_eq!(
            generation_after(Some(MAX_GENERATION - 1)),
            Some(MAX_GENERATION)
        );
        assert_eq!(generation_after(Some(MAX_GENERATION)), None);
    }
}
