//! The store conformance suite (`tests/conformance`) over a real three-node Garage cluster
//! (lane `objectstore`; run with `ci/test objectstore`): the same test functions the fast
//! lane runs over the local store and the in-memory object store.
#[macro_use]
mod conformance;
mod objectstore_support;

use conformance::ObjectStoreBackend;

/// The object store at a fresh location in the test bucket (conditional create probed).
fn garage_backend() -> ObjectStoreBackend {
    ObjectStoreBackend {
        store: objectstore_support::open(&objectstore_support::fresh_url("conformance"), true),
    }
}

conformance_suite!(garage_backend());
