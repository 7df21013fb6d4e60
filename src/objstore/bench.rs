//! `store bench --store s3://…`: a publish against plain PUTs of the same bytes through
//! the same client, measured in one run. The publish's requests run one after another, as
//! RFC 0001 §9.3 has the writer issue them; so do the plain PUTs.
use std::time::Instant;

use serde::Serialize;

use crate::core::logical::LogicalState;
use crate::core::progress::Progress;
use crate::core::topology::Topology;
use crate::objstore::error::ObjStoreError;
use crate::objstore::{ConditionalCreate, ObjStore};
use crate::store::barrier::NoHooks;
use crate::store::layout::{chunk_payloads, synthetic_object, synthetic_state};
use crate::store::protocol::{chunk_payload_bytes, SyntheticSpec};

/// Workers of the benched publish.
const BENCH_WORKERS: u32 = 4;

/// One throughput figure.
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    /// Bytes PUT.
    pub bytes: u64,
    /// Requests made.
    pub requests: u64,
    /// Wall time, in seconds.
    pub seconds: f64,
    /// Bytes per second, in millions (0 when no time passed).
    pub mb_per_s: f64,
}

impl Throughput {
    fn new(bytes: u64, requests: u64, seconds: f64) -> Self {
        Throughput {
            bytes,
            requests,
            seconds,
            mb_per_s: if seconds > 0.0 {
                bytes as f64 / seconds / 1e6
            } else {
                0.0
            },
        }
    }
}

/// What `store bench --store s3://…` measured.
#[derive(Clone, Debug, Serialize)]
pub struct S3BenchReport {
    /// The store's location.
    pub location: String,
    /// Chunk-payload bytes of the state published.
    pub state_bytes: u64,
    /// Bytes of each synthetic object but the last.
    pub object_bytes: u32,
    /// Objects of the state (chunk payloads and synthetic objects).
    pub objects: u64,
    /// The generation the publish committed.
    pub generation: u64,
    /// Whether the service honours conditional create (as probed when the store opened).
    pub conditional_create: ConditionalCreate,
    /// The publish: its PUTs of objects, manifest, commit record and LATEST.
    pub publish: Throughput,
    /// The same objects' bytes as plain PUTs.
    pub raw_put: Throughput,
    /// `publish.mb_per_s / raw_put.mb_per_s` (0 when the plain PUTs took no time).
    pub publish_over_raw_put: f64,
    /// Keys of raw copies still listed after the deletes and sweeps (empty when none
    /// was left behind; recovery ignores `bench-raw/` either way).
    pub raw_copies_left: Vec<String>,
}

/// Publishes one synthetic state of `state_bytes` chunk-payload bytes (objects of
/// `chunk_elements` × 4 bytes) to `store`, then PUTs the same objects' bytes again as
/// plain PUTs under `bench-raw/<run>/<index>` (both timings include making the bytes),
/// and deletes those copies afterwards, on failure too (best effort: the PUT's error is
/// the one reported). Progress goes to `progress`.
pub fn run(
    store: &ObjStore,
    state_bytes: u64,
    chunk_elements: u32,
    seed: u64,
    progress: &mut dyn Progress,
) -> Result<S3BenchReport, ObjStoreError> {
    let state = synthetic_state(seed, 1, chunk_elements);
    let spec = SyntheticSpec::scaling(&state, seed, state_bytes);
    let topology = Topology::new(BENCH_WORKERS).map_err(|e| ObjStoreError::Config {
        location: store.client().location().url(),
        message: e.to_string(),
    })?;
    let summary = store.publish_synthetic(&state, topology, spec, &mut NoHooks, progress)?;
    let publish = Throughput::new(
        summary.bytes_put,
        summary.objects_put + 3,
        summary.elapsed_ms as f64 / 1e3,
    );
    let objects = state.chunks().len() as u64 * 3 + spec.object_count();
    let (raw_put, raw_copies_left) = time_raw_puts(store, &state, &spec, objects, progress)?;
    let publish_over_raw_put = if raw_put.mb_per_s > 0.0 {
        publish.mb_per_s / raw_put.mb_per_s
    } else {
        0.0
    };
    Ok(S3BenchReport {
        location: store.client().location().url(),
        state_bytes: chunk_payload_bytes(&state) + spec.total_bytes,
        object_bytes: spec.object_bytes,
        objects,
        generation: summary.generation,
        conditional_create: store.conditional_create(),
        publish,
        raw_put,
        publish_over_raw_put,
        raw_copies_left,
    })
}

/// PUTs every object's bytes of `state` scaled by `spec` under a fresh `bench-raw/`
/// prefix (which recovery ignores), timed as the publish is, then deletes them.
fn time_raw_puts(
    store: &ObjStore,
    state: &LogicalState,
    spec: &SyntheticSpec,
    objects: u64,
    progress: &mut dyn Progress,
) -> Result<(Throughput, Vec<String>), ObjStoreError> {
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    progress.phase("raw PUT", Some(objects));
    let raw_prefix = format!("bench-raw/{run}");
    let (mut raw_bytes, mut raw_requests) = (0u64, 0u64);
    let raw_started = Instant::now();
    let outcome = {
        let mut put = |bytes: Vec<u8>| -> Result<(), ObjStoreError> {
            let len = bytes.len() as u64;
            let key = format!("{raw_prefix}/{raw_requests}");
            store.client().put(&key, bytes)?;
            raw_bytes += len;
            raw_requests += 1;
            progress.advance(raw_requests);
            Ok(())
        };
        let mut put_all = || -> Result<(), ObjStoreError> {
            for chunk in state.chunks() {
                for payload in chunk_payloads(chunk) {
                    put(payload)?;
                }
            }
            for index in 0..spec.object_count() {
                // An object is at most `object_bytes` (a u32) long.
                let len = spec.object_len(index) as usize;
                put(synthetic_object(spec.seed, index, len))?;
            }
            Ok(())
        };
        put_all()
    };
    let raw_seconds = raw_started.elapsed().as_secs_f64();
    // A PUT that failed may still have landed: its key is deleted too.
    let attempted = raw_requests + u64::from(outcome.is_err());
    progress.phase("deleting the raw copies", Some(attempted));
    let mut first_delete_error = None;
    for index in 0..attempted {
        if let Err(error) = store.client().delete(&format!("{raw_prefix}/{index}")) {
            first_delete_error.get_or_insert(error);
        }
        progress.advance(index + 1);
    }
    outcome?;
    if let Some(error) = first_delete_error {
        return Err(error);
    }
    let raw_copies_left = sweep_raw_copies(store, &raw_prefix)?;
    progress.finish();
    Ok((
        Throughput::new(raw_bytes, raw_requests, raw_seconds),
        raw_copies_left,
    ))
}

/// Sweeps rounds of the raw copies.
const SWEEP_ROUNDS: u32 = 5;
/// Wait before sweep round `n` (from 1), times `n`, in milliseconds.
const SWEEP_BACKOFF_MS: u64 = 200;

/// Lists `raw_prefix` and deletes whatever it still holds, for up to [`SWEEP_ROUNDS`]
/// rounds, and returns the keys still listed after the last one. Deleting every index
/// is not always enough: a PUT attempt the client gave up on and retried can still be
/// stored by the service after the retry's copy was deleted.
fn sweep_raw_copies(store: &ObjStore, raw_prefix: &str) -> Result<Vec<String>, ObjStoreError> {
    let mut left = Vec::new();
    for round in 0..=SWEEP_ROUNDS {
        if round > 0 {
            std::thread::sleep(std::time::Duration::from_millis(
                SWEEP_BACKOFF_MS * u64::from(round),
            ));
        }
        left = store.client().list(raw_prefix)?;
        if left.is_empty() || round == SWEEP_ROUNDS {
            break;
        }
        for key in &left {
            store.client().delete(key)?;
        }
    }
    Ok(left)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;
    use crate::objstore::{ObjClient, ObjStoreOptions, S3Location};

    fn in_memory_store() -> ObjStore {
        store_over(Arc::new(InMemory::new()))
    }

    /// A store over `backend`; two over one backend are two clients of one service.
    fn store_over(backend: Arc<InMemory>) -> ObjStore {
        let location = S3Location::parse("s3://bench/store").expect("location");
        let client =
            ObjClient::with_store(location, backend, ObjStoreOptions::default()).expect("client");
        ObjStore::with_client(client, true).expect("open")
    }

    /// Copies that keep landing through every sweep round (a service still storing
    /// retried PUTs) are reported as left, by key, and nothing else is.
    #[test]
    fn copies_still_landing_after_the_last_sweep_round_are_reported_left() {
        let backend = Arc::new(InMemory::new());
        let store = store_over(Arc::clone(&backend));
        store
            .client()
            .put("bench-raw/7/1", vec![1; 16])
            .expect("put");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let late_writer = {
            let stop = Arc::clone(&stop);
            let other_client = store_over(backend);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    other_client
                        .client()
                        .put("bench-raw/7/late", vec![2; 16])
                        .expect("late put");
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            })
        };
        let left = sweep_raw_copies(&store, "bench-raw/7").expect("sweep");
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        late_writer.join().expect("late writer");
        assert_eq!(left, vec!["bench-raw/7/late".to_owned()]);
    }

    /// A copy that lands after the bench deleted its index (a retried PUT stored late)
    /// is found by the listing and deleted; keys outside the run's prefix are untouched.
    #[test]
    fn the_sweep_deletes_a_late_raw_copy_and_nothing_outside_the_run() {
        let store = in_memory_store();
        store
            .client()
            .put("bench-raw/7/10", vec![1; 16])
            .expect("put");
        store
            .client()
            .put("bench-raw/7/3", vec![2; 16])
            .expect("put");
        store
            .client()
            .put("bench-raw/70/0", vec![3; 16])
            .expect("put");
        let left = sweep_raw_copies(&store, "bench-raw/7").expect("sweep");
        assert_eq!(left, Vec::<String>::new());
        assert_eq!(
            store.client().list("bench-raw/7").expect("list"),
            Vec::<String>::new()
        );
        assert_eq!(store.client().list("bench-raw/70").expect("list").len(), 1);
    }
}
