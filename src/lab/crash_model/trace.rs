//! The recorded trace of an external writer: every file-system effect it had under its
//! scratch directory, in completion order, with paths relative to that directory
//! (`/`-separated; `""` is the directory itself) and file identity by inode.
//!
//! A durability call (`fsync`, `fdatasync`, `sync`, `syncfs`) completes after other
//! threads may have completed operations of their own: it sits in the trace where it
//! completed, and names with `entered_after` how many operations had completed when it
//! was entered. Only those can it make durable; the ones that completed while it ran
//! stay pending.
//!
//! Invariants (asserted by the recorder and checked by [`Trace::validate`]): every inode
//! an operation names is either in the initial image or created earlier in the trace;
//! write data is stored once, in `data`, and each `Write` names its slice exactly; a
//! durability call's `entered_after` is at most its own index.
use std::collections::BTreeMap;

use serde::Serialize;

pub use super::parent;
use crate::core::digest::Digest;

/// A model inode: an index into [`Trace::initial_contents`] for files of the initial
/// image, and new indices for files the writer created.
pub type InodeId = usize;

/// One recorded effect.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum TraceOp {
    /// `mkdir`.
    Mkdir {
        /// The path, relative to the scratch directory.
        path: String,
    },
    /// A new, empty regular file (`open` with `O_CREAT` of a name that did not exist).
    Create {
        /// The path, relative to the scratch directory.
        path: String,
        /// The new file's inode.
        inode: InodeId,
    },
    /// A hard link: a new name for an existing file.
    Link {
        /// The new name, relative to the scratch directory.
        path: String,
        /// The linked file's inode.
        inode: InodeId,
    },
    /// `len` bytes at `offset` (`write`, `pwrite64`, `writev`, `pwritev`, `pwritev2`).
    Write {
        /// The file's inode.
        inode: InodeId,
        /// Byte offset in the file.
        offset: u64,
        /// Bytes written.
        len: u64,
        /// Where the bytes lie in [`Trace::data`] (not serialised).
        #[serde(skip)]
        data_at: usize,
    },
    /// `truncate`, `ftruncate`, or `open` with `O_TRUNC` of an existing file (to 0).
    Truncate {
        /// The file's inode.
        inode: InodeId,
        /// The new length, in bytes.
        len: u64,
    },
    /// `fsync` or `fdatasync` of a regular file: its data and size as of the call's
    /// entry are durable.
    Fsync {
        /// The file's inode.
        inode: InodeId,
        /// Operations completed when the call was entered (see the module doc).
        entered_after: usize,
    },
    /// `fsync` of a directory: every entry operation in it completed before the call was
    /// entered is durable.
    FsyncDir {
        /// The directory, relative to the scratch directory (`""` for itself).
        path: String,
        /// Operations completed when the call was entered (see the module doc).
        entered_after: usize,
    },
    /// `rename`, `renameat`, `renameat2` (`RENAME_NOREPLACE` or no flag) of a file.
    Rename {
        /// The old name, relative to the scratch directory.
        from: String,
        /// The new name, relative to the scratch directory.
        to: String,
        /// Whether `RENAME_NOREPLACE` was given.
        noreplace: bool,
    },
    /// `unlink`, `unlinkat`.
    Unlink {
        /// The path, relative to the scratch directory.
        path: String,
    },
    /// `rmdir`, `unlinkat` with `AT_REMOVEDIR`.
    Rmdir {
        /// The path, relative to the scratch directory.
        path: String,
    },
    /// `sync` or `syncfs`: everything completed before the call was entered is durable.
    SyncAll {
        /// Operations completed when the call was entered (see the module doc).
        entered_after: usize,
    },
}

impl TraceOp {
    /// The directory whose fsync makes this entry operation durable (`None` for data
    /// operations and barriers).
    pub fn durable_in(&self) -> Option<&str> {
        match self {
            TraceOp::Mkdir { path }
            | TraceOp::Create { path, .. }
            | TraceOp::Link { path, .. }
            | TraceOp::Unlink { path }
            | TraceOp::Rmdir { path } => Some(parent(path)),
            TraceOp::Rename { to, .. } => Some(parent(to)),
            TraceOp::Write { .. }
            | TraceOp::Truncate { .. }
            | TraceOp::Fsync { .. }
            | TraceOp::FsyncDir { .. }
            | TraceOp::SyncAll { .. } => None,
        }
    }

    /// For a durability call (`fsync`, `fdatasync`, `sync`, `syncfs`): how many trace
    /// operations had completed when it was entered, the only ones it makes durable.
    pub fn entered_after(&self) -> Option<usize> {
        match self {
            TraceOp::Fsync { entered_after, .. }
            | TraceOp::FsyncDir { entered_after, .. }
            | TraceOp::SyncAll { entered_after } => Some(*entered_after),
            _ => None,
        }
    }

    /// [`Self::describe`] for the operation at index `seq`, naming the operations a
    /// durability call does not cover because they completed while it ran.
    pub fn describe_at(&self, seq: usize) -> String {
        match self.entered_after() {
            Some(entered_after) if entered_after < seq => format!(
                "{} (entered before #{entered_after}: #{entered_after} to #{} completed while it ran and are not covered)",
                self.describe(),
                seq - 1
            ),
            _ => self.describe(),
        }
    }

    /// A short, path-relative description (`rename a -> b`).
    pub fn describe(&self) -> String {
        match self {
            TraceOp::Mkdir { path } => format!("mkdir {path}"),
            TraceOp::Create { path, inode } => format!("create {path} (inode {inode})"),
            TraceOp::Link { path, inode } => format!("link {path} (inode {inode})"),
            TraceOp::Write {
                inode, offset, len, ..
            } => format!("write inode {inode} [{offset}, +{len})"),
            TraceOp::Truncate { inode, len } => format!("truncate inode {inode} to {len}"),
            TraceOp::Fsync { inode, .. } => format!("fsync inode {inode}"),
            TraceOp::FsyncDir { path, .. } => format!("fsync dir {}", display_dir(path)),
            TraceOp::Rename {
                from,
                to,
                noreplace,
            } => {
                let flag = if *noreplace { " (noreplace)" } else { "" };
                format!("rename {from} -> {to}{flag}")
            }
            TraceOp::Unlink { path } => format!("unlink {path}"),
            TraceOp::Rmdir { path } => format!("rmdir {path}"),
            TraceOp::SyncAll { .. } => "sync".to_owned(),
        }
    }
}

fn display_dir(path: &str) -> &str {
    if path.is_empty() {
        "."
    } else {
        path
    }
}

/// One entry of the initial (durable) image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitialEntry {
    /// A directory.
    Dir,
    /// A regular file, its contents at this index of [`Trace::initial_contents`].
    File(InodeId),
}

/// A recorded writer run.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// The scratch directory before the writer ran (all durable).
    pub initial: BTreeMap<String, InitialEntry>,
    /// Durable contents by inode of every file that exists before the trace: the initial
    /// image's files, and files whose data was durable before their names were (a killed
    /// writer's fsynced files, whose pending creates the trace begins with).
    pub initial_contents: Vec<Vec<u8>>,
    /// How many inodes the trace uses (initial ones first).
    pub inode_count: usize,
    /// The effects, in completion order.
    pub ops: Vec<TraceOp>,
    /// Every byte written, concatenated in operation order.
    pub data: Vec<u8>,
    /// The writer's writes to its stdout, in completion order: how many operations had
    /// completed when each one completed, and its length in bytes. Acknowledgement lines
    /// are placed in the trace by these (see [`crate::lab::external::ack`]).
    pub stdout_writes: Vec<StdoutWrite>,
    /// Where the acknowledgements fall: for each, the operations completed when it was
    /// given, in order (see [`crate::lab::external::ack`]; empty until they are placed).
    pub acknowledged_at: Vec<usize>,
}

/// One completed write to the writer's stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StdoutWrite {
    /// Trace operations completed when the write completed.
    pub after_operations: usize,
    /// Bytes written.
    pub len: u64,
}

impl Trace {
    /// The bytes of a `Write` operation.
    pub fn write_bytes(&self, data_at: usize, len: u64) -> Option<&[u8]> {
        let end = data_at.checked_add(usize::try_from(len).ok()?)?;
        self.data.get(data_at..end)
    }

    /// Checks the module invariants; the first broken one is returned.
    pub fn validate(&self) -> Result<(), String> {
        if self.initial_contents.len() > self.inode_count {
            return Err("more initial contents than inodes".to_owned());
        }
        let mut known = vec![false; self.inode_count];
        for entry in self.initial.values() {
            if let InitialEntry::File(inode) = entry {
                *known
                    .get_mut(*inode)
                    .ok_or_else(|| format!("initial inode {inode} out of range"))? = true;
            }
        }
        for (seq, op) in self.ops.iter().enumerate() {
            if op
                .entered_after()
                .is_some_and(|entered_after| entered_after > seq)
            {
                return Err(format!("op {seq}: entered after operations that follow it"));
            }
            let named = match op {
                TraceOp::Create { inode, .. } => {
                    let slot = known
                        .get_mut(*inode)
                        .ok_or_else(|| format!("op {seq}: inode {inode} out of range"))?;
                    *slot = true;
                    None
                }
                TraceOp::Link { inode, .. }
                | TraceOp::Truncate { inode, .. }
                | TraceOp::Fsync { inode, .. } => Some(*inode),
                TraceOp::Write {
                    inode,
                    data_at,
                    len,
                    ..
                } => {
                    if self.write_bytes(*data_at, *len).is_none() {
                        return Err(format!("op {seq}: write data out of range"));
                    }
                    Some(*inode)
                }
                _ => None,
            };
            if let Some(inode) = named {
                if !known.get(inode).copied().unwrap_or(false) {
                    return Err(format!("op {seq}: inode {inode} used before it exists"));
                }
            }
        }
        Ok(())
    }

    /// How many acknowledgements a crash after `crash_point` operations follows: those
    /// placed at or before it (nothing need happen between an acknowledgement and the
    /// next operation for a crash to follow it).
    pub fn acknowledged_by(&self, crash_point: usize) -> usize {
        self.acknowledged_at
            .iter()
            .filter(|&&at| at <= crash_point)
            .count()
    }

    /// A digest of the trace (operations and written bytes), for reports.
    pub fn digest(&self) -> Digest {
        let mut hasher = crate::core::digest::FramedHasher::new("shardlift/crash-test/trace/v1");
        for op in &self.ops {
            hasher.field(op.describe().as_bytes());
            if let TraceOp::Write { data_at, len, .. } = op {
                hasher.field(self.write_bytes(*data_at, *len).unwrap_or(b"<bad write>"));
            }
        }
        hasher.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_at_an_acknowledgement_follows_it() {
        let trace = Trace {
            acknowledged_at: vec![3, 5, 5, 9],
            ..Trace::default()
        };
        assert_eq!(trace.acknowledged_by(2), 0);
        assert_eq!(trace.acknowledged_by(3), 1);
        assert_eq!(trace.acknowledged_by(5), 3);
        assert_eq!(trace.acknowledged_by(9), 4);
    }
}
