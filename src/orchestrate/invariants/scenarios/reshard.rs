//! The reshard scenarios: W4 → W3 changes placement and not state, a rewritten reshard
//! (new chunk objects under an honest-looking manifest) is caught, and a reshard round
//! trip returns the same bytes.
use super::*;

/// Scenario 8: W4 → W3 reshard, then the next step from the state loaded back from the
/// W3 generation. Everything is observed from the store on disk: which generation a
/// fresh recovery selects, the chunk objects the two manifests reference, the state and
/// topology loaded back. The injected violation is written to disk too: a reshard whose
/// chunk 2 (owned by rank 2 under W3) was rewritten as a new chunk object, committed
/// with a manifest and a commit record that name it and state the recomputed root, so
/// every digest in the store verifies and only the content comparisons can see it.
pub(super) fn reshard_w4_w3(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let store_dir = ctx.fresh_store("s08");
    let committed = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let resharded_generation = if inject {
        forge_rewritten_reshard(&store_dir, committed.committed.generation, w(3)?, 2)?
    } else {
        store::reshard(
            &store_dir,
            committed.committed.generation,
            w(3)?,
            ObjectCheck::Lengths,
        )?
        .committed
        .generation
    };
    let report = store::recover(&store_dir)?;
    let source = store::recovery::verify_generation_with(
        &RealFs,
        &store_dir,
        committed.committed.generation,
        false,
    )?;
    let target =
        store::recovery::verify_generation_with(&RealFs, &store_dir, resharded_generation, false)?;
    let (loaded, topology) = store::load_generation(&store_dir, resharded_generation)?;
    let (reference, _) = next_step(&ctx.state1, ctx.data)?;
    // A forged-but-consistent rewrite verifies: recovery selects it and load returns it.
    obs.check(
        "recovery_selected_generation",
        resharded_generation,
        report.selected.as_ref().map_or(u64::MAX, |s| s.generation),
    );
    obs.check("resharded_workers", 3, topology.workers());
    obs.check(
        "objects_written",
        0,
        new_chunk_objects(&source.manifest, &target.manifest),
    );
    obs.check(
        "chunk_objects_sha256",
        json_digest(&source.manifest.chunks)?,
        json_digest(&target.manifest.chunks)?,
    );
    obs.check(
        "resharded_root",
        ctx.state1.logical_state_root(),
        loaded.logical_state_root(),
    );
    // The continuation runs in this one process (the claim boundary: one or two training
    // processes); topology independence of the arithmetic is what makes that the W3 result.
    let (continued, _) = next_step(&loaded, ctx.data)?;
    obs.check(
        "w3_next_root",
        reference.logical_state_root(),
        continued.logical_state_root(),
    );
    obs.check(
        "w3_next_ledger_digest",
        reference.ledger_digest(),
        continued.ledger_digest(),
    );
    Ok(())
}

/// Chunk objects `after` references that `before` does not (observed from the two
/// manifests on disk, not from a writer's own count).
fn new_chunk_objects(
    before: &store::codec::ManifestRecord,
    after: &store::codec::ManifestRecord,
) -> u64 {
    let known: std::collections::BTreeSet<Digest> = before
        .chunks
        .iter()
        .flat_map(|c| c.digests().map(|(_, d)| d))
        .collect();
    after
        .chunks
        .iter()
        .flat_map(|c| c.digests().map(|(_, d)| d))
        .filter(|d| !known.contains(d))
        .count() as u64
}

/// Writes `bytes` as a content-addressed object of the store (read-only, durable).
fn write_object(store_dir: &Path, bytes: &[u8]) -> Result<Digest, ScenarioError> {
    let digest = Digest::of(bytes);
    let path = store_dir.join(store::codec::object_rel_path(&digest));
    if path.symlink_metadata().is_ok() {
        return Ok(digest);
    }
    let forge_error = |e: crate::durable::DurableError| {
        ScenarioError::Protocol(format!("forging a reshard: {e}"))
    };
    if let Some(parent) = path.parent() {
        crate::durable::ensure_dir_all(parent).map_err(forge_error)?;
    }
    crate::durable::write_file_with(
        &RealFs,
        &path,
        bytes,
        crate::durable::WriteOptions::IMMUTABLE,
    )
    .map_err(forge_error)?;
    Ok(digest)
}

/// The violation of scenario 8, on disk: the next generation, committed as a reshard of
/// `source_generation` onto `topology`, but with one bit of chunk `chunk`'s parameters
/// rewritten. The rewritten payload is a new object; the manifest names it and states
/// the root recomputed over the rewritten state; the commit record binds that manifest.
/// Returns the forged generation.
fn forge_rewritten_reshard(
    store_dir: &Path,
    source_generation: u64,
    topology: Topology,
    chunk: usize,
) -> Result<u64, ScenarioError> {
    let (mut state, _) = store::load_generation(store_dir, source_generation)?;
    let rewritten = state
        .chunk_slots_mut(chunk)
        .and_then(|c| c.parameters.first_mut())
        .ok_or_else(|| ScenarioError::Protocol(format!("the state has no chunk {chunk}")))?;
    flip_bit(rewritten);
    let entries = store::layout::chunk_entries(&state);
    let manifest = store::layout::manifest_for(&state, topology, entries);
    let generation = store::writer::next_generation(&RealFs, store_dir)?;
    for payload in store::layout::chunk_payloads(&state.chunks()[chunk]) {
        write_object(store_dir, &payload)?;
    }
    let manifest_digest = write_object(store_dir, &store::codec::encode(&manifest)?)?;
    let record = store::codec::CommitRecord {
        schema: store::codec::COMMIT_SCHEMA.to_owned(),
        version: store::codec::SCHEMA_VERSION,
        generation,
        kind: store::codec::CommitKind::Reshard,
        source_generation: Some(source_generation),
        manifest: manifest_digest,
        workers: manifest.workers,
        step: manifest.step,
        logical_state_root: manifest.logical_state_root,
    };
    crate::durable::write_file_with(
        &RealFs,
        &store_dir.join(store::codec::commit_rel_path(generation)),
        &store::codec::encode(&record)?,
        crate::durable::WriteOptions::IMMUTABLE,
    )
    .map_err(|e| ScenarioError::Protocol(format!("forging a reshard commit: {e}")))?;
    Ok(generation)
}

pub(super) fn json_digest<T: serde::Serialize>(value: &T) -> Result<Digest, ScenarioError> {
    serde_json::to_vec(value)
        .map(|bytes| Digest::of(&bytes))
        .map_err(|e| ScenarioError::Protocol(format!("encoding a manifest field: {e}")))
}

fn manifest_digests(store_dir: &Path, generation: u64) -> Result<(Digest, Digest), ScenarioError> {
    let verified = store::recovery::verify_generation_with(&RealFs, store_dir, generation, false)?;
    Ok((
        json_digest(&verified.manifest.chunks)?,
        json_digest(&verified.manifest.ownership)?,
    ))
}

/// Scenario 9: W4 → W3 → W4 returns the same chunk objects, ownership and root.
pub(super) fn reshard_round_trip(
    ctx: &Context<'_>,
    inject: bool,
    obs: &mut Observation,
) -> Result<(), ScenarioError> {
    let store_dir = ctx.fresh_store("s09");
    let original = store::publish(&store_dir, &ctx.state1, w(4)?, &mut NoHooks)?;
    let via_w3 = store::reshard(
        &store_dir,
        original.committed.generation,
        w(3)?,
        ObjectCheck::Lengths,
    )?;
    let back = if inject {
        let (mut state, _) = store::load_generation(&store_dir, via_w3.committed.generation)?;
        let last = state.chunks().len() - 1;
        if let Some(chunk) = state.chunk_slots_mut(last) {
            flip_bit(&mut chunk.exp_avg[0]);
        }
        store::publish(&store_dir, &state, w(4)?, &mut NoHooks)?
    } else {
        store::reshard(
            &store_dir,
            via_w3.committed.generation,
            w(4)?,
            ObjectCheck::Lengths,
        )?
    };
    let (chunks_before, ownership_before) =
        manifest_digests(&store_dir, original.committed.generation)?;
    let (chunks_after, ownership_after) = manifest_digests(&store_dir, back.committed.generation)?;
    let (loaded, _) = store::load_generation(&store_dir, back.committed.generation)?;
    obs.check(
        "objects_written",
        0,
        via_w3.objects_written + back.objects_written,
    );
    obs.check("chunk_objects_sha256", chunks_before, chunks_after);
    obs.check("ownership_sha256", ownership_before, ownership_after);
    obs.check(
        "round_trip_root",
        ctx.state1.logical_state_root(),
        loaded.logical_state_root(),
    );
    Ok(())
}
