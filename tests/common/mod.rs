//! Helpers shared by the integration tests.
#![allow(dead_code)]
use std::path::PathBuf;

/// The dataset cache the tests share: `$SHARDLIFT_CACHE_DIR` (ci/test sets it) or the
/// default cache. The real Fashion-MNIST bytes are acquired into it on first use.
pub fn cache_directory() -> PathBuf {
    shardlift::dataset::defaults::cache_directory()
}

/// The `shardlift` binary under test.
pub fn shardlift_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shardlift"))
}
