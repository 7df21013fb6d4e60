//! Default locations, shared by every command.
use std::path::PathBuf;

/// The dataset cache: `$SHARDLIFT_CACHE_DIR`, else `$XDG_CACHE_HOME/shardlift/data`,
/// else `~/.cache/shardlift/data`.
pub fn cache_directory() -> PathBuf {
    if let Some(dir) = std::env::var_os("SHARDLIFT_CACHE_DIR") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("shardlift").join("data")
}
