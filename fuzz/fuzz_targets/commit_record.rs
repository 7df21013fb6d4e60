#![no_main]
//! Commit-record (and LATEST) decoder: must never panic; anything accepted re-encodes to
//! exactly the input bytes.
use libfuzzer_sys::fuzz_target;
use shardlift::store::codec::{decode, encode, CommitRecord, LatestRecord};

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz");
    if let Ok(record) = decode::<CommitRecord>(path, data) {
        assert_eq!(encode(&record).ok().as_deref(), Some(data));
    }
    if let Ok(record) = decode::<LatestRecord>(path, data) {
        assert_eq!(encode(&record).ok().as_deref(), Some(data));
    }
});
