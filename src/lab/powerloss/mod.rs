//! The store's power-loss replay: record every file-system effect of a writer run as a
//! [`Trace`], then check recovery on every state a power cut could leave of it
//! (ALICE-style), as [`crate::lab::crash_model`] enumerates them.
//!
//! One model serves the store and `crash-test` (RFC 0001 §8, "Power loss"); what this
//! module adds is the store's side of the recording:
//! - a writer's `write_new_file` is a create and one write of the whole contents, so its
//!   data may be whole, lost, short or zero-filled until the file is fsynced;
//! - the recorded directory itself is durable. The crash matrix records the store root's
//!   parent ([`RecordingFs::with_store_at`]), so the root's own entry is modelled: a
//!   writer that creates the root and never fsyncs its parent can lose the whole store;
//! - the store's `staging/` is never read by recovery, so it is the model's unread path:
//!   entry operations there happen in every state and its files stay whole;
//! - a killed writer's non-durable directories and files are operations issued before the
//!   run ([`Recording::pre_run_ops`]), so a power cut may undo them;
//! - each barrier the writer reaches is an acknowledgement placed in the trace: a state
//!   follows a barrier when some crash point after it reaches that state, and the checks
//!   that depend on a barrier (a generation must survive once its `commits/` fsync
//!   completed) hold every state to the latest barrier any of its crash points follows.
//!
//! Crash points: every operation boundary. Subsets of pending operations: all when there
//! are at most `EnumerationLimits::all_subsets_up_to` (10 for most scenarios, 4 for the
//! concurrent install, `matrix::CONCURRENT_LIMITS`, whose renames all stay pending until
//! its one directory-fsync step), else every prefix, every omit-one and seeded samples.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::core::digest::{Digest, FramedHasher};
use crate::durable::fs::{EntryKind, FileSystem, RealFs};
use crate::lab::crash_model::trace::{InitialEntry, InodeId, Trace, TraceOp};
use crate::lab::crash_model::Node;
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, HookStop};

/// The writer's scratch directory, which recovery never reads.
const STAGING_DIR: &str = "staging";

/// A recorded writer run.
#[derive(Clone, Debug)]
pub struct Recording {
    /// Every file-system effect, the killed writer's first
    /// ([`Self::pre_run_ops`]); each barrier reached is an acknowledgement in
    /// [`Trace::acknowledged_at`], in the order of [`Self::barriers`].
    pub trace: Trace,
    /// The barriers reached, in order: the `i`-th is the trace's `i`-th acknowledgement.
    pub barriers: Vec<Barrier>,
    /// How many of the trace's operations an earlier, killed writer issued before the run
    /// (its non-durable directories and files; see
    /// [`RecordingFs::with_non_durable_entries`]).
    pub pre_run_ops: usize,
    /// The store root's path relative to the recorded directory (`""`: the recorded
    /// directory is the store root; see [`RecordingFs::with_store_at`]).
    pub store: String,
}

/// How much of its files a killed writer had made durable (see
/// [`RecordingFs::with_non_durable_entries`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KilledWriterFiles {
    /// Each file's data was fsynced, its name not: RFC 0001 §4's writer killed between
    /// an object's rename (step 3) and its directory's fsync (step 4).
    DataSynced,
    /// Nothing was fsynced: a writer that skipped its fsyncs, or a copy of a store, whose
    /// files' data and names a power cut may both lose.
    NothingSynced,
}

/// Digest of a directory tree (paths, kinds, contents, permission bits), for checking
/// that recovery changes nothing.
pub fn tree_digest(dir: &Path) -> std::io::Result<Digest> {
    use std::os::unix::fs::PermissionsExt;
    let mut hasher = FramedHasher::new("shardlift/store/tree/v1");
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.map_err(std::io::Error::other)?;
        let rel = entry
            .path()
            .strip_prefix(dir)
            .map_err(std::io::Error::other)?;
        hasher.field(rel.as_os_str().as_encoded_bytes());
        let meta = entry.metadata().map_err(std::io::Error::other)?;
        hasher.u64(u64::from(meta.permissions().mode()));
        if entry.file_type().is_file() {
            hasher.field(&std::fs::read(entry.path())?);
        } else {
            hasher.field(b"<dir>");
        }
    }
    Ok(hasher.finish())
}

mod record;
mod states;

pub use record::{MarkingHooks, RecordingFs};
pub use states::Enumeration;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::crash_model::{EnumerationLimits, StateEntry};
    use std::collections::BTreeSet;

    /// A store root holding `objects/ab/` and one 5 000-byte file in it.
    fn one_object() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        std::fs::create_dir_all(root.join("objects/ab")).expect("dirs");
        std::fs::write(root.join("objects/ab/cd"), vec![7u8; 5000]).expect("file");
        (dir, root)
    }

    /// What `objects/ab/cd` holds over every crash state of a run that did nothing:
    /// `None` when the name is absent, else its length and whether any byte of it is
    /// zero (the file holds only 7s).
    fn contents_seen(recorder: RecordingFs) -> BTreeSet<Option<(usize, bool)>> {
        let recording = recorder.finish();
        let states = recording
            .crash_states(EnumerationLimits::default())
            .expect("states");
        states
            .states
            .iter()
            .map(|state| match state.entries.get("objects/ab/cd") {
                Some(StateEntry::File { .. }) => {
                    let files = recording.files(state);
                    let bytes = files
                        .iter()
                        .find(|(path, _)| path == "objects/ab/cd")
                        .and_then(|(_, bytes)| bytes.as_ref())
                        .expect("bytes");
                    Some((bytes.len(), bytes.contains(&0)))
                }
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_killed_writers_renamed_file_may_vanish_but_never_tears() {
        let (_dir, root) = one_object();
        let recorder = RecordingFs::with_non_durable_entries(
            &root,
            &[],
            &["objects/ab/cd"],
            KilledWriterFiles::DataSynced,
        )
        .expect("recorder");
        assert_eq!(
            contents_seen(recorder),
            BTreeSet::from([None, Some((5000, false))]),
            "absent or whole"
        );
    }

    #[test]
    fn a_killed_writers_unsynced_file_may_vanish_or_tear() {
        let (_dir, root) = one_object();
        let recorder = RecordingFs::with_non_durable_entries(
            &root,
            &[],
            &["objects/ab/cd"],
            KilledWriterFiles::NothingSynced,
        )
        .expect("recorder");
        let seen = contents_seen(recorder);
        for expected in [
            None,
            Some((5000, false)),
            Some((0, false)),
            Some((4096, false)),
            Some((5000, true)),
        ] {
            assert!(seen.contains(&expected), "{expected:?} not in {seen:?}");
        }
    }

    #[test]
    fn barriers_are_the_traces_acknowledgements() {
        let (dir, _root) = one_object();
        let recorder = RecordingFs::new(dir.path()).expect("recorder");
        recorder.mark(Barrier::ObjectAfterWrite);
        recorder
            .write_new_file(&dir.path().join("store/objects/ab/ef"), b"x", false)
            .expect("write");
        recorder.mark(Barrier::CommitAfterDirectoryFsync);
        recorder.mark(Barrier::CommitAfterDirectoryFsync);
        let recording = recorder.finish();
        // A create and the write of its bytes.
        assert_eq!(recording.trace.ops.len(), 2);
        assert_eq!(recording.trace.acknowledged_at, vec![0, 2, 2]);
        assert_eq!(
            recording.acknowledgements_at(Barrier::CommitAfterDirectoryFsync),
            Some(2),
            "the first one"
        );
        assert_eq!(
            recording.acknowledgements_at(Barrier::LatestAfterWrite),
            None
        );
        let marks: Vec<(Barrier, usize)> = recording.marks().collect();
        assert_eq!(marks[1], (Barrier::CommitAfterDirectoryFsync, 2));
    }

    #[test]
    fn a_listed_entry_that_is_not_in_the_image_is_refused() {
        let (_dir, root) = one_object();
        for (dirs, files) in [
            (&[][..], &["objects/ab/missing"][..]),
            (&[][..], &["objects/ab"][..]),
            (&["objects/ab/cd"][..], &[][..]),
            // A directory still holding a durable file.
            (&["objects/ab"][..], &[][..]),
        ] {
            let refused = RecordingFs::with_non_durable_entries(
                &root,
                dirs,
                files,
                KilledWriterFiles::NothingSynced,
            );
            assert!(refused.is_err(), "{dirs:?} {files:?} accepted");
        }
        // Listing the file too makes the directory one the model handles.
        RecordingFs::with_non_durable_entries(
            &root,
            &["objects/ab"],
            &["objects/ab/cd"],
            KilledWriterFiles::NothingSynced,
        )
        .expect("an empty-but-for-listed-files directory");
    }
}
