//! Crash states of a block log, under a volatile write cache: the disk at every flush
//! (and FUA) point — everything completed before it persisted; seeded states in which a
//! subset of the writes since the last flush persisted (the cache may write back in any
//! order); and torn states in which the writes since the last flush persisted in order up
//! to one that persisted only its first 4 KiB units ([`TEAR_UNIT_BYTES`]).
//!
//! A state is the starting image with a list of logged writes applied in log order. Marker
//! writes (at or past `marker_first_sector`) are never part of the file system: they say
//! how many acknowledgements were given before a cut, and a state follows every marker
//! logged before its cut (for a reordered or torn state, the cut is the end of its flush
//! epoch: the crash came after every write of the epoch was issued).
use std::collections::HashSet;

use serde::Serialize;

use crate::core::rng::SplitMix64;
use crate::lab::kernel::blklog::BlockLog;

/// The smallest piece a write tears into: the block size of every file system made here,
/// and the physical sector of current drives, which write it whole. Tearing inside it, as
/// a drive with 512-byte physical sectors could, tears ext4's superblock (its checksum
/// then fails, and a one-group file system has no backup to recover from): a property of
/// the file system on such a drive that no writer can guard against.
pub const TEAR_UNIT_BYTES: u64 = 4096;

/// Bounds of the state generation.
#[derive(Clone, Copy, Debug)]
pub struct StateLimits {
    /// Seeded reordered subsets drawn per flush epoch.
    pub reordered_per_epoch: usize,
    /// Reordered states in all.
    pub max_reordered: usize,
    /// Torn states per flush epoch.
    pub torn_per_epoch: usize,
    /// Torn states in all.
    pub max_torn: usize,
    /// The seed of the subsets and tear points.
    pub seed: u64,
}

impl Default for StateLimits {
    fn default() -> Self {
        StateLimits {
            reordered_per_epoch: 4,
            max_reordered: 200,
            torn_per_epoch: 1,
            max_torn: 50,
            seed: 0x5eed,
        }
    }
}

/// How a state was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateKind {
    /// Everything before a flush or FUA write (or the whole log) persisted.
    FlushPoint,
    /// A seeded subset of the writes since the last flush persisted.
    Reordered,
    /// The writes since the last flush persisted in order up to one that persisted only
    /// its first [`TEAR_UNIT_BYTES`] units.
    Torn,
}

/// One crash state of the disk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockState {
    /// How it was made.
    pub kind: StateKind,
    /// Log entries before the cut.
    pub cut: usize,
    /// Write entries applied whole, in log order.
    pub applied: Vec<usize>,
    /// A write entry applied in part: its index and how many of its first sectors.
    pub torn: Option<(usize, u64)>,
    /// Acknowledgement markers logged before the cut.
    pub acknowledged: usize,
}

/// Every state of `log` within `limits`; identical states (same writes, same
/// acknowledgements) are kept once.
pub fn block_states(
    log: &BlockLog,
    marker_first_sector: u64,
    limits: StateLimits,
) -> Vec<BlockState> {
    let view = LogView {
        log,
        marker_first_sector,
    };
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut push = |state: BlockState| {
        if seen.insert((state.applied.clone(), state.torn, state.acknowledged)) {
            out.push(state);
        }
    };
    // Cuts: before every flush, after every FUA write, and the end of the log.
    let mut cuts: Vec<usize> = Vec::new();
    for (i, entry) in log.entries.iter().enumerate() {
        if entry.is_flush() {
            cuts.push(i);
        } else if entry.is_fua() {
            cuts.push(i + 1);
        }
    }
    cuts.push(log.entries.len());
    for &cut in &cuts {
        push(BlockState {
            kind: StateKind::FlushPoint,
            cut,
            applied: view.fs_writes(0..cut),
            torn: None,
            acknowledged: view.markers_before(cut),
        });
    }
    let mut rng = SplitMix64::keyed(limits.seed, "shardlift/crash-test/kernel-states", 0);
    let (mut reordered, mut torn) = (0usize, 0usize);
    let mut epoch_start = 0usize;
    for &cut in &cuts {
        let epoch = Epoch {
            cut,
            durable: view.fs_writes(0..epoch_start),
            volatile: view.fs_writes(epoch_start..cut),
            acknowledged: view.markers_before(cut),
        };
        epoch_start = cut;
        let budget = limits.max_reordered.saturating_sub(reordered);
        for state in epoch.reordered(limits.reordered_per_epoch.min(budget), &mut rng) {
            reordered += 1;
            push(state);
        }
        let budget = limits.max_torn.saturating_sub(torn);
        for state in epoch.torn(log, limits.torn_per_epoch.min(budget), &mut rng) {
            torn += 1;
            push(state);
        }
    }
    out
}

/// The log with the marker area told apart from the file system.
struct LogView<'a> {
    log: &'a BlockLog,
    marker_first_sector: u64,
}

impl LogView<'_> {
    fn is_marker(&self, i: usize) -> bool {
        self.log.entries[i].is_write() && self.log.entries[i].sector >= self.marker_first_sector
    }

    fn markers_before(&self, cut: usize) -> usize {
        (0..cut).filter(|&i| self.is_marker(i)).count()
    }

    fn fs_writes(&self, range: std::ops::Range<usize>) -> Vec<usize> {
        range
            .filter(|&i| self.log.entries[i].is_write() && !self.is_marker(i))
            .collect()
    }
}

/// The writes between two cuts: everything before is durable, these are in the cache.
struct Epoch {
    cut: usize,
    durable: Vec<usize>,
    volatile: Vec<usize>,
    acknowledged: usize,
}

impl Epoch {
    /// `count` seeded subsets of the volatile writes (none when fewer than two).
    fn reordered(&self, count: usize, rng: &mut SplitMix64) -> Vec<BlockState> {
        if self.volatile.len() < 2 {
            return Vec::new();
        }
        (0..count)
            .map(|_| {
                let mut applied = self.durable.clone();
                applied.extend(
                    self.volatile
                        .iter()
                        .copied()
                        .filter(|_| rng.next_u64() & 1 == 1),
                );
                BlockState {
                    kind: StateKind::Reordered,
                    cut: self.cut,
                    applied,
                    torn: None,
                    acknowledged: self.acknowledged,
                }
            })
            .collect()
    }

    /// `count` tears: the volatile writes in order up to one of several tear units that
    /// kept only a seeded number of its first units.
    fn torn(&self, log: &BlockLog, count: usize, rng: &mut SplitMix64) -> Vec<BlockState> {
        let unit_sectors = (TEAR_UNIT_BYTES / log.sector_size).max(1);
        let candidates: Vec<usize> = (0..self.volatile.len())
            .filter(|&k| log.entries[self.volatile[k]].sectors >= 2 * unit_sectors)
            .collect();
        if candidates.is_empty() {
            return Vec::new();
        }
        (0..count)
            .map(|_| {
                let k = candidates[(rng.next_u64() % candidates.len() as u64) as usize];
                let entry = self.volatile[k];
                let units = log.entries[entry].sectors / unit_sectors;
                let kept = (1 + rng.next_u64() % (units - 1)) * unit_sectors;
                let mut applied = self.durable.clone();
                applied.extend_from_slice(&self.volatile[..k]);
                BlockState {
                    kind: StateKind::Torn,
                    cut: self.cut,
                    applied,
                    torn: Some((entry, kept)),
                    acknowledged: self.acknowledged,
                }
            })
            .collect()
    }
}

/// Writes `state` onto `image` (a copy of the starting image), from the log's bytes.
pub fn apply(
    log: &BlockLog,
    log_bytes: &[u8],
    state: &BlockState,
    image: &mut std::fs::File,
) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let write = |index: usize, sectors: u64| -> std::io::Result<()> {
        let entry = &log.entries[index];
        let start = usize::try_from(entry.data_at).map_err(std::io::Error::other)?;
        let len = usize::try_from(sectors * log.sector_size).map_err(std::io::Error::other)?;
        let data = log_bytes
            .get(start..start + len)
            .ok_or_else(|| std::io::Error::other("log entry out of range"))?;
        image.write_all_at(data, entry.sector * log.sector_size)
    };
    for &index in &state.applied {
        write(index, log.entries[index].sectors)?;
    }
    if let Some((index, kept)) = state.torn {
        write(index, kept)?;
    }
    Ok(())
}

/// Writes the image of `state` to `image` (new): `base` copied with its holes kept (an
/// xfs disk is mostly holes), then the state's writes applied.
pub fn write_image(
    base: &std::path::Path,
    log: &BlockLog,
    log_bytes: &[u8],
    state: &BlockState,
    image: &std::path::Path,
) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(image)?;
    copy_keeping_holes(&std::fs::File::open(base)?, &file)?;
    apply(log, log_bytes, state, &mut file)
}

/// Copies the image `from` to `to` (new), keeping its holes.
pub fn copy_image(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(to)?;
    copy_keeping_holes(&std::fs::File::open(from)?, &file)
}

/// Copies `from` into the empty `to` region by region of data (`SEEK_DATA`/`SEEK_HOLE`),
/// leaving holes as holes; `to` ends up as long as `from`.
fn copy_keeping_holes(from: &std::fs::File, to: &std::fs::File) -> std::io::Result<()> {
    use nix::unistd::{lseek, Whence};
    use std::os::unix::fs::FileExt;
    let len = from.metadata()?.len();
    to.set_len(len)?;
    let len = i64::try_from(len).map_err(std::io::Error::other)?;
    let mut buffer = vec![0u8; 1 << 20];
    let mut at = 0i64;
    while at < len {
        let data = match lseek(from, at, Whence::SeekData) {
            Ok(offset) => offset,
            // No data past `at`: the rest is a hole.
            Err(nix::errno::Errno::ENXIO) => break,
            Err(errno) => return Err(errno.into()),
        };
        let hole = lseek(from, data, Whence::SeekHole).map_err(std::io::Error::from)?;
        let mut offset = data;
        while offset < hole {
            let want = usize::try_from((hole - offset).min(buffer.len() as i64))
                .map_err(std::io::Error::other)?;
            let at_u64 = u64::try_from(offset).map_err(std::io::Error::other)?;
            let read = from.read_at(&mut buffer[..want], at_u64)?;
            if read == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            to.write_all_at(&buffer[..read], at_u64)?;
            offset += read as i64;
        }
        at = hole;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::kernel::blklog::{parse, tests::log_bytes, FLAG_FLUSH};

    const MARKER: u64 = 1_000;

    /// w0 w1 F w2 w3(2 sectors) m F w4: two flush epochs with writes, one marker.
    fn sample() -> BlockLog {
        let bytes = log_bytes(&[
            (10, 0, vec![1; 512]),
            (11, 0, vec![2; 512]),
            (0, FLAG_FLUSH, vec![]),
            (12, 0, vec![3; 512]),
            (24, 0, vec![4; 8192]),
            (MARKER, 0, vec![9; 512]),
            (0, FLAG_FLUSH, vec![]),
            (16, 0, vec![5; 512]),
        ]);
        parse(&bytes, 1 << 20).expect("log")
    }

    #[test]
    fn flush_points_hold_every_write_before_them_and_count_markers() {
        let states = block_states(&sample(), MARKER, StateLimits::default());
        let points: Vec<(usize, Vec<usize>, usize)> = states
            .iter()
            .filter(|s| s.kind == StateKind::FlushPoint)
            .map(|s| (s.cut, s.applied.clone(), s.acknowledged))
            .collect();
        assert_eq!(
            points,
            [
                (2, vec![0, 1], 0),
                (6, vec![0, 1, 3, 4], 1),
                (8, vec![0, 1, 3, 4, 7], 1)
            ]
        );
    }

    #[test]
    fn reordered_and_torn_states_keep_what_was_flushed_before_their_epoch() {
        let states = block_states(&sample(), MARKER, StateLimits::default());
        let reordered: Vec<&BlockState> = states
            .iter()
            .filter(|s| s.kind == StateKind::Reordered)
            .collect();
        assert!(!reordered.is_empty());
        for state in &reordered {
            let before_epoch: Vec<usize> =
                state.applied.iter().copied().filter(|&i| i < 2).collect();
            if state.cut > 2 {
                assert_eq!(before_epoch, [0, 1], "{state:?}");
            }
            assert!(!state.applied.contains(&5), "a marker is never applied");
        }
        let torn: Vec<&BlockState> = states
            .iter()
            .filter(|s| s.kind == StateKind::Torn)
            .collect();
        assert_eq!(torn.len(), 1, "one epoch has a write of two tear units");
        assert_eq!(torn[0].torn, Some((4, 8)), "it keeps its first 4 KiB");
        assert_eq!(torn[0].applied, [0, 1, 3]);
        assert_eq!(torn[0].acknowledged, 1);
    }

    #[test]
    fn writes_tear_only_between_4_kib_units() {
        let bytes = log_bytes(&[
            (0, 0, vec![1; 4096]),
            (64, 0, vec![2; 3 * 4096]),
            (0, FLAG_FLUSH, vec![]),
        ]);
        let log = parse(&bytes, 1 << 20).expect("log");
        let limits = StateLimits {
            torn_per_epoch: 20,
            ..StateLimits::default()
        };
        let torn: Vec<(usize, u64)> = block_states(&log, MARKER, limits)
            .iter()
            .filter_map(|s| s.torn)
            .collect();
        assert!(!torn.is_empty());
        for (entry, kept) in torn {
            assert_eq!(entry, 1, "a write of one 4 KiB unit never tears");
            assert!(kept == 8 || kept == 16, "kept {kept} sectors");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_states_and_the_caps_hold() {
        let limits = StateLimits {
            max_reordered: 1,
            max_torn: 0,
            ..StateLimits::default()
        };
        let a = block_states(&sample(), MARKER, limits);
        assert_eq!(a, block_states(&sample(), MARKER, limits));
        assert!(a.iter().filter(|s| s.kind == StateKind::Reordered).count() <= 1);
        assert_eq!(a.iter().filter(|s| s.kind == StateKind::Torn).count(), 0);
    }

    /// Whether every write flushed before the last acknowledgement marker the state
    /// follows is in it: what a check may rely on when `SHARDLIFT_ACKED` says so.
    fn markers_are_backed(log: &BlockLog, state: &BlockState) -> bool {
        let markers: Vec<usize> = (0..log.entries.len())
            .filter(|&i| log.entries[i].is_write() && log.entries[i].sector >= MARKER)
            .collect();
        let Some(&last) = state
            .acknowledged
            .checked_sub(1)
            .and_then(|k| markers.get(k))
        else {
            return true;
        };
        let flushed_before = (0..last).rev().find(|&i| log.entries[i].is_flush());
        flushed_before.is_none_or(|flush| {
            (0..flush)
                .filter(|&i| log.entries[i].is_write() && log.entries[i].sector < MARKER)
                .all(|i| state.applied.contains(&i))
        })
    }

    /// Every generated state that counts a marker holds what was flushed before it; a
    /// forged state that counts the marker but drops an earlier epoch's write does not.
    #[test]
    fn acknowledged_states_hold_what_was_flushed_before_the_marker() {
        let log = sample();
        let states = block_states(&log, MARKER, StateLimits::default());
        assert!(states.iter().any(|s| s.acknowledged > 0));
        for state in &states {
            assert!(markers_are_backed(&log, state), "{state:?}");
        }
        let forged = BlockState {
            kind: StateKind::Reordered,
            cut: 6,
            applied: vec![1, 3, 4],
            torn: None,
            acknowledged: 1,
        };
        assert!(!markers_are_backed(&log, &forged));
    }

    /// The copy is byte-identical to its source, and a hole stays a hole.
    #[test]
    fn an_image_copy_is_exact_and_keeps_holes() {
        use std::os::unix::fs::{FileExt, MetadataExt};
        let dir = tempfile::tempdir().expect("tempdir");
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        let file = std::fs::File::create(&from).expect("create");
        file.set_len(64 << 20).expect("size");
        file.write_all_at(b"head", 0).expect("head");
        file.write_all_at(&[7u8; 5000], 40 << 20).expect("middle");
        file.write_all_at(b"tail", (64 << 20) - 4).expect("tail");
        drop(file);
        let out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&to)
            .expect("to");
        copy_keeping_holes(&std::fs::File::open(&from).expect("open"), &out).expect("copy");
        drop(out);
        assert!(std::fs::read(&from).expect("from") == std::fs::read(&to).expect("to"));
        let allocated = std::fs::metadata(&to).expect("meta").blocks() * 512;
        assert!(allocated < 8 << 20, "holes were filled: {allocated} bytes");
    }
}
