//! Corruption: damaged copies of a two-generation store, each recovered and checked.
use super::*;

/// The healthy store the corruption cases damage: generation 0 = A on 4 workers,
/// 1 = B on 4 workers, 2 = B resharded to 3 workers; LATEST names 2.
pub fn build_corruption_base(root: &Path, seed: u64) -> Result<(), LabError> {
    let (a, b) = matrix_states(seed);
    publish_with(&RealFs, root, &a, topology(4)?, &mut NoHooks)?;
    publish_with(&RealFs, root, &b, topology(4)?, &mut NoHooks)?;
    reshard_with(
        &RealFs,
        root,
        1,
        topology(3)?,
        ObjectCheck::Lengths,
        &mut NoHooks,
        &mut NoProgress,
    )?;
    Ok(())
}

/// Every corruption case for a healthy store.
pub fn corruption_cases(base: &Path) -> Result<Vec<Damage>, LabError> {
    let mut cases = per_file_damage(&list_files(base)?);
    let g2 = generation_expectation(base, 2)?;
    let g1 = generation_expectation(base, 1)?;
    let g0 = generation_expectation(base, 0)?;
    cases.extend(misdirected_writes(&g0, &g1, &g2));
    cases.extend(latest_rewrites(&g0)?);
    cases.extend(clutter());
    Ok(cases)
}

/// Every file bit-flipped in the middle, half-truncated and deleted; the first file of
/// each top-level kind also flipped at both ends and truncated to nothing.
pub(super) fn per_file_damage(files: &[String]) -> Vec<Damage> {
    let mut cases = Vec::new();
    let mut seen_kind = std::collections::BTreeSet::new();
    for file in files {
        cases.push(Damage::BitFlip {
            file: file.clone(),
            offset: FileOffset::Middle,
        });
        cases.push(Damage::Truncate {
            file: file.clone(),
            keep_per_mille: 500,
        });
        cases.push(Damage::Delete { file: file.clone() });
        let kind = file.split('/').next().unwrap_or("").to_owned();
        if seen_kind.insert(kind) {
            for offset in [FileOffset::First, FileOffset::Last] {
                cases.push(Damage::BitFlip {
                    file: file.clone(),
                    offset,
                });
            }
            cases.push(Damage::Truncate {
                file: file.clone(),
                keep_per_mille: 0,
            });
        }
    }
    cases
}

/// Misdirected writes: a chunk object, a manifest and a commit record overwritten with
/// another file's bytes.
pub(super) fn misdirected_writes(
    g0: &GenerationExpectation,
    g1: &GenerationExpectation,
    g2: &GenerationExpectation,
) -> [Damage; 4] {
    let misdirect = |file: &(String, Digest), source: &(String, Digest)| Damage::Misdirect {
        file: file.0.clone(),
        source: source.0.clone(),
    };
    [
        misdirect(&g2.files[2], &g2.files[3]),
        misdirect(&g2.files[1], &g1.files[1]),
        misdirect(&g2.files[0], &g1.files[0]),
        misdirect(&g1.files[4], &g0.files[4]),
    ]
}

/// LATEST rewritten: stale (generation 0), ahead (generation 7), and not a record.
pub(super) fn latest_rewrites(g0: &GenerationExpectation) -> Result<[Damage; 3], LabError> {
    let latest = |generation: u64, commit: Digest| {
        crate::store::codec::encode(&crate::store::codec::LatestRecord {
            schema: crate::store::codec::LATEST_SCHEMA.into(),
            version: crate::store::codec::SCHEMA_VERSION,
            generation,
            commit,
        })
    };
    let write = |bytes: Vec<u8>| Damage::Write {
        file: LATEST_REL_PATH.into(),
        bytes,
    };
    Ok([
        write(latest(0, g0.files[0].1)?),
        write(latest(7, g0.files[0].1)?),
        write(b"not a record".to_vec()),
    ])
}

/// Leftover temp files, unknown entries, and a directory where a commit record belongs.
pub(super) fn clutter() -> Vec<Damage> {
    let mut cases: Vec<Damage> = [
        ("staging/object-1-1.tmp", &b"partial"[..]),
        ("commits/00000000000000000003.json.tmp", b"{"),
        ("commits/README", b"unknown"),
        ("commits/00000000000000000009.json", b"garbage"),
        ("objects/zz/unknown", b"unknown"),
        ("objects/unknown", b"unknown"),
        ("unknown-at-root", b"unknown"),
        ("refs/LATEST.tmp", b"x"),
    ]
    .into_iter()
    .map(|(file, bytes)| Damage::Write {
        file: file.into(),
        bytes: bytes.to_vec(),
    })
    .collect();
    cases.push(Damage::Mkdir {
        dir: "commits/00000000000000000005.json".into(),
    });
    cases
}

/// Applies one damage to a copy of `base` and checks recovery (with `faults`, for the
/// recovery mutants).
pub fn corruption_case(
    base: &Path,
    damage: &Damage,
    expectations: &[GenerationExpectation],
    faults: RecoveryFaults,
) -> Result<Vec<Violation>, LabError> {
    let work = scratch_dir()?;
    let root = work.path().join("store");
    std::fs::create_dir(&root)?;
    copy_tree(base, &root)?;
    damage.apply(&root)?;
    let context = damage.describe();
    let mut violations = Vec::new();
    let roots: BTreeMap<u64, Digest> = expectations
        .iter()
        .map(|e| (e.generation, e.logical_state_root))
        .collect();
    let Some(report) = check_recovery_common(&root, &roots, &mut violations, &context, faults)
    else {
        return Ok(violations);
    };
    let intact = |e: &GenerationExpectation| {
        e.files.iter().all(|(path, digest)| {
            std::fs::read(root.join(path)).is_ok_and(|bytes| Digest::of(&bytes) == *digest)
        })
    };
    let expected = expectations
        .iter()
        .filter(|e| intact(e))
        .map(|e| e.generation)
        .max();
    let selected = report.selected.as_ref().map(|s| s.generation);
    if selected != expected {
        violations.push(Violation::at(
            Invariant::NewestIntactSelected,
            &context,
            format!("selected {selected:?}, expected {expected:?}"),
        ));
    }
    for e in expectations.iter().filter(|e| !intact(e)) {
        match crate::store::load_generation(&root, e.generation) {
            Ok(_) => violations.push(Violation::at(
                Invariant::DamagedGenerationNeverLoads,
                &context,
                format!("damaged generation {} loaded", e.generation),
            )),
            Err(error) if error.path().is_none() => violations.push(Violation::at(
                Invariant::LoadErrorNamesTheFile,
                &context,
                format!("error names no file: {error}"),
            )),
            Err(_) => {}
        }
    }
    Ok(violations)
}
