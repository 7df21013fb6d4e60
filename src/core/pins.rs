//! Pinned versions: the one home of the facts the evidence records about the toolchain.
//! (The dataset's pins live in `dataset::pins`, the wheels' hashes in `ci/libtorch.lock`.)

/// The tch crate the engine is built with (`Cargo.toml` pins `=0.26.0`).
pub const TCH_VERSION: &str = "0.26.0";
/// The libtorch tch 0.26.0 requires, exactly.
pub const LIBTORCH_VERSION: &str = "2.13.0";
