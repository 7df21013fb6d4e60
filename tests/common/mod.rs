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

/// The hash-locked Python torch environment's `torchrun` (`ci/python-torch` installs it
/// on demand, cached per user; the slow lane only).
pub fn torchrun() -> PathBuf {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("ci/python-torch");
    let output = std::process::Command::new(&script)
        .output()
        .expect("run ci/python-torch");
    assert!(
        output.status.success(),
        "ci/python-torch failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let path = PathBuf::from(stdout.lines().last().expect("a torchrun path").trim());
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

/// The Python interpreter of that environment.
pub fn python_torch() -> PathBuf {
    torchrun().with_file_name("python")
}

/// Trains seed `seed`'s genesis state for two in-process steps on the real training split
/// and publishes it as generation 0 of a new W4 store at `store`. Returns the trained state.
#[cfg(feature = "torch")]
pub fn publish_two_trained_steps(
    data: &shardlift::dataset::FashionMnist,
    seed: u64,
    store: &std::path::Path,
) -> shardlift::core::logical::LogicalState {
    use shardlift::core::logical::{Hyperparameters, LogicalState};
    use shardlift::core::sampling::SampleStream;
    use shardlift::core::step::SplitView;
    let mut state = LogicalState::genesis(Hyperparameters::with_seed(seed));
    let mut stream = SampleStream::new(seed, data.train.count as u32);
    for _ in 0..2 {
        shardlift::engine::in_process_step(&mut state, &mut stream, SplitView::from(&data.train))
            .expect("step");
    }
    let topology = shardlift::core::topology::Topology::new(4).expect("topology");
    shardlift::store::publish(
        store,
        &state,
        topology,
        &mut shardlift::store::barrier::NoHooks,
    )
    .expect("publish");
    state
}

/// The committed release evidence's commit-after-rename bundle (the one
/// `evidence/release-*` directory; needs no run).
pub fn committed_bundle() -> PathBuf {
    let evidence = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("evidence");
    let releases: Vec<PathBuf> = std::fs::read_dir(&evidence)
        .expect("evidence/")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("release-"))
        })
        .collect();
    assert_eq!(releases.len(), 1, "one committed release: {releases:?}");
    releases[0].join("bundles").join("commit-after-rename")
}
