//! The disk's own figures and the bounds: one sequential write + fsync of the state and a
//! cold read of it, the state's objects written as plain files, and SHA-256 in memory.
use std::io::{Read, Write};
use std::path::Path;
use std::time::Instant;

use super::error::{io, CheckpointBenchError};
use crate::core::digest::Digest;

/// Bytes per `write` call of the sequential write (the kernel takes large writes whole).
const WRITE_BLOCK_BYTES: usize = 64 << 20;

/// Writes `bytes` into a new file `path` with sequential writes, fsyncs it and its
/// directory; returns the seconds.
pub fn write_fsync(path: &Path, bytes: &[u8]) -> Result<f64, CheckpointBenchError> {
    let context = || format!("writing {}", path.display());
    let started = Instant::now();
    let mut file = std::fs::File::create_new(path).map_err(io(context()))?;
    for block in bytes.chunks(WRITE_BLOCK_BYTES) {
        file.write_all(block).map_err(io(context()))?;
    }
    file.sync_all().map_err(io(context()))?;
    fsync_parent(path)?;
    Ok(started.elapsed().as_secs_f64())
}

fn fsync_parent(path: &Path) -> Result<(), CheckpointBenchError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(io(format!("fsyncing {}", parent.display())))
}

/// Evicts `path` (after [`evict_tree`]) and reads it whole into `buffer` (its length);
/// returns the seconds, and checks (untimed) that the bytes read are `expected`.
pub fn read_cold(
    path: &Path,
    buffer: &mut [u8],
    expected: &[u8],
) -> Result<f64, CheckpointBenchError> {
    evict_tree(path)?;
    let context = || format!("reading {}", path.display());
    let started = Instant::now();
    let mut file = std::fs::File::open(path).map_err(io(context()))?;
    file.read_exact(buffer).map_err(io(context()))?;
    let seconds = started.elapsed().as_secs_f64();
    if buffer != expected {
        return Err(CheckpointBenchError::NotVerified(format!(
            "{} read back other bytes than were written",
            path.display()
        )));
    }
    Ok(seconds)
}

/// Evicts every file under `path` (or `path` itself) from the page cache with
/// `posix_fadvise(POSIX_FADV_DONTNEED)`; the files were fsynced, so their pages are clean.
pub fn evict_tree(path: &Path) -> Result<(), CheckpointBenchError> {
    let context = || format!("evicting {}", path.display());
    let meta = std::fs::symlink_metadata(path).map_err(io(context()))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).map_err(io(context()))? {
            evict_tree(&entry.map_err(io(context()))?.path())?;
        }
    } else if meta.is_file() {
        let file = std::fs::File::open(path).map_err(io(context()))?;
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed)
            .map_err(|e| io(context())(e.into()))?;
    }
    Ok(())
}

/// Bytes of every file under `path` (or of `path` itself).
pub fn tree_bytes(path: &Path) -> Result<u64, CheckpointBenchError> {
    let context = || format!("sizing {}", path.display());
    let meta = std::fs::symlink_metadata(path).map_err(io(context()))?;
    if !meta.is_dir() {
        return Ok(meta.len());
    }
    let mut total = 0;
    for entry in std::fs::read_dir(path).map_err(io(context()))? {
        total += tree_bytes(&entry.map_err(io(context()))?.path())?;
    }
    Ok(total)
}

/// Removes `path` (a file or a tree) if it exists.
pub fn remove(path: &Path) -> Result<(), CheckpointBenchError> {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    removed.map_err(io(format!("removing {}", path.display())))
}

/// Flushes the file system under `dir` (and, on `discard` mounts, the trims of what was
/// removed before), so the next timed phase starts from a settled disk.
pub fn settle(dir: &Path) -> Result<(), CheckpointBenchError> {
    let file = std::fs::File::open(dir).map_err(io(format!("opening {}", dir.display())))?;
    rustix::fs::syncfs(&file).map_err(|e| io(format!("syncfs {}", dir.display()))(e.into()))
}

/// Writes `bytes` cut into objects of `object_bytes` as plain files in the new directory
/// `dir` from `threads` threads (each file: create, write, fsync), then fsyncs `dir`:
/// today's layout (one file per object) without the store's protocol. Returns the seconds.
pub fn objects_as_files_write(
    dir: &Path,
    bytes: &[u8],
    object_bytes: usize,
    threads: usize,
) -> Result<f64, CheckpointBenchError> {
    std::fs::create_dir(dir).map_err(io(format!("creating {}", dir.display())))?;
    let objects: Vec<&[u8]> = bytes.chunks(object_bytes.max(1)).collect();
    let started = Instant::now();
    each_on_threads(objects.len(), threads, &|index| {
        let path = dir.join(format!("{index:08}"));
        let context = || format!("writing {}", path.display());
        let mut file = std::fs::File::create_new(&path).map_err(io(context()))?;
        file.write_all(objects[index]).map_err(io(context()))?;
        file.sync_all().map_err(io(context()))
    })?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(format!("fsyncing {}", dir.display())))?;
    Ok(started.elapsed().as_secs_f64())
}

/// Runs `work(i)` for every `i in 0..count` on up to `threads` threads (the store's own
/// scheduler, [`crate::core::parallel::run_indexed`]); the first error, if any.
fn each_on_threads(
    count: usize,
    threads: usize,
    work: &(dyn Fn(usize) -> Result<(), CheckpointBenchError> + Sync),
) -> Result<(), CheckpointBenchError> {
    crate::core::parallel::run_indexed(count, threads, work, &mut |_| {})
        .into_iter()
        .try_for_each(|(_, result)| result)
}

/// Evicts the files of `dir` and reads every one whole on `threads` threads, without
/// hashing; returns the seconds.
pub fn objects_as_files_read_cold(dir: &Path, threads: usize) -> Result<f64, CheckpointBenchError> {
    evict_tree(dir)?;
    let context = || format!("reading {}", dir.display());
    let mut paths = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(context()))? {
        paths.push(entry.map_err(io(context()))?.path());
    }
    paths.sort();
    let started = Instant::now();
    each_on_threads(paths.len(), threads, &|index| {
        let mut buffer = Vec::new();
        std::fs::File::open(&paths[index])
            .and_then(|mut f| f.read_to_end(&mut buffer))
            .map_err(io(format!("reading {}", paths[index].display())))?;
        std::hint::black_box(&buffer);
        Ok(())
    })?;
    Ok(started.elapsed().as_secs_f64())
}

/// SHA-256 of `bytes` cut into objects of `object_bytes`, in memory, on `threads` threads
/// at once; each thread times its own hashing, and the busiest thread's seconds are
/// returned (what `threads` cores give now, other processes included).
pub fn sha256_seconds(bytes: &[u8], object_bytes: usize, threads: usize) -> f64 {
    let objects: Vec<&[u8]> = bytes.chunks(object_bytes.max(1)).collect();
    let threads = threads.clamp(1, objects.len().max(1));
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|first| {
                let objects = &objects;
                scope.spawn(move || {
                    let started = Instant::now();
                    for object in objects.iter().skip(first).step_by(threads) {
                        std::hint::black_box(Digest::of(object));
                    }
                    started.elapsed().as_secs_f64()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .fold(0.0_f64, f64::max)
    })
}
