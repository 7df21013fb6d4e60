//! The contents of every inode at one crash point of a trace: current, durable (as last
//! fsynced) and the unsynced data operations between them, and the data variants a crash
//! may leave of one file.
use std::borrow::Cow;

use super::FileData;
use crate::lab::crash_model::trace::{InodeId, Trace, TraceOp};

/// Contents of every inode at one crash point.
#[derive(Clone, Debug, Default)]
pub(super) struct DataAt {
    current: Vec<Vec<u8>>,
    durable: Vec<Vec<u8>>,
    /// Data operations (trace indices) since the last fsync, per inode.
    unsynced: Vec<Vec<usize>>,
}

impl DataAt {
    pub(super) fn initial(trace: &Trace) -> Self {
        let mut current = vec![Vec::new(); trace.inode_count];
        for (inode, bytes) in trace.initial_contents.iter().enumerate() {
            current[inode] = bytes.clone();
        }
        DataAt {
            durable: current.clone(),
            current,
            unsynced: vec![Vec::new(); trace.inode_count],
        }
    }

    /// Whether `inode` has data operations since its last fsync (a crash may lose or tear
    /// them).
    pub(super) fn has_unsynced(&self, inode: InodeId) -> bool {
        !self.unsynced[inode].is_empty()
    }

    /// Applies operation `seq` of `trace`; whether it is a data operation or a
    /// durability call (one that may change what a crash leaves of some file's data).
    pub(super) fn apply(&mut self, trace: &Trace, seq: usize) -> bool {
        match &trace.ops[seq] {
            TraceOp::Write {
                inode,
                offset,
                len,
                data_at,
            } => {
                if let Some(bytes) = trace.write_bytes(*data_at, *len) {
                    write_at(&mut self.current[*inode], *offset, bytes);
                    self.unsynced[*inode].push(seq);
                }
            }
            TraceOp::Truncate { inode, len } => {
                resize(&mut self.current[*inode], *len);
                self.unsynced[*inode].push(seq);
            }
            TraceOp::Fsync {
                inode,
                entered_after,
            } => self.make_durable(trace, *inode, *entered_after),
            TraceOp::SyncAll { entered_after } => {
                for inode in 0..self.current.len() {
                    self.make_durable(trace, inode, *entered_after);
                }
            }
            _ => return false,
        }
        true
    }

    /// Makes the unsynced operations of `inode` completed before index `entered_after`
    /// durable; later ones (another thread's, completed while the call ran) stay unsynced.
    fn make_durable(&mut self, trace: &Trace, inode: InodeId, entered_after: usize) {
        let unsynced = std::mem::take(&mut self.unsynced[inode]);
        let (covered, later): (Vec<usize>, Vec<usize>) =
            unsynced.into_iter().partition(|&seq| seq < entered_after);
        if later.is_empty() {
            self.durable[inode] = self.current[inode].clone();
        } else {
            replay(trace, &mut self.durable[inode], &covered);
        }
        self.unsynced[inode] = later;
    }

    /// The bytes of `inode` under `data`.
    pub(super) fn bytes(&self, trace: &Trace, inode: InodeId, data: FileData) -> Cow<'_, [u8]> {
        let current = &self.current[inode];
        Cow::Owned(match data {
            FileData::Whole => return Cow::Borrowed(current),
            FileData::Lost => return Cow::Borrowed(&self.durable[inode]),
            FileData::Short(len) => return Cow::Borrowed(&current[..clamp(len, current.len())]),
            FileData::ZeroedFrom(from) => {
                let mut out = current.clone();
                let from = clamp(from, out.len());
                out[from..].fill(0);
                out
            }
            FileData::FirstWrites(count) => {
                let mut out = self.durable[inode].clone();
                let unsynced = &self.unsynced[inode];
                replay(trace, &mut out, &unsynced[..count.min(unsynced.len())]);
                out
            }
        })
    }

    /// The lowest offset an unsynced operation of `inode` wrote or cut at, if any: from
    /// there on the file may differ from its durable bytes after a crash, even where its
    /// current bytes equal them (a truncation and a rewrite of the same bytes).
    fn first_unsynced_offset(&self, trace: &Trace, inode: InodeId) -> Option<u64> {
        self.unsynced[inode]
            .iter()
            .filter_map(|&seq| match &trace.ops[seq] {
                TraceOp::Write { offset, .. } => Some(*offset),
                TraceOp::Truncate { len, .. } => Some(*len),
                _ => None,
            })
            .min()
    }

    /// The data variants of one volatile file, besides whole and lost.
    pub(super) fn torn_variants(
        &self,
        trace: &Trace,
        inode: InodeId,
        write_prefixes: usize,
    ) -> Vec<FileData> {
        let current = &self.current[inode];
        let len = current.len();
        let mut out = Vec::new();
        for boundary in [512usize, 4096] {
            if len > boundary {
                out.push(FileData::Short(((len - 1) / boundary * boundary) as u64));
            }
        }
        let durable = &self.durable[inode];
        let first_difference = current
            .iter()
            .zip(durable.iter())
            .position(|(a, b)| a != b)
            .unwrap_or(durable.len().min(len));
        let first_change = self
            .first_unsynced_offset(trace, inode)
            .map_or(first_difference, |offset| {
                first_difference.min(clamp(offset, len))
            });
        if first_change < len {
            out.push(FileData::ZeroedFrom((first_change / 4096 * 4096) as u64));
            if len > 4096 {
                out.push(FileData::ZeroedFrom(((len - 1) / 4096 * 4096) as u64));
            }
        }
        let unsynced = self.unsynced[inode].len();
        if unsynced > 1 {
            let steps = write_prefixes.min(unsynced - 1);
            for step in 1..=steps {
                out.push(FileData::FirstWrites(step * unsynced / (steps + 1)));
            }
        }
        out.retain(|variant| *variant != FileData::FirstWrites(0));
        out.dedup();
        out
    }
}

/// Applies the data operations `seqs` of `trace` to `bytes`, in order.
fn replay(trace: &Trace, bytes: &mut Vec<u8>, seqs: &[usize]) {
    for &seq in seqs {
        match &trace.ops[seq] {
            TraceOp::Write {
                offset,
                len,
                data_at,
                ..
            } => {
                if let Some(data) = trace.write_bytes(*data_at, *len) {
                    write_at(bytes, *offset, data);
                }
            }
            TraceOp::Truncate { len, .. } => resize(bytes, *len),
            _ => {}
        }
    }
}

fn clamp(value: u64, max: usize) -> usize {
    usize::try_from(value).map_or(max, |v| v.min(max))
}

fn resize(bytes: &mut Vec<u8>, len: u64) {
    // Lengths come from the recorder, which caps them; an impossible one empties the file.
    let len = usize::try_from(len).unwrap_or(0);
    bytes.resize(len, 0);
}

fn write_at(bytes: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let Ok(offset) = usize::try_from(offset) else {
        return;
    };
    let Some(end) = offset.checked_add(data.len()) else {
        return;
    };
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[offset..end].copy_from_slice(data);
}
