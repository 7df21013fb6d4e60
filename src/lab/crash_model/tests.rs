use super::*;

const OLD: &[u8] = b"old checkpoint";
const NEW: &[u8] = b"the new checkpoint, longer than the old one";

/// A starting image holding `ckpt` (inode 0) and a trace that writes `ckpt.tmp`
/// (inode 1), optionally fsyncs it, renames it over `ckpt` and fsyncs the directory.
fn replace_trace(fsync_file: bool) -> Trace {
    let mut trace = Trace {
        initial: BTreeMap::from([("ckpt".to_owned(), InitialEntry::File(0))]),
        initial_contents: vec![OLD.to_vec()],
        inode_count: 2,
        data: NEW.to_vec(),
        ..Trace::default()
    };
    trace.ops.push(TraceOp::Create {
        path: "ckpt.tmp".into(),
        inode: 1,
    });
    trace.ops.push(TraceOp::Write {
        inode: 1,
        offset: 0,
        len: NEW.len() as u64,
        data_at: 0,
    });
    if fsync_file {
        trace.ops.push(TraceOp::Fsync {
            inode: 1,
            entered_after: trace.ops.len(),
        });
    }
    trace.ops.push(TraceOp::Rename {
        from: "ckpt.tmp".into(),
        to: "ckpt".into(),
        noreplace: false,
    });
    trace.ops.push(TraceOp::FsyncDir {
        path: String::new(),
        entered_after: trace.ops.len(),
    });
    trace
}

fn ckpt_contents(trace: &Trace, states: &[CrashState]) -> Vec<Option<Vec<u8>>> {
    states
        .iter()
        .map(|state| {
            state_files(trace, state)
                .into_iter()
                .find(|(path, _)| path == "ckpt")
                .and_then(|(_, bytes)| bytes)
        })
        .collect()
}

#[test]
fn a_correct_replace_leaves_the_old_or_the_new_checkpoint_in_every_state() {
    let trace = replace_trace(true);
    let states = crash_states(&trace, ModelLimits::default(), &Unread::default())
        .unwrap()
        .states;
    let contents = ckpt_contents(&trace, &states);
    assert!(contents.iter().any(|c| c.as_deref() == Some(OLD)));
    assert!(contents.iter().any(|c| c.as_deref() == Some(NEW)));
    for content in contents {
        assert!(
            matches!(content.as_deref(), Some(OLD) | Some(NEW)),
            "{content:?}"
        );
    }
}

#[test]
fn a_replace_without_fsync_can_leave_an_empty_or_torn_checkpoint() {
    let trace = replace_trace(false);
    let states = crash_states(&trace, ModelLimits::default(), &Unread::default())
        .unwrap()
        .states;
    let contents = ckpt_contents(&trace, &states);
    assert!(
        contents.iter().any(|c| c.as_deref() == Some(&[][..])),
        "lost data"
    );
    assert!(
        contents.iter().any(|c| c
            .as_ref()
            .is_some_and(|c| c.len() == NEW.len() && c[..] != *NEW)),
        "zeroed data"
    );
}

#[test]
fn states_are_distinct_and_start_from_the_initial_image() {
    let trace = replace_trace(false);
    let states = crash_states(&trace, ModelLimits::default(), &Unread::default())
        .unwrap()
        .states;
    let digests: HashSet<Digest> = states.iter().map(|s| s.digest).collect();
    assert_eq!(digests.len(), states.len());
    assert_eq!(states[0].crash_point, 0);
    assert_eq!(ckpt_contents(&trace, &states[..1])[0].as_deref(), Some(OLD));
}

#[test]
fn unread_paths_do_not_multiply_states() {
    let mut trace = replace_trace(false);
    for op in &mut trace.ops {
        match op {
            TraceOp::Create { path, .. } => *path = "staging/ckpt.tmp".into(),
            TraceOp::Rename { from, .. } => *from = "staging/ckpt.tmp".into(),
            _ => {}
        }
    }
    trace.initial.insert("staging".into(), InitialEntry::Dir);
    let all = crash_states(&trace, ModelLimits::default(), &Unread::default())
        .unwrap()
        .states;
    let unread = Unread::new(&["staging/".to_owned()]);
    let fewer = crash_states(&trace, ModelLimits::default(), &unread)
        .unwrap()
        .states;
    assert!(fewer.len() < all.len(), "{} vs {}", fewer.len(), all.len());
    assert!(unread.covers("staging") && unread.covers("staging/x"));
    assert!(!unread.covers("staging2") && !unread.covers("stag"));
}

#[test]
fn an_inconsistent_trace_and_too_many_states_are_refused() {
    let mut trace = replace_trace(true);
    trace.ops.insert(
        0,
        TraceOp::Fsync {
            inode: 1,
            entered_after: 0,
        },
    );
    let error = crash_states(&trace, ModelLimits::default(), &Unread::default()).unwrap_err();
    assert!(matches!(error, ModelError::BadTrace(_)), "{error}");

    let trace = replace_trace(false);
    let limits = ModelLimits {
        max_distinct_states: 2,
        ..ModelLimits::default()
    };
    let error = crash_states(&trace, limits, &Unread::default()).unwrap_err();
    assert!(matches!(error, ModelError::TooManyStates { limit: 2 }));
}
/// The contents of `path` in each state (`None`: absent).
fn contents_of(trace: &Trace, states: &[CrashState], path: &str) -> Vec<Option<Vec<u8>>> {
    states
        .iter()
        .map(|state| {
            state_files(trace, state)
                .into_iter()
                .find(|(p, _)| p == path)
                .and_then(|(_, bytes)| bytes)
        })
        .collect()
}

#[test]
fn a_truncation_and_rewrite_of_the_same_bytes_without_fsync_can_leave_an_empty_file() {
    let rewrite = |fsync: bool| {
        let mut trace = Trace {
            initial: BTreeMap::from([("ckpt".to_owned(), InitialEntry::File(0))]),
            initial_contents: vec![OLD.to_vec()],
            inode_count: 1,
            data: OLD.to_vec(),
            ..Trace::default()
        };
        trace.ops.push(TraceOp::Truncate { inode: 0, len: 0 });
        trace.ops.push(TraceOp::Write {
            inode: 0,
            offset: 0,
            len: OLD.len() as u64,
            data_at: 0,
        });
        if fsync {
            trace.ops.push(TraceOp::Fsync {
                inode: 0,
                entered_after: 2,
            });
        }
        // A later entry: a state holding it was cut after the rewrite completed (a
        // crash between truncation and write empties the file anyway).
        trace.ops.push(TraceOp::Mkdir {
            path: "done".into(),
        });
        let states = crash_states(&trace, ModelLimits::default(), &Unread::default())
            .unwrap()
            .states;
        let after: Vec<CrashState> = states
            .into_iter()
            .filter(|s| s.entries.contains_key("done"))
            .collect();
        assert!(!after.is_empty());
        contents_of(&trace, &after, "ckpt")
    };
    let contents = rewrite(false);
    assert!(
        contents.iter().any(|c| c.as_deref() == Some(&[][..])),
        "{contents:?}"
    );
    assert!(
        contents
            .iter()
            .any(|c| c.as_deref() == Some(&[0u8; OLD.len()][..])),
        "zeroed from the rewrite's offset: {contents:?}"
    );
    // Once fsynced, the rewrite is durable: only the old bytes remain possible.
    let contents = rewrite(true);
    assert!(
        contents.iter().all(|c| c.as_deref() == Some(OLD)),
        "{contents:?}"
    );
}

/// `b` created and written by another thread while a directory fsync and then a file
/// fsync ran (each entered before it), then a marker created after both returned.
fn overlapping_trace(entered_before_overlap: bool) -> Trace {
    let mut trace = Trace {
        inode_count: 2,
        data: NEW.to_vec(),
        ..Trace::default()
    };
    // #0 create a, #1 create b (other thread), #2 fsync dir entered before #1,
    // #3 write b (other thread), #4 fsync b entered before #3, #5 create marker.
    let (dir_entry, file_entry) = if entered_before_overlap {
        (1, 3)
    } else {
        (2, 4)
    };
    trace.ops.push(TraceOp::Create {
        path: "a".into(),
        inode: 0,
    });
    trace.ops.push(TraceOp::Create {
        path: "b".into(),
        inode: 1,
    });
    trace.ops.push(TraceOp::FsyncDir {
        path: String::new(),
        entered_after: dir_entry,
    });
    trace.ops.push(TraceOp::Write {
        inode: 1,
        offset: 0,
        len: NEW.len() as u64,
        data_at: 0,
    });
    trace.ops.push(TraceOp::Fsync {
        inode: 1,
        entered_after: file_entry,
    });
    trace.ops.push(TraceOp::Mkdir {
        path: "marker".into(),
    });
    trace
}

#[test]
fn a_durability_call_covers_only_what_completed_before_its_entry() {
    let limits = ModelLimits::default();
    for overlapping in [true, false] {
        let trace = overlapping_trace(overlapping);
        let states = crash_states(&trace, limits, &Unread::default())
            .unwrap()
            .states;
        let after_both: Vec<&CrashState> = states.iter().filter(|s| s.crash_point >= 5).collect();
        let b_absent = after_both.iter().any(|s| !s.entries.contains_key("b"));
        let b_empty = contents_of(&trace, &states, "b")
            .iter()
            .zip(&states)
            .any(|(c, s)| s.crash_point >= 5 && c.as_deref() == Some(&[][..]));
        assert_eq!(b_absent, overlapping, "overlapping: {overlapping}");
        assert_eq!(b_empty, overlapping, "overlapping: {overlapping}");
        // `a` completed before the directory fsync's entry: durable either way.
        assert!(after_both.iter().all(|s| s.entries.contains_key("a")));
    }
    let trace = overlapping_trace(true);
    assert_eq!(
        trace.ops[2].describe_at(2),
        "fsync dir . (entered before #1: #1 to #1 completed while it ran and are not covered)"
    );
    assert_eq!(
        overlapping_trace(false).ops[2].describe_at(2),
        "fsync dir ."
    );
}

#[test]
fn a_durability_call_entered_after_later_operations_is_an_inconsistent_trace() {
    let mut trace = overlapping_trace(false);
    trace.ops[2] = TraceOp::SyncAll { entered_after: 3 };
    let error = crash_states(&trace, ModelLimits::default(), &Unread::default()).unwrap_err();
    assert!(matches!(error, ModelError::BadTrace(_)), "{error}");
}

/// `count` creates of new files, no directory fsync: `count` pending at the end.
fn creates(count: usize) -> Trace {
    let mut trace = Trace {
        inode_count: count,
        ..Trace::default()
    };
    for inode in 0..count {
        trace.ops.push(TraceOp::Create {
            path: format!("f{inode}"),
            inode,
        });
    }
    trace
}

#[test]
fn subset_coverage_counts_what_was_enumerated() {
    let limits = ModelLimits::default();
    let full = limits.subsets.all_subsets_up_to;
    // Up to the full-enumeration bound every subset is built: 2^0 + ... + 2^full.
    let all = crash_states(&creates(full), limits, &Unread::default()).unwrap();
    let expected = (1u64 << (full + 1)) - 1;
    assert_eq!(
        all.subsets,
        SubsetCoverage {
            enumerated: expected,
            total: Some(expected),
            crash_points: full as u64 + 1,
            max_pending: full as u64,
        }
    );
    assert!(!all.subsets.sampled());

    // Two more pending operations: the last two crash points are sampled.
    let some = crash_states(&creates(full + 2), limits, &Unread::default()).unwrap();
    let total = (1u64 << (full + 3)) - 1;
    assert_eq!(some.subsets.total, Some(total));
    assert!(some.subsets.sampled());
    assert!(some.subsets.enumerated > expected, "{:?}", some.subsets);
    assert!(some.subsets.enumerated < total, "{:?}", some.subsets);

    // 2^64 subsets at the last crash point: the total is beyond u64.
    let huge = crash_states(&creates(64), limits, &Unread::default()).unwrap();
    assert_eq!(huge.subsets.total, None);
    assert!(huge.subsets.sampled());
}

#[test]
fn full_enumeration_below_the_bound_is_not_sampling() {
    // With a bound of 1, two pending operations still have all four subsets built
    // (prefixes and omit-ones cover them): coverage says what was built.
    let limits = ModelLimits {
        subsets: EnumerationLimits {
            all_subsets_up_to: 1,
            samples: 0,
            ..EnumerationLimits::default()
        },
        ..ModelLimits::default()
    };
    let two = crash_states(&creates(2), limits, &Unread::default()).unwrap();
    assert_eq!(two.subsets.total, Some(7));
    assert_eq!(two.subsets.enumerated, 7);
    assert!(!two.subsets.sampled());
    let three = crash_states(&creates(3), limits, &Unread::default()).unwrap();
    assert_eq!(three.subsets.total, Some(15));
    assert!(three.subsets.sampled(), "{:?}", three.subsets);
}

/// A materialised state's tree has the state's own digest (the kernel mode relies
/// on it to hold a real file system's states against the model's).
#[test]
fn a_materialised_state_has_the_states_digest() {
    let trace = replace_trace(true);
    let states = crash_states(&trace, ModelLimits::default(), &Unread::default()).expect("states");
    for state in &states.states {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, bytes) in state_files(&trace, state) {
            let target = dir.path().join(&path);
            match bytes {
                None => std::fs::create_dir(&target).expect("dir"),
                Some(bytes) => std::fs::write(&target, bytes).expect("file"),
            }
        }
        let (digest, _) = tree_digest(dir.path(), &Unread::default()).expect("digest");
        assert_eq!(digest, state.digest);
    }
}

#[test]
fn the_coverage_says_what_was_enumerated() {
    let limits = EnumerationLimits {
        all_subsets_up_to: 3,
        samples: 4,
        seed: 1,
    };
    let mut coverage = SubsetCoverage {
        total: Some(0),
        ..SubsetCoverage::default()
    };
    let mut rng = SplitMix64::keyed(1, "test", 0);
    for pending in [0usize, 3, 5] {
        let tried = subsets(pending, limits, &mut rng);
        let distinct: HashSet<&Vec<usize>> = tried.iter().collect();
        assert_eq!(distinct.len(), tried.len(), "each subset once");
        coverage.add_crash_point(pending, tried.len());
    }
    assert_eq!(coverage.crash_points, 3);
    assert_eq!(coverage.max_pending, 5);
    assert!(coverage.sampled());
    assert_eq!(coverage.total, Some(1 + 8 + 32));
    // 1 + 8 exhaustive; at 5 pending: 6 prefixes, 5 all-but-one (one is a prefix),
    // and up to 4 samples.
    assert!(coverage.enumerated >= 1 + 8 + 10 && coverage.enumerated < 1 + 8 + 32);
    let mut huge = SubsetCoverage {
        total: Some(0),
        ..SubsetCoverage::default()
    };
    huge.add_crash_point(64, 1);
    huge.add_crash_point(3, 8);
    assert_eq!(huge.total, None, "2^64 does not fit");
}

#[test]
fn a_state_reached_again_is_held_to_the_latest_acknowledgement() {
    // The correct replace, then a second directory fsync that changes nothing: the
    // final state is reached at both ends, each after one more acknowledgement.
    let mut trace = replace_trace(true);
    let end = trace.ops.len();
    trace.ops.push(TraceOp::FsyncDir {
        path: String::new(),
        entered_after: end,
    });
    trace.acknowledged_at = vec![end, end + 1];
    let all = crash_states(&trace, ModelLimits::default(), &Unread::default()).unwrap();
    let new_only: Vec<&CrashState> = all
        .states
        .iter()
        .filter(|state| state_files(&trace, state) == vec![("ckpt".to_owned(), Some(NEW.to_vec()))])
        .collect();
    assert_eq!(new_only.len(), 1, "one state, however often it is reached");
    assert_eq!(new_only[0].acknowledged, 2);
    assert!(
        new_only[0].crash_point < end,
        "it keeps its first crash point"
    );
    // Reached again at the last two crash points at least: counted each time.
    assert!(all.built >= all.states.len() as u64 + 2, "{}", all.built);
}
