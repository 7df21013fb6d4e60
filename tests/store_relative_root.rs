//! RFC 0001 §4 "Directories": the writer fsyncs the store root's parent every time, so the
//! root's own entry is durable — also when the root is a bare relative name (`--store
//! ckpt`, `--store ckpt/`), whose parent is the current directory. This binary holds one
//! test only, because it changes the process's current directory.
use std::path::Path;

use shardlift::core::topology::Topology;
use shardlift::durable::faulty::{FaultyFs, Operation};
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::publish_with;
use shardlift::store::{NoHooks, StoreError};

/// The first directory fsync a publish into `root` makes, observed by failing it.
fn first_directory_fsync(root: &Path) -> std::path::PathBuf {
    let error = publish_with(
        &FaultyFs::failing(Operation::FsyncDir, 0),
        root,
        &synthetic_state(3, 1, 2_000),
        Topology::new(4).expect("topology"),
        &mut NoHooks,
    )
    .expect_err("the first directory fsync fails");
    match error {
        StoreError::FsyncFailed { path, .. } => path,
        other => panic!("expected a failed fsync, got {other}"),
    }
}

#[test]
fn a_bare_relative_store_root_has_its_parent_the_current_directory_fsynced_every_time() {
    let scratch = tempfile::tempdir().expect("tempdir");
    std::env::set_current_dir(scratch.path()).expect("cd");
    for root in ["ckpt", "ckpt/"] {
        // On a new store, and again on the store the first publish created.
        for _ in 0..2 {
            assert_eq!(
                first_directory_fsync(Path::new(root)),
                Path::new("."),
                "{root}"
            );
        }
        std::fs::remove_dir_all("ckpt").expect("rm");
    }
    std::fs::create_dir("runs").expect("mkdir");
    assert_eq!(
        first_directory_fsync(Path::new("runs/ckpt")),
        Path::new("runs")
    );
}
