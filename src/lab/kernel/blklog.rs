//! The dm-log-writes log that QEMU's `blklogwrites` driver writes: every write, flush,
//! FUA and discard of the guest's disk, in completion order.
//!
//! Format (little-endian): sector 0 is `{u64 magic, u64 version 1, u64 nr_entries, u32
//! sectorsize}`; each entry is one sector `{u64 sector, u64 nr_sectors, u64 flags, u64
//! data_len}` followed by `nr_sectors` sectors of data. QEMU rewrites the header only on
//! flushes and now and then, so entries are read to the end of the file, not to
//! `nr_entries`. The whole log is bounded (`max_log_bytes`) and so is each entry.
use crate::lab::kernel::error::KernelError;

/// The log's magic number.
pub const MAGIC: u64 = 0x006a_7366_7773_6872;
/// Entry flag: a flush (sector 0, no data).
pub const FLAG_FLUSH: u64 = 1;
/// Entry flag: forced unit access (this write is durable when it completes).
pub const FLAG_FUA: u64 = 2;
/// Entry flag: a discard.
pub const FLAG_DISCARD: u64 = 4;
/// Entry flag: a mark (a name in the log, no data).
pub const FLAG_MARK: u64 = 8;

/// One logged request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    /// First sector it covers (in the log's sector size).
    pub sector: u64,
    /// Sectors it covers.
    pub sectors: u64,
    /// [`FLAG_FLUSH`], [`FLAG_FUA`], [`FLAG_DISCARD`], [`FLAG_MARK`].
    pub flags: u64,
    /// Where its data lies in the log file (`sectors × sector_size` bytes).
    pub data_at: u64,
}

impl LogEntry {
    /// A flush: everything completed before it is durable.
    pub fn is_flush(&self) -> bool {
        self.flags & FLAG_FLUSH != 0
    }

    /// A write of data (FUA or not).
    pub fn is_write(&self) -> bool {
        self.flags & (FLAG_FLUSH | FLAG_DISCARD | FLAG_MARK) == 0 && self.sectors > 0
    }

    /// A write that is durable when it completes.
    pub fn is_fua(&self) -> bool {
        self.is_write() && self.flags & FLAG_FUA != 0
    }
}

/// A parsed log: its sector size and entries.
#[derive(Clone, Debug)]
pub struct BlockLog {
    /// Bytes per sector.
    pub sector_size: u64,
    /// Every entry, in completion order.
    pub entries: Vec<LogEntry>,
}

/// Parses the log bytes (the whole file, at most `max_log_bytes`).
pub fn parse(bytes: &[u8], max_log_bytes: u64) -> Result<BlockLog, KernelError> {
    if bytes.len() as u64 > max_log_bytes {
        return Err(KernelError::LogOverLimit {
            limit_bytes: max_log_bytes,
        });
    }
    let bad = |reason: String| KernelError::BadLog { reason };
    let u64_at = |at: usize| -> Option<u64> {
        let slice = bytes.get(at..at.checked_add(8)?)?;
        Some(u64::from_le_bytes(slice.try_into().ok()?))
    };
    let magic = u64_at(0).ok_or_else(|| bad("shorter than its header".to_owned()))?;
    if magic != MAGIC {
        return Err(bad(format!("magic {magic:#x}, not {MAGIC:#x}")));
    }
    let version = u64_at(8).unwrap_or(0);
    if version != 1 {
        return Err(bad(format!("version {version}, not 1")));
    }
    let sector_size = bytes
        .get(24..28)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .map(u64::from)
        .ok_or_else(|| bad("no sector size".to_owned()))?;
    if !(512..=65_536).contains(&sector_size) || !sector_size.is_power_of_two() {
        return Err(bad(format!("sector size {sector_size}")));
    }
    let step = sector_size as usize;
    let mut entries = Vec::new();
    let mut at = step;
    // A header sector of zeros past the last entry is QEMU's unwritten tail.
    while at + step <= bytes.len() {
        let field = |i: usize| u64_at(at + 8 * i).unwrap_or(0);
        let (sector, sectors, flags) = (field(0), field(1), field(2));
        if sector == 0 && sectors == 0 && flags == 0 {
            break;
        }
        let data_len = sectors
            .checked_mul(sector_size)
            .filter(|len| *len <= max_log_bytes)
            .ok_or_else(|| bad(format!("entry at byte {at} claims {sectors} sectors")))?;
        let data_at = (at + step) as u64;
        if data_at + data_len > bytes.len() as u64 {
            return Err(bad(format!(
                "entry at byte {at} runs past the end of the log"
            )));
        }
        entries.push(LogEntry {
            sector,
            sectors,
            flags,
            data_at,
        });
        at = (data_at + data_len) as usize;
    }
    Ok(BlockLog {
        sector_size,
        entries,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A log in the format QEMU writes: `(sector, flags, data)` entries.
    pub(crate) fn log_bytes(entries: &[(u64, u64, Vec<u8>)]) -> Vec<u8> {
        let mut out = vec![0u8; 512];
        out[..8].copy_from_slice(&MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&1u64.to_le_bytes());
        out[16..24].copy_from_slice(&(entries.len() as u64).to_le_bytes());
        out[24..28].copy_from_slice(&512u32.to_le_bytes());
        for (sector, flags, data) in entries {
            let mut head = vec![0u8; 512];
            head[..8].copy_from_slice(&sector.to_le_bytes());
            head[8..16].copy_from_slice(&(data.len() as u64 / 512).to_le_bytes());
            head[16..24].copy_from_slice(&flags.to_le_bytes());
            head[24..32].copy_from_slice(&(data.len() as u64).to_le_bytes());
            out.extend(head);
            out.extend(data);
        }
        out
    }

    #[test]
    fn entries_are_read_to_the_end_not_to_the_header_count() {
        let mut bytes = log_bytes(&[
            (8, 0, vec![1; 1024]),
            (0, FLAG_FLUSH, vec![]),
            (2, FLAG_FUA, vec![2; 512]),
        ]);
        bytes[16..24].copy_from_slice(&1u64.to_le_bytes()); // a stale header count
        let log = parse(&bytes, 1 << 20).expect("log");
        assert_eq!(log.entries.len(), 3);
        assert!(log.entries[0].is_write() && !log.entries[0].is_fua());
        assert!(log.entries[1].is_flush());
        assert!(log.entries[2].is_fua());
        assert_eq!(log.entries[2].data_at, 512 * 6);
    }

    /// Each way a log can be bad is its own reason; an oversized one is its own error.
    #[test]
    fn bad_logs_are_refused() {
        let good = log_bytes(&[(8, 0, vec![1; 512])]);
        let mut wrong_magic = good.clone();
        wrong_magic[0] ^= 1;
        let truncated = good[..good.len() - 100].to_vec();
        for (bytes, needle) in [
            (wrong_magic, "magic"),
            (truncated, "past the end"),
            (vec![0u8; 4], "shorter"),
        ] {
            let error = parse(&bytes, 1 << 20).expect_err(needle);
            assert_eq!(error.kind(), "bad-log");
            assert!(error.to_string().contains(needle), "{error}");
        }
        let error = parse(&good, 100).expect_err("over the limit");
        assert_eq!(error.kind(), "log-over-limit");
    }
}
