//! RFC 0001 §4 "Directories": a writer must make every directory it relies on durable,
//! whoever created it. A writer killed between `mkdir` and the parent's fsync leaves a
//! directory that exists but can vanish at power loss; the next writer reuses it. These
//! tests start the power-loss model from exactly that image and show the committed
//! generation survives every crash state after the commit — and that the old writer,
//! which trusted existing directories, loses it.
use std::path::{Path, PathBuf};

use shardlift::core::topology::Topology;
use shardlift::lab::crash_model::EnumerationLimits;
use shardlift::lab::powerloss::RecordingFs;
use shardlift::lab::writer_mutants::{MutantFs, WriterFaults};
use shardlift::store::layout::synthetic_state;
use shardlift::store::writer::publish_with;
use shardlift::store::{self, Barrier, BarrierEvent, FnHook, NoHooks};

const CHUNK_ELEMENTS: u32 = 30_000;

fn topology() -> Topology {
    Topology::new(4).expect("topology")
}

/// Publishes the synthetic state of `step` into `root` with the correct writer.
fn publish_step(root: &Path, step: u64) {
    store::publish(
        root,
        &synthetic_state(7, step, CHUNK_ELEMENTS),
        topology(),
        &mut NoHooks,
    )
    .expect("publish");
}

/// Fan-out directories under `objects/` that publishing the step-2 state adds to a store
/// holding only the step-1 state.
fn fan_dirs_added_by_second_publish() -> Vec<String> {
    let scratch = tempfile::tempdir().expect("tempdir");
    let root = scratch.path().join("store");
    publish_step(&root, 1);
    let before = fan_dirs(&root);
    publish_step(&root, 2);
    fan_dirs(&root)
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect()
}

fn fan_dirs(root: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(root.join("objects"))
        .expect("list")
        .map(|e| {
            format!(
                "objects/{}",
                e.expect("entry").file_name().to_string_lossy()
            )
        })
        .collect();
    names.sort();
    names
}

/// Publishes the step-2 state over `root` (whose `non_durable` directories a killed writer
/// created) with `faults`, replays power loss at every operation boundary after the
/// commit became durable, and returns the crash points at which generation
/// `expected_generation` was not the one recovery selected.
fn lost_commits(
    root: &Path,
    non_durable: &[&str],
    faults: WriterFaults,
    expected_generation: u64,
) -> Vec<usize> {
    let fs = RecordingFs::with_non_durable_dirs(root, non_durable).expect("recorder");
    let summary = publish_with(
        &MutantFs::new(&fs, root, faults),
        root,
        &synthetic_state(7, 2, CHUNK_ELEMENTS),
        topology(),
        &mut FnHook(|event: &BarrierEvent| {
            fs.mark(event.barrier);
            Ok(())
        }),
    )
    .expect("publish");
    assert_eq!(summary.committed.generation, expected_generation);
    let recording = fs.finish();
    let limits = EnumerationLimits {
        all_subsets_up_to: 6,
        samples: 8,
        seed: 11,
    };
    let scratch = tempfile::tempdir().expect("tempdir");
    let mut lost = Vec::new();
    let mut checked = 0;
    let states = recording.crash_states(limits).expect("crash states").states;
    for (index, state) in states.iter().enumerate() {
        if !recording.follows(state, Barrier::CommitAfterDirectoryFsync) {
            continue;
        }
        let image_root: PathBuf = scratch.path().join(format!("image-{index}"));
        std::fs::create_dir(&image_root).expect("mkdir");
        recording
            .materialize(state, &image_root)
            .expect("materialize");
        let report = store::recover(&image_root).expect("recovery never fails here");
        checked += 1;
        if report.selected.map(|s| s.generation) != Some(expected_generation) {
            lost.push(state.crash_point);
        }
    }
    assert!(checked > 0, "no crash state after the commit was checked");
    lost
}

/// The correct writer, and the old one that trusted directories it found.
const WRITERS: [WriterFaults; 2] = [
    WriterFaults::NONE,
    WriterFaults {
        trust_existing_directories: true,
        ..WriterFaults::NONE
    },
];

/// The new writer loses nothing after its commit; the old writer loses the generation.
fn assert_only_the_old_writer_loses(faults: WriterFaults, lost: &[usize]) {
    if faults.trust_existing_directories {
        assert!(
            !lost.is_empty(),
            "the old writer must lose the committed generation"
        );
    } else {
        assert!(
            lost.is_empty(),
            "committed generation lost at crash points {lost:?}"
        );
    }
}

#[test]
fn reused_fan_out_directories_are_made_durable() {
    let added = fan_dirs_added_by_second_publish();
    assert!(
        !added.is_empty(),
        "the second publish must need new fan-out directories"
    );
    for faults in WRITERS {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        publish_step(&root, 1);
        // The killed writer got as far as mkdir of every fan-out directory.
        for fan in &added {
            std::fs::create_dir(root.join(fan)).expect("mkdir");
        }
        let pending: Vec<&str> = added.iter().map(String::as_str).collect();
        let lost = lost_commits(&root, &pending, faults, 1);
        assert_only_the_old_writer_loses(faults, &lost);
    }
}

#[test]
fn reused_store_layout_is_made_durable() {
    for faults in WRITERS {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        // The killed writer created the root's layout and nothing else.
        std::fs::create_dir(&root).expect("mkdir");
        for sub in store::writer::LAYOUT_DIRS {
            std::fs::create_dir(root.join(sub)).expect("mkdir");
        }
        let lost = lost_commits(&root, &store::writer::LAYOUT_DIRS, faults, 0);
        assert_only_the_old_writer_loses(faults, &lost);
    }
}

#[test]
fn recording_refuses_a_non_empty_or_missing_non_durable_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    publish_step(&root, 1);
    assert!(RecordingFs::with_non_durable_dirs(&root, &["commits"]).is_err());
    assert!(RecordingFs::with_non_durable_dirs(&root, &["no-such-dir"]).is_err());
}
