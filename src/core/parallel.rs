//! Ordered parallel map with bounded memory: `workers` threads compute items, the calling
//! thread consumes them strictly in index order. Used to hash (and generate) objects ahead
//! of a writer that must issue its file-system operations in a fixed order from one thread,
//! and to verify objects in parallel while reporting the first failure in key order.
//!
//! Item `i` is computed by worker `i mod workers`; each worker may run at most `depth`
//! items ahead of the consumer, so at most `workers × (depth + 1)` items are alive at once.
//! If the consumer fails, the workers stop at their next send and the error is returned.
use std::sync::mpsc::sync_channel;

/// How many threads to use for CPU-bound work: the available parallelism, at most `cap`
/// and at least 1.
pub fn worker_count(cap: usize) -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, cap.max(1))
}

/// Computes `produce(i)` for `i in 0..count` on `workers` threads (inline when `workers`
/// is 1 or `count` is at most 1) and feeds every result to `consume` in index order.
/// Returns the first error `consume` returns; nothing after it is consumed.
pub fn ordered_map<T, E, P, C>(
    count: usize,
    workers: usize,
    depth: usize,
    produce: P,
    mut consume: C,
) -> Result<(), E>
where
    T: Send,
    P: Fn(usize) -> T + Sync,
    C: FnMut(usize, T) -> Result<(), E>,
{
    let workers = workers.clamp(1, count.max(1));
    if workers == 1 {
        for i in 0..count {
            consume(i, produce(i))?;
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let mut receivers = Vec::with_capacity(workers);
        for w in 0..workers {
            let (tx, rx) = sync_channel::<T>(depth.max(1));
            receivers.push(rx);
            let produce = &produce;
            scope.spawn(move || {
                let mut i = w;
                while i < count {
                    if tx.send(produce(i)).is_err() {
                        return; // the consumer stopped
                    }
                    i += workers;
                }
            });
        }
        let mut result = Ok(());
        for i in 0..count {
            match receivers[i % workers].recv() {
                Ok(item) => {
                    if let Err(e) = consume(i, item) {
                        result = Err(e);
                        break;
                    }
                }
                // A worker panicked: the scope re-raises its panic when it joins.
                Err(_) => break,
            }
        }
        drop(receivers);
        result
    })
}

/// Held by each thread of [`run_indexed`]: tells the caller the thread ended, and stops
/// the others if it panicked.
struct Ended<'a> {
    stop: &'a std::sync::atomic::AtomicBool,
    ended: std::sync::mpsc::Sender<()>,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        // The receiver outlives every thread (it is read until all have ended).
        let _ = self.ended.send(());
    }
}

/// Stops [`run_indexed`]'s threads taking work when the calling thread unwinds
/// (`on_progress` panicked), so the scope's join does not wait for the whole run.
struct StopOnUnwind<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Runs `work(i)` for `i in 0..count` on up to `threads` threads, taking indices in
/// order from a shared counter, and calls `on_progress` with how many succeeded (a failed
/// index is not progress) at least every 100 ms meanwhile (and once at the end). A panic
/// in `on_progress` stops the threads as a failure would, then reaches the caller.
/// Returns as soon as every thread ended: each says so on a channel, nobody sleeps a
/// fixed time. Every index is taken by exactly
/// one thread, in increasing order, and every index taken runs to its end; after a
/// failure or a panic each thread takes at most one more index (it checks the stop flag,
/// then takes one), so the indices that ran are `0..=k` for some `k` and the
/// lowest-indexed failure is always among the results (a panic is resumed on the calling
/// thread). Returns the result of every index that ran, in index order (all of
/// `0..count` when none failed).
pub fn run_indexed<T: Send, E: Send>(
    count: usize,
    threads: usize,
    work: &(dyn Fn(usize) -> Result<T, E> + Sync),
    on_progress: &mut dyn FnMut(u64),
) -> Vec<(usize, Result<T, E>)> {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    const PROGRESS_POLL: std::time::Duration = std::time::Duration::from_millis(100);
    let next_index = AtomicUsize::new(0);
    let succeeded = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let threads = threads.clamp(1, count.max(1));
    let (ended_tx, ended_rx) = std::sync::mpsc::channel();
    let run_thread = |ended: Ended<'_>| {
        let _ended = ended;
        let mut results = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let index = next_index.fetch_add(1, Ordering::SeqCst);
            if index >= count {
                break;
            }
            let result = work(index);
            if result.is_err() {
                stop.store(true, Ordering::SeqCst);
            } else {
                succeeded.fetch_add(1, Ordering::SeqCst);
            }
            results.push((index, result));
        }
        results
    };
    let mut results: Vec<(usize, Result<T, E>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let ended = Ended {
                    stop: &stop,
                    ended: ended_tx.clone(),
                };
                scope.spawn(move || run_thread(ended))
            })
            .collect();
        let _stop_on_unwind = StopOnUnwind(&stop);
        let mut running = threads;
        while running > 0 {
            match ended_rx.recv_timeout(PROGRESS_POLL) {
                Ok(()) => running -= 1,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                // Never: this function holds a sender until the loop ends.
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
            on_progress(succeeded.load(Ordering::SeqCst));
        }
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    results.sort_by_key(|(index, _)| *index);
    results
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_arrive_in_order_and_errors_stop_early() {
        for workers in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            ordered_map(
                100,
                workers,
                2,
                |i| i * 3,
                |i, v| {
                    assert_eq!(v, i * 3);
                    seen.push(i);
                    Ok::<(), ()>(())
                },
            )
            .expect("no error");
            assert_eq!(seen, (0..100).collect::<Vec<_>>());
            let mut consumed = 0;
            let err = ordered_map(
                100,
                workers,
                1,
                |i| i,
                |i, _| {
                    consumed += 1;
                    if i == 40 {
                        Err(i)
                    } else {
                        Ok(())
                    }
                },
            );
            assert_eq!(err, Err(40));
            assert_eq!(consumed, 41);
        }
        ordered_map(0, 4, 1, |i| i, |_, _| Err::<(), ()>(())).expect("empty");
    }

    #[test]
    fn run_indexed_runs_every_index_once_and_stops_taking_work_after_a_failure() {
        let all = run_indexed(100, 8, &|i| Ok::<usize, ()>(i * 2), &mut |_| {});
        let expected: Vec<(usize, Result<usize, ()>)> = (0..100).map(|i| (i, Ok(i * 2))).collect();
        assert_eq!(all, expected);
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let failing = run_indexed(
            10_000,
            1,
            &|i| {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i == 3 {
                    Err(i)
                } else {
                    Ok(())
                }
            },
            &mut |_| {},
        );
        assert_eq!(failing.last(), Some(&(3, Err(3))));
        assert_eq!(
            failing.len(),
            4,
            "one thread takes no index after its failure"
        );
        assert_eq!(seen.load(std::sync::atomic::Ordering::SeqCst), 4);
    }

    #[test]
    fn run_indexed_on_several_threads_always_returns_the_lowest_failing_index() {
        for _ in 0..50 {
            let results = run_indexed(
                10_000,
                4,
                &|i| {
                    if i == 37 || i == 41 || i % 500 == 499 {
                        Err(i)
                    } else {
                        Ok(i)
                    }
                },
                &mut |_| {},
            );
            // The indices that ran are a prefix 0..=k, each once, in order.
            assert!(results
                .iter()
                .enumerate()
                .all(|(at, (index, _))| at == *index));
            let first_error = results.iter().find_map(|(_, r)| r.as_ref().err());
            assert_eq!(first_error, Some(&37));
            assert!(results.len() < 10_000, "the threads stopped taking work");
        }
    }

    #[test]
    fn run_indexed_stops_the_other_threads_when_one_panics_and_resumes_the_panic() {
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_indexed(
                100_000,
                2,
                &|i| {
                    taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i == 0 {
                        panic!("worker failed");
                    }
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    Ok::<(), ()>(())
                },
                &mut |_| {},
            )
        }));
        assert!(outcome.is_err(), "the panic reaches the caller");
        assert!(
            taken.load(std::sync::atomic::Ordering::SeqCst) < 100_000,
            "the other thread stopped taking work"
        );
    }

    #[test]
    fn run_indexed_reports_only_succeeded_indices_as_progress() {
        let mut reported = Vec::new();
        let results = run_indexed(
            10,
            1,
            &|i| if i == 5 { Err(i) } else { Ok(i) },
            &mut |done| reported.push(done),
        );
        assert_eq!(results.len(), 6, "indices 0..=5 ran");
        assert_eq!(reported.last(), Some(&5), "{reported:?}");
        assert!(reported.iter().all(|&done| done <= 5), "{reported:?}");
    }

    #[test]
    fn run_indexed_stops_its_threads_when_the_progress_callback_panics() {
        let taken = std::sync::atomic::AtomicUsize::new(0);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            run_indexed(
                100_000,
                2,
                &|_| {
                    taken.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_micros(50));
                    Ok::<(), ()>(())
                },
                &mut |_| panic!("progress display failed"),
            )
        }));
        assert!(outcome.is_err(), "the panic reaches the caller");
        assert!(
            taken.load(std::sync::atomic::Ordering::SeqCst) < 100_000,
            "the threads stopped taking work"
        );
    }
}
