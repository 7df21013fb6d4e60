//! The timed phases of the large bench: plain writes, recovery, SHA-256 on one core and
//! on every core, reshards phase by phase, object reads, and the fsync probe.
use super::*;

/// Writes and fsyncs every object as a plain file, then fsyncs their directory.
pub(super) fn time_plain_writes(
    plain: &Path,
    objects: &BenchObjects,
    progress: &mut dyn Progress,
) -> Result<f64, LabError> {
    let files = objects.count();
    progress.phase("store bench: plain write+fsync", Some(files));
    let mut seconds = 0.0;
    for i in 0..files {
        let bytes = objects.object(i);
        let started = Instant::now();
        let mut file = std::fs::File::create(plain.join(format!("{i:08}")))?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        seconds += started.elapsed().as_secs_f64();
        progress.advance(i + 1);
    }
    let started = Instant::now();
    std::fs::File::open(plain)?.sync_all()?;
    seconds += started.elapsed().as_secs_f64();
    progress.finish();
    Ok(seconds)
}

/// Writes and fsyncs every object as a plain file from `threads` threads at once (each
/// making its objects' bytes, as publish does), then fsyncs their directory: the disk at
/// the queue depth publish uses.
pub(super) fn time_plain_writes_concurrent(
    dir: &Path,
    objects: &BenchObjects,
    threads: usize,
    progress: &mut dyn Progress,
) -> Result<f64, LabError> {
    let files = objects.count();
    progress.phase(
        &format!("store bench: plain write+fsync, {threads} threads"),
        Some(files),
    );
    std::fs::create_dir(dir)?;
    let write_file = |i: usize| -> std::io::Result<()> {
        let bytes = objects.object(i as u64);
        let mut file = std::fs::File::create(dir.join(format!("{i:08}")))?;
        file.write_all(&bytes)?;
        file.sync_all()
    };
    let count = usize::try_from(files).map_err(|_| LabError::Model("too many files".into()))?;
    let started = Instant::now();
    let outcomes = crate::core::parallel::run_indexed(count, threads, &write_file, &mut |done| {
        progress.advance(done)
    });
    for (_, outcome) in outcomes {
        outcome?;
    }
    std::fs::File::open(dir)?.sync_all()?;
    let seconds = started.elapsed().as_secs_f64();
    progress.finish();
    Ok(seconds)
}

/// One recovery of the bench store, which must select exactly `generation`, unrejected.
pub(super) fn time_recovery(store: &Path, generation: u64) -> Result<f64, LabError> {
    let started = Instant::now();
    let report = crate::store::recover(store)?;
    let seconds = started.elapsed().as_secs_f64();
    if !report.rejected.is_empty() || report.valid_generations != vec![generation] {
        return Err(LabError::Model("the bench store did not verify".to_owned()));
    }
    Ok(seconds)
}

/// SHA-256 of every object on this thread, generation of the bytes not counted.
pub(super) fn time_single_core_sha(objects: &BenchObjects, progress: &mut dyn Progress) -> f64 {
    let files = objects.count();
    progress.phase("store bench: single-core SHA-256", Some(files));
    let mut seconds = 0.0;
    for i in 0..files {
        let bytes = objects.object(i);
        let started = Instant::now();
        std::hint::black_box(Digest::of(&bytes));
        seconds += started.elapsed().as_secs_f64();
        progress.advance(i + 1);
    }
    progress.finish();
    seconds
}

/// The same bytes hashed in memory on `cores_used` threads at once: the ceiling the
/// machine gives recovery now (other processes may hold cores). Thread `t` makes and
/// hashes objects `t, t + cores_used, ...` and times only its hashing; the figure is the
/// busiest thread's hashing time, which is the parallel hash's wall time with the making
/// of the bytes taken out. (Subtracting a separately timed run that only makes the bytes
/// once reported 2.45x two cores: the two runs' overlaps differ.)
pub(super) fn time_parallel_sha(
    objects: &BenchObjects,
    cores_used: usize,
) -> Result<f64, LabError> {
    let files = objects.count();
    let threads = cores_used.max(1) as u64;
    let busiest_s = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|first| {
                scope.spawn(move || {
                    let mut hashing_s = 0.0;
                    let mut index = first;
                    while index < files {
                        let bytes = objects.object(index);
                        let started = Instant::now();
                        std::hint::black_box(Digest::of(&bytes));
                        hashing_s += started.elapsed().as_secs_f64();
                        index += threads;
                    }
                    hashing_s
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .fold(0.0_f64, f64::max)
    });
    Ok(busiest_s.max(1e-9))
}

/// Offline reshards of `generation` to W3, W2 and W8, in that order, checking the source's
/// object lengths (the default); then W3 again with every object re-hashed.
pub(super) fn time_reshards(
    store: &Path,
    generation: u64,
    progress: &mut dyn Progress,
) -> Result<ReshardTimings, LabError> {
    progress.phase(
        "store bench: reshard W4 to W3, W2, W8, W3 re-hashing",
        Some(4),
    );
    let mut seconds = [0.0; 3];
    let mut w3_commit_s = 0.0;
    for (k, workers) in [3, 2, 8].into_iter().enumerate() {
        let mut clock = PhaseClock::default();
        let started = Instant::now();
        crate::store::reshard_reporting(
            store,
            generation,
            Topology::new(workers)?,
            ObjectCheck::Lengths,
            &mut clock,
        )?;
        seconds[k] = started.elapsed().as_secs_f64();
        if workers == 3 {
            w3_commit_s = clock.seconds_of(RESHARD_COMMIT_PHASE).ok_or_else(|| {
                LabError::Model("the reshard reported no commit phase".to_owned())
            })?;
        }
        progress.advance(k as u64 + 1);
    }
    let started = Instant::now();
    crate::store::reshard(store, generation, Topology::new(3)?, ObjectCheck::Hashed)?;
    let w3_hashed_s = started.elapsed().as_secs_f64();
    progress.advance(4);
    progress.finish();
    Ok(ReshardTimings {
        seconds,
        w3_commit_s,
        w3_hashed_s,
    })
}

/// The phase of a reshard that commits the new placement (`store::reshard_reporting`).
pub(super) const RESHARD_COMMIT_PHASE: &str = "committing the reshard";

/// Seconds of the three reshards, of the W3 reshard's commit phase alone, and of the W3
/// reshard that re-hashes the source.
pub(super) struct ReshardTimings {
    /// W4 → W3, W2, W8, whole (source check and commit).
    pub(super) seconds: [f64; 3],
    /// The W3 reshard's commit phase: manifest, commit record, LATEST, their fsyncs.
    pub(super) w3_commit_s: f64,
    /// W4 → W3 with [`ObjectCheck::Hashed`], whole.
    pub(super) w3_hashed_s: f64,
}

/// Times the phases an operation reports: each from its `phase` to its `finish`.
#[derive(Default)]
pub(super) struct PhaseClock {
    open: Option<(String, Instant)>,
    finished: Vec<(String, f64)>,
}

impl PhaseClock {
    /// Seconds of the finished phase named `name` (`None` if it never finished).
    fn seconds_of(&self, name: &str) -> Option<f64> {
        self.finished
            .iter()
            .find(|(phase, _)| phase == name)
            .map(|(_, seconds)| *seconds)
    }
}

impl Progress for PhaseClock {
    fn phase(&mut self, name: &str, _total: Option<u64>) {
        self.open = Some((name.to_owned(), Instant::now()));
    }

    fn finish(&mut self) {
        if let Some((name, started)) = self.open.take() {
            self.finished.push((name, started.elapsed().as_secs_f64()));
        }
    }
}

/// Reads every file under the store's `objects/` (listed first, untimed) whole, without
/// hashing, on `threads` threads: what recovery's opens, reads and closes cost on their
/// own, page cache as it is.
pub(super) fn time_object_reads(store: &Path, threads: usize) -> Result<f64, LabError> {
    let mut files = Vec::new();
    for fan_dir in std::fs::read_dir(store.join("objects"))? {
        let fan_dir = fan_dir?;
        if fan_dir.file_type()?.is_dir() {
            for object in std::fs::read_dir(fan_dir.path())? {
                files.push(object?.path());
            }
        }
    }
    let read = |index: usize| -> std::io::Result<usize> {
        let bytes = crate::durable::fs::FileSystem::read_file(
            &crate::store::RealFs,
            &files[index],
            crate::store::codec::MAX_MANIFEST_BYTES,
        )?;
        Ok(std::hint::black_box(bytes).len())
    };
    let started = Instant::now();
    for (_, outcome) in crate::core::parallel::run_indexed(files.len(), threads, &read, &mut |_| {})
    {
        outcome?;
    }
    Ok(started.elapsed().as_secs_f64())
}

/// Mean latencies of the steps a published object takes, over `samples` objects.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FsyncProbe {
    /// Objects sampled.
    pub samples: u64,
    /// Creating and writing one object-sized file, in milliseconds.
    pub write_ms: f64,
    /// Its fsync, in milliseconds.
    pub file_fsync_ms: f64,
    /// Renaming it into another directory, in milliseconds.
    pub rename_ms: f64,
    /// Fsyncing that directory after the rename, in milliseconds.
    pub directory_fsync_ms: f64,
}

/// Times write, file fsync, rename and directory fsync of `samples` files of `bytes`.
pub(super) fn probe_fsync(dir: &Path, bytes: usize, samples: u64) -> Result<FsyncProbe, LabError> {
    let staging = dir.join("staging");
    let objects = dir.join("objects");
    std::fs::create_dir_all(&staging)?;
    std::fs::create_dir_all(&objects)?;
    let payload = vec![0xa5u8; bytes];
    let mut total = [0.0f64; 4];
    for i in 0..samples {
        let temp = staging.join(format!("{i}"));
        let started = Instant::now();
        std::fs::File::create(&temp)?.write_all(&payload)?;
        let written = Instant::now();
        std::fs::File::open(&temp)?.sync_all()?;
        let synced = Instant::now();
        std::fs::rename(&temp, objects.join(format!("{i}")))?;
        let renamed = Instant::now();
        std::fs::File::open(&objects)?.sync_all()?;
        let done = Instant::now();
        total[0] += (written - started).as_secs_f64();
        total[1] += (synced - written).as_secs_f64();
        total[2] += (renamed - synced).as_secs_f64();
        total[3] += (done - renamed).as_secs_f64();
    }
    std::fs::remove_dir_all(dir)?;
    let ms = |t: f64| t * 1e3 / samples.max(1) as f64;
    Ok(FsyncProbe {
        samples,
        write_ms: ms(total[0]),
        file_fsync_ms: ms(total[1]),
        rename_ms: ms(total[2]),
        directory_fsync_ms: ms(total[3]),
    })
}

/// The bench's state in publish order: the model's chunk payloads, then the synthetic
/// objects that scale it to the asked size.
pub(super) struct BenchObjects {
    model: Vec<Vec<u8>>,
    pub(super) spec: SyntheticSpec,
}

impl BenchObjects {
    /// About `state_bytes` of chunk payloads around `state` (at least one synthetic object).
    pub(super) fn new(state: &LogicalState, state_bytes: u64) -> Self {
        let model: Vec<Vec<u8>> = state.chunks().iter().flat_map(chunk_payloads).collect();
        let model_bytes: u64 = model.iter().map(|p| p.len() as u64).sum();
        let object_bytes = state.hyperparameters().chunk_elements.saturating_mul(4);
        let spec = SyntheticSpec {
            seed: 1,
            object_bytes,
            total_bytes: state_bytes
                .saturating_sub(model_bytes)
                .max(u64::from(object_bytes)),
        };
        BenchObjects { model, spec }
    }

    /// Objects (and plain files) the state is cut into.
    pub(super) fn count(&self) -> u64 {
        self.model.len() as u64 + self.spec.object_count()
    }

    /// Chunk-payload bytes in all.
    pub(super) fn total_bytes(&self) -> u64 {
        self.model.iter().map(|p| p.len() as u64).sum::<u64>() + self.spec.total_bytes
    }

    /// Object `i`, in publish order.
    pub(super) fn object(&self, i: u64) -> Vec<u8> {
        match self.model.get(i as usize) {
            Some(payload) => payload.clone(),
            None => {
                let j = i - self.model.len() as u64;
                synthetic_object(self.spec.seed, j, self.spec.object_len(j) as usize)
            }
        }
    }
}
