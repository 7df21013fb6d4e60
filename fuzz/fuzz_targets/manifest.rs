#![no_main]
//! Manifest decoder and structural checks: must never panic; anything accepted re-encodes
//! to exactly the input bytes.
use libfuzzer_sys::fuzz_target;
use shardlift::store::codec::{decode, encode, ManifestRecord};
use shardlift::store::layout::check_manifest;

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz");
    if let Ok(manifest) = decode::<ManifestRecord>(path, data) {
        assert_eq!(encode(&manifest).ok().as_deref(), Some(data));
        let _ = check_manifest(path, &manifest);
    }
});
