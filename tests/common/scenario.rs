//! Shared by the invariant-suite tests: run one scenario clean and with its violation
//! injected, and require that the injection is caught by the named check.
use std::sync::OnceLock;

use shardlift::core::digest::Digest;
use shardlift::dataset::FashionMnist;
use shardlift::orchestrate::invariants::evidence::{derive, Verdict};
use shardlift::orchestrate::invariants::registry;
use shardlift::orchestrate::invariants::scenarios::{self, Context};

/// The real dataset, loaded once per test binary.
pub fn data() -> &'static FashionMnist {
    static DATA: OnceLock<FashionMnist> = OnceLock::new();
    DATA.get_or_init(|| {
        shardlift::dataset::ensure_and_load(&super::common::cache_directory(), None)
            .expect("dataset")
    })
}

/// The verdict and failed checks of scenario `id`, with or without its injected violation.
pub fn verdict(id: &str, inject: bool, seed: u64) -> (Verdict, Vec<String>) {
    let spec = registry::spec(id).expect("registered");
    let work = tempfile::tempdir().expect("tempdir");
    let ctx = Context::new(
        super::common::shardlift_exe(),
        work.path().join("w"),
        data(),
        seed,
    )
    .expect("context");
    let observation = scenarios::observe(spec, &ctx, inject).expect("observed");
    let result = derive(spec, &observation, Digest::of(b"unused"));
    (result.verdict, result.failed_checks)
}

/// Scenario `id` passes clean and fails on `named_check` when its violation is injected.
pub fn passes_and_detects(id: &str, named_check: &str, seed: u64) {
    let (clean, failed) = verdict(id, false, seed);
    assert_eq!(
        clean,
        Verdict::Pass,
        "{id} failed without injection: {failed:?}"
    );
    let (injected, failed) = verdict(id, true, seed);
    assert_eq!(injected, Verdict::Fail, "{id} missed its violation");
    assert!(
        failed.iter().any(|c| c == named_check),
        "{id}: expected {named_check} among the failed checks {failed:?}"
    );
}
