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
}
