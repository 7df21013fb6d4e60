//! Where things live in a store directory (RFC 0001 §2).
//!
//! `objects/ab/cdef…` (content-addressed, read-only), `commits/<generation:020>.json`
//! (immutable commit records), `staging/` (temp files), `refs/LATEST` (a hint).

/// Store sub-directories, in creation order.
pub const LAYOUT_DIRS: [&str; 4] = ["objects", "commits", "staging", "refs"];
/// The LATEST hint, relative to the store root.
pub const LATEST_REL_PATH: &str = "refs/LATEST";
