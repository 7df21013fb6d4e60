//! The power-loss model: record every file-system effect of a writer run, then rebuild
//! the states a power cut could leave (ALICE-style) and check recovery on each.
//!
//! Model (RFC 0001 §8, "Power loss"):
//! - a file's data is durable once the file is fsynced; before that a crash may leave it
//!   whole, empty, short (cut at a 512- or 4096-byte boundary) or zero-filled (its size
//!   persisted, all data or its last 4 KiB sector not);
//! - a create, mkdir, rename or remove is durable once the directory holding the new
//!   entry is fsynced; before that it may or may not have happened (any subset of the
//!   pending operations, applied in program order; a rename is atomic);
//! - an entry whose parent directory is absent is lost;
//! - the recorded directory itself is durable. The crash matrix records the store root's
//!   parent ([`RecordingFs::with_store_at`]), so the root's own entry is modelled: a
//!   writer that creates the root and never fsyncs its parent can lose the whole store.
//!
//! Torn data is modelled file by file: in the namespace where every pending operation
//! happened, each volatile file alone is short or zero-filled (the others whole), and
//! every volatile file is empty at once; elsewhere volatile files are whole or all
//! empty.
//!
//! Crash points: every operation boundary. Subsets of pending operations: all when there
//! are at most `EnumerationLimits::all_subsets_up_to` (10 for most scenarios, 4 for the
//! concurrent install, `matrix::CONCURRENT_LIMITS`, whose renames all stay pending until
//! its one directory-fsync step), else every prefix, every omit-one and seeded samples.
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::core::digest::{Digest, FramedHasher};
use crate::core::rng::SplitMix64;

use crate::durable::fs::{EntryKind, FileSystem, RealFs};
use crate::store::barrier::{Barrier, BarrierEvent, BarrierHook, HookStop};

/// Names and what they hold, before data variants are chosen.
type Namespace = BTreeMap<String, Node>;

/// A namespace and its volatile files (path, inode): what one expansion into data
/// variants depends on.
type Expansion = (Namespace, Vec<(String, usize)>);

/// The writer's scratch directory, which recovery never reads.
const STAGING_DIR: &str = "staging";

/// One recorded file-system effect (paths relative to the recorded directory, the store
/// root or its parent, `/`-separated).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A directory created.
    Mkdir {
        /// The directory.
        path: String,
    },
    /// A file created and written whole (one `write_new_file`).
    Create {
        /// The file.
        path: String,
        /// Its inode: an index into [`Recording::inodes`].
        inode: usize,
    },
    /// A file's data made durable.
    FsyncFile {
        /// The file's inode.
        inode: usize,
    },
    /// A directory's entries made durable.
    FsyncDir {
        /// The directory (`""` for the recorded directory).
        path: String,
    },
    /// A file renamed (with or without replacing the target).
    Rename {
        /// The old name.
        from: String,
        /// The new name.
        to: String,
        /// The renamed file's inode.
        inode: usize,
    },
    /// A file removed.
    Remove {
        /// The file.
        path: String,
    },
}

impl Op {
    /// The directory whose fsync makes this metadata operation durable.
    fn durable_in(&self) -> Option<&str> {
        match self {
            Op::Mkdir { path } | Op::Create { path, .. } | Op::Remove { path } => {
                Some(parent(path))
            }
            Op::Rename { to, .. } => Some(parent(to)),
            Op::FsyncFile { .. } | Op::FsyncDir { .. } => None,
        }
    }
}

/// The parent of a relative, `/`-separated path (`""` for a top-level name).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..i],
        None => "",
    }
}

/// What a name refers to while a run's operations are replayed: a directory, or a file
/// by its inode (an index into the recording's or the trace's file contents). The one
/// namespace node of both crash-state models (the store's and `crash-test`'s).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Node {
    Dir,
    File(usize),
}

#[derive(Default)]
struct Log {
    ops: Vec<Op>,
    names: HashMap<String, Node>,
    inodes: Vec<Vec<u8>>,
    marks: Vec<(Barrier, usize)>,
}

/// A recorded writer run.
#[derive(Clone, Debug)]
pub struct Recording {
    /// The image before the run (all durable).
    pub initial: BTreeMap<String, ImageEntry>,
    /// The operations, in the order issued.
    pub ops: Vec<Op>,
    /// File contents by inode (each file is written once, at create).
    pub inodes: Vec<Vec<u8>>,
    /// Each barrier event and how many operations had been issued when it was reached.
    pub marks: Vec<(Barrier, usize)>,
    /// How many of `ops` an earlier, killed writer issued before the run (its non-durable
    /// directories and files; see [`RecordingFs::with_non_durable_entries`]).
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

mod enumerate;
mod record;

pub(crate) use enumerate::subsets;
pub use enumerate::{CrashState, Enumeration, EnumerationLimits};
pub use record::{Image, ImageEntry, MarkingHooks, RecordingFs};

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// A store root holding `objects/ab/` and one 5 000-byte file in it.
    fn one_object() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        std::fs::create_dir_all(root.join("objects/ab")).expect("dirs");
        std::fs::write(root.join("objects/ab/cd"), vec![7u8; 5000]).expect("file");
        (dir, root)
    }

    /// The lengths `objects/ab/cd` has over every crash image of a run that did nothing
    /// (`None`: the name is absent).
    fn lengths_seen(recorder: RecordingFs) -> BTreeSet<Option<usize>> {
        let recording = recorder.finish();
        recording
            .crash_states(EnumerationLimits::default())
            .iter()
            .map(|state| match state.image.get("objects/ab/cd") {
                Some(ImageEntry::File {
                    len, zeroed_from, ..
                }) => Some(if zeroed_from.is_some() {
                    usize::MAX
                } else {
                    *len
                }),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_enumeration_says_what_it_applied() {
        let limits = EnumerationLimits {
            all_subsets_up_to: 3,
            samples: 4,
            seed: 1,
        };
        let mut e = Enumeration::default();
        let mut rng = SplitMix64::keyed(1, "test", 0);
        for pending in [0usize, 3, 5] {
            let tried = subsets(pending, limits, &mut rng);
            let distinct: HashSet<&Vec<usize>> = tried.iter().collect();
            assert_eq!(distinct.len(), tried.len(), "each subset once");
            e.add_crash_point(pending, tried.len(), limits);
        }
        assert_eq!(e.crash_points, 3);
        assert_eq!(e.max_pending, 5);
        assert!(e.sampled);
        assert_eq!(e.subsets_total, 1 + 8 + 32);
        // 1 + 8 exhaustive; at 5 pending: 6 prefixes, 5 all-but-one (one is a prefix),
        // and up to 4 samples.
        assert!(e.subsets_checked >= 1 + 8 + 10 && e.subsets_checked < e.subsets_total);
        let mut huge = Enumeration::default();
        huge.add_crash_point(64, 1, limits);
        huge.add_crash_point(3, 8, limits);
        assert_eq!(huge.subsets_total, u64::MAX, "saturates");
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
            lengths_seen(recorder),
            BTreeSet::from([None, Some(5000)]),
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
        let seen = lengths_seen(recorder);
        for expected in [None, Some(5000), Some(0), Some(4096), Some(usize::MAX)] {
            assert!(seen.contains(&expected), "{expected:?} not in {seen:?}");
        }
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
