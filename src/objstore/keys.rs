//! Keys of the object-store layout, relative to the store prefix (RFC 0001 §9.2).
use crate::core::digest::Digest;
use crate::store::codec::parse_generation_digits;

/// The prefix of content-addressed objects.
pub const OBJECTS_PREFIX: &str = "objects";
/// The prefix of commit records.
pub const COMMITS_PREFIX: &str = "commits";
/// The prefix of generation claims (the conditional-create fence).
pub const CLAIMS_PREFIX: &str = "claims";
/// The LATEST hint.
pub const LATEST_KEY: &str = "refs/LATEST";

/// `objects/ab/cdef…`: the same content address as the local store's object paths.
pub fn object_key(digest: &Digest) -> String {
    crate::store::codec::object_rel_path(digest)
}

/// `commits/<generation:020>/<record digest>.json`.
pub fn commit_key(generation: u64, record_digest: &Digest) -> String {
    format!(
        "{}/{}.json",
        commit_prefix(generation),
        record_digest.to_hex()
    )
}

/// `commits/<generation:020>`: the prefix the records of `generation` are listed under.
pub fn commit_prefix(generation: u64) -> String {
    format!("{COMMITS_PREFIX}/{generation:020}")
}

/// `claims/<generation:020>`: the fence a writer creates conditionally before its commit
/// record, where the backend honours conditional create (RFC 0001 §9.8).
pub fn claim_key(generation: u64) -> String {
    format!("{CLAIMS_PREFIX}/{generation:020}")
}

/// The generation a key under `claims/` names, if it is a claim key (20 decimal digits).
pub fn parse_claim_key(key: &str) -> Option<u64> {
    parse_generation_digits(key.strip_prefix("claims/")?)
}

/// The generation and record digest a key under `commits/` names, if it is a commit
/// record key (20 decimal digits, `/`, 64 lower-case hex digits, `.json`).
pub fn parse_commit_key(key: &str) -> Option<(u64, Digest)> {
    let rest = key.strip_prefix("commits/")?;
    let (generation, name) = rest.split_once('/')?;
    let hex = name.strip_suffix(".json")?;
    let generation = parse_generation_digits(generation)?;
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    Some((generation, Digest::from_hex(hex).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_keys_round_trip_and_reject_others() {
        let digest = Digest::of(b"record");
        let key = commit_key(42, &digest);
        assert_eq!(parse_commit_key(&key), Some((42, digest)));
        assert_eq!(parse_commit_key("commits/00000000000000000042.json"), None);
        assert_eq!(parse_commit_key(&key.to_uppercase()), None);
        assert_eq!(parse_commit_key(&key.replace(".json", ".tmp")), None);
        assert_eq!(parse_commit_key(&format!("x{key}")), None);
    }
}
