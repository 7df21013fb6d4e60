//! A writer recorded on the host, replayed in the guest: for writers the guest cannot boot
//! (a Python interpreter with torch is far over the initramfs cap), `crash-test --replay`
//! records the writer under ptrace on the host, as the model mode does, and the guest's
//! `shardlift kernel-replay` performs the same file operations on the file system under
//! test, in the order they completed, with the same bytes: creates, writes at their
//! offsets, truncates, renames (no-replace where the writer asked for it), links,
//! unlinks, mkdirs, rmdirs, file and directory fsyncs and syncs. Each acknowledgement the
//! writer gave is printed as [`REPLAY_ACK`] at its place in the trace, so the agent marks
//! it on the disk as it marks a live writer's.
//!
//! What a replay does not reproduce: the writer's threads (one operation at a time, in
//! completion order), the difference between `fdatasync` and `fsync` (both replayed as
//! `fsync`), reads, and timing (the kernel's background writeback may fall elsewhere).
//! What the recorder refuses (writable shared mmap, `O_DIRECT`, …) never reaches a script.
//!
//! Script: [`MAGIC`], the JSON header's length (u64, little-endian), the header, then
//! every written byte. Decoding checks the magic, caps the header and the data, and
//! checks that every write lies inside the data and every inode is known before use.
//!
//! Invariant: every path a replay touches is relative, has no `..` or empty component,
//! and is resolved under the working directory.
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path};

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::durable::fs::{FileSystem, RealFs};
use crate::lab::crash_model::trace::{InitialEntry, InodeId, Trace, TraceOp};

/// The script's first bytes.
pub const MAGIC: &[u8; 18] = b"shardlift-replay1\n";

/// The line printed at each acknowledgement the writer gave (not its exit).
pub const REPLAY_ACK: &str = "shardlift-replay: ack";

/// The `--ack` pattern that matches [`REPLAY_ACK`] lines.
pub const REPLAY_ACK_PATTERN: &str = "^shardlift-replay: ack$";

/// Largest JSON header, in bytes.
pub const MAX_HEADER_BYTES: u64 = 64 << 20;

/// Largest data section (every byte the writer wrote), in bytes.
pub const MAX_DATA_BYTES: u64 = 128 << 20;

/// Most files the replay holds open at once (every file the writer touched).
pub const MAX_OPEN_FILES: usize = 4096;

/// Why a script cannot be made, read or replayed.
#[derive(Debug, Error)]
pub enum ReplayError {
    /// The file does not start with [`MAGIC`].
    #[error("not a replay script (no `shardlift-replay1` header)")]
    NotAScript,
    /// A section is larger than its cap, or the file is shorter than it says.
    #[error("the replay script's {what} is {bytes} bytes; the limit is {limit_bytes}")]
    TooLarge {
        /// Which section.
        what: &'static str,
        /// Its size.
        bytes: u64,
        /// The cap.
        limit_bytes: u64,
    },
    /// The header is not the expected JSON, or a write lies outside the data.
    #[error("malformed replay script: {reason}")]
    Malformed {
        /// What is wrong.
        reason: String,
    },
    /// A path is absolute, empty or climbs out of the working directory.
    #[error("the replay script names `{path}`, which is not a plain relative path")]
    UnsafePath {
        /// The path.
        path: String,
    },
    /// An operation failed on the file system under test.
    #[error("operation #{index} ({operation}) failed: {source}")]
    Operation {
        /// Its index in the trace.
        index: usize,
        /// What it was.
        operation: String,
        /// The cause.
        source: std::io::Error,
    },
}

impl ReplayError {
    fn malformed(reason: impl Into<String>) -> Self {
        ReplayError::Malformed {
            reason: reason.into(),
        }
    }
}

/// One operation of a script: a [`TraceOp`] with its bytes' place in the data section.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum ReplayOp {
    Mkdir {
        path: String,
    },
    Create {
        path: String,
        inode: InodeId,
    },
    Link {
        path: String,
        inode: InodeId,
    },
    Write {
        inode: InodeId,
        offset: u64,
        len: u64,
        data_at: u64,
    },
    Truncate {
        inode: InodeId,
        len: u64,
    },
    Fsync {
        inode: InodeId,
    },
    FsyncDir {
        path: String,
    },
    Rename {
        from: String,
        to: String,
        noreplace: bool,
    },
    Unlink {
        path: String,
    },
    Rmdir {
        path: String,
    },
    SyncAll,
}

/// The JSON header.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    /// The initial image's files the writer touches: path and inode.
    initial_files: Vec<(String, InodeId)>,
    ops: Vec<ReplayOp>,
    /// Operations completed at each acknowledgement, the exit's left out.
    acknowledged_at: Vec<usize>,
    data_bytes: u64,
}

/// Encodes `trace` (its acknowledgements placed) as a script.
pub fn encode(trace: &Trace) -> Result<Vec<u8>, ReplayError> {
    let ops = trace.ops.iter().map(replay_op).collect::<Vec<_>>();
    let initial_files = trace
        .initial
        .iter()
        .filter_map(|(path, entry)| match entry {
            InitialEntry::File(inode) => Some((path.clone(), *inode)),
            InitialEntry::Dir => None,
        })
        .collect();
    // The last acknowledgement is the exit, which the agent marks itself.
    let acknowledged_at = trace
        .acknowledged_at
        .split_last()
        .map_or(&[][..], |(_, lines)| lines)
        .to_vec();
    let data_bytes = trace.data.len() as u64;
    if data_bytes > MAX_DATA_BYTES {
        return Err(ReplayError::TooLarge {
            what: "data",
            bytes: data_bytes,
            limit_bytes: MAX_DATA_BYTES,
        });
    }
    let header = Header {
        initial_files,
        ops,
        acknowledged_at,
        data_bytes,
    };
    let json = serde_json::to_vec(&header).map_err(|e| ReplayError::malformed(e.to_string()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + 8 + json.len() + trace.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(json.len() as u64).to_le_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&trace.data);
    Ok(out)
}

fn replay_op(op: &TraceOp) -> ReplayOp {
    match op.clone() {
        TraceOp::Mkdir { path } => ReplayOp::Mkdir { path },
        TraceOp::Create { path, inode } => ReplayOp::Create { path, inode },
        TraceOp::Link { path, inode } => ReplayOp::Link { path, inode },
        TraceOp::Write {
            inode,
            offset,
            len,
            data_at,
        } => ReplayOp::Write {
            inode,
            offset,
            len,
            data_at: data_at as u64,
        },
        TraceOp::Truncate { inode, len } => ReplayOp::Truncate { inode, len },
        TraceOp::Fsync { inode, .. } => ReplayOp::Fsync { inode },
        TraceOp::FsyncDir { path, .. } => ReplayOp::FsyncDir { path },
        TraceOp::Rename {
            from,
            to,
            noreplace,
        } => ReplayOp::Rename {
            from,
            to,
            noreplace,
        },
        TraceOp::Unlink { path } => ReplayOp::Unlink { path },
        TraceOp::Rmdir { path } => ReplayOp::Rmdir { path },
        TraceOp::SyncAll { .. } => ReplayOp::SyncAll,
    }
}

/// A decoded script.
pub struct Script {
    header: Header,
    data: Vec<u8>,
}

impl Script {
    /// Operations in the script.
    pub fn operations(&self) -> usize {
        self.header.ops.len()
    }
}

/// Decodes a script, checking its sections' sizes and every write's bytes.
pub fn decode(bytes: &[u8]) -> Result<Script, ReplayError> {
    let rest = bytes
        .strip_prefix(&MAGIC[..])
        .ok_or(ReplayError::NotAScript)?;
    let (len, rest) = rest
        .split_first_chunk::<8>()
        .ok_or_else(|| ReplayError::malformed("no header length"))?;
    let header_bytes = u64::from_le_bytes(*len);
    if header_bytes > MAX_HEADER_BYTES {
        return Err(ReplayError::TooLarge {
            what: "header",
            bytes: header_bytes,
            limit_bytes: MAX_HEADER_BYTES,
        });
    }
    let header_len = usize::try_from(header_bytes)
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or_else(|| ReplayError::malformed("the header runs past the end"))?;
    let (json, data) = rest.split_at(header_len);
    let header: Header =
        serde_json::from_slice(json).map_err(|e| ReplayError::malformed(e.to_string()))?;
    if header.data_bytes != data.len() as u64 {
        return Err(ReplayError::malformed(format!(
            "the header says {} data bytes, the script holds {}",
            header.data_bytes,
            data.len()
        )));
    }
    for (index, op) in header.ops.iter().enumerate() {
        check_op(op, data.len() as u64)
            .map_err(|reason| ReplayError::malformed(format!("operation #{index}: {reason}")))?;
    }
    for (path, _) in &header.initial_files {
        safe_path(path)?;
    }
    for op in &header.ops {
        for path in op_paths(op) {
            if !(path.is_empty() && matches!(op, ReplayOp::FsyncDir { .. })) {
                safe_path(path)?;
            }
        }
    }
    Ok(Script {
        header,
        data: data.to_vec(),
    })
}

fn check_op(op: &ReplayOp, data_bytes: u64) -> Result<(), String> {
    if let ReplayOp::Write { len, data_at, .. } = op {
        let end = data_at
            .checked_add(*len)
            .ok_or("its bytes' end overflows")?;
        if end > data_bytes {
            return Err(format!(
                "its bytes end at {end}, past the data ({data_bytes})"
            ));
        }
    }
    Ok(())
}

fn op_paths(op: &ReplayOp) -> Vec<&str> {
    match op {
        ReplayOp::Mkdir { path }
        | ReplayOp::Create { path, .. }
        | ReplayOp::Link { path, .. }
        | ReplayOp::FsyncDir { path }
        | ReplayOp::Unlink { path }
        | ReplayOp::Rmdir { path } => vec![path],
        ReplayOp::Rename { from, to, .. } => vec![from, to],
        ReplayOp::Write { .. }
        | ReplayOp::Truncate { .. }
        | ReplayOp::Fsync { .. }
        | ReplayOp::SyncAll => vec![],
    }
}

fn safe_path(path: &str) -> Result<(), ReplayError> {
    let unsafe_path = || ReplayError::UnsafePath {
        path: path.to_owned(),
    };
    if path.is_empty() || path.split('/').any(str::is_empty) {
        return Err(unsafe_path());
    }
    if Path::new(path)
        .components()
        .all(|c| matches!(c, Component::Normal(_)))
    {
        Ok(())
    } else {
        Err(unsafe_path())
    }
}

/// Replays `script` under `root`, printing [`REPLAY_ACK`] on `out` at each
/// acknowledgement (flushed before the next operation runs).
pub fn replay(script: &Script, root: &Path, out: &mut dyn Write) -> Result<(), ReplayError> {
    let mut replayer = Replayer {
        root,
        script,
        files: BTreeMap::new(),
        names: BTreeMap::new(),
    };
    for (path, inode) in &script.header.initial_files {
        replayer.names.insert(*inode, path.clone());
    }
    let mut acks = script.header.acknowledged_at.iter().peekable();
    for (index, op) in script.header.ops.iter().enumerate() {
        while acks.next_if(|&&at| at <= index).is_some() {
            acknowledge(out, index)?;
        }
        replayer
            .apply(op)
            .map_err(|source| ReplayError::Operation {
                index,
                operation: format!("{op:?}"),
                source,
            })?;
    }
    let end = script.header.ops.len();
    while acks.next().is_some() {
        acknowledge(out, end)?;
    }
    Ok(())
}

fn acknowledge(out: &mut dyn Write, index: usize) -> Result<(), ReplayError> {
    writeln!(out, "{REPLAY_ACK}")
        .and_then(|()| out.flush())
        .map_err(|source| ReplayError::Operation {
            index,
            operation: "printing an acknowledgement".to_owned(),
            source,
        })
}

struct Replayer<'a> {
    root: &'a Path,
    script: &'a Script,
    /// Open files by inode (kept open: a writer may write to a file after renaming or
    /// unlinking it).
    files: BTreeMap<InodeId, File>,
    /// A current name of each inode, for links and for opening initial files.
    names: BTreeMap<InodeId, String>,
}

impl Replayer<'_> {
    fn apply(&mut self, op: &ReplayOp) -> std::io::Result<()> {
        let at = |path: &str| self.root.join(path);
        match op {
            ReplayOp::Mkdir { path } => std::fs::create_dir(at(path)),
            ReplayOp::Create { path, inode } => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(at(path))?;
                self.hold(*inode, file)?;
                self.names.insert(*inode, path.clone());
                Ok(())
            }
            ReplayOp::Link { path, inode } => {
                let from = self.name_of(*inode)?;
                std::fs::hard_link(at(&from), at(path))?;
                self.names.insert(*inode, path.clone());
                Ok(())
            }
            ReplayOp::Write {
                inode,
                offset,
                len,
                data_at,
            } => {
                let bytes = write_bytes(self.script, *data_at, *len)?;
                self.file(*inode)?.write_all_at(bytes, *offset)
            }
            ReplayOp::Truncate { inode, len } => self.file(*inode)?.set_len(*len),
            ReplayOp::Fsync { inode } => self.file(*inode)?.sync_all(),
            ReplayOp::FsyncDir { path } => File::open(at(path))?.sync_all(),
            ReplayOp::Rename {
                from,
                to,
                noreplace,
            } => {
                if *noreplace {
                    RealFs.rename_noreplace(&at(from), &at(to))?;
                } else {
                    RealFs.rename_replace(&at(from), &at(to))?;
                }
                for name in self.names.values_mut() {
                    if name == from {
                        to.clone_into(name);
                    }
                }
                Ok(())
            }
            ReplayOp::Unlink { path } => std::fs::remove_file(at(path)),
            ReplayOp::Rmdir { path } => std::fs::remove_dir(at(path)),
            ReplayOp::SyncAll => {
                nix::unistd::sync();
                Ok(())
            }
        }
    }

    fn hold(&mut self, inode: InodeId, file: File) -> std::io::Result<()> {
        if self.files.len() >= MAX_OPEN_FILES {
            return Err(std::io::Error::other(format!(
                "more than {MAX_OPEN_FILES} files open at once"
            )));
        }
        self.files.insert(inode, file);
        Ok(())
    }

    fn name_of(&self, inode: InodeId) -> std::io::Result<String> {
        self.names.get(&inode).cloned().ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("inode {inode} has no name"),
            )
        })
    }

    /// The open file of `inode`, opening an initial file by its name on first use.
    fn file(&mut self, inode: InodeId) -> std::io::Result<&File> {
        if !self.files.contains_key(&inode) {
            let name = self.name_of(inode)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.root.join(name))?;
            self.hold(inode, file)?;
        }
        self.files
            .get(&inode)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "file not held"))
    }
}

/// The bytes of a write, checked at decode to lie inside the data.
fn write_bytes(script: &Script, data_at: u64, len: u64) -> std::io::Result<&[u8]> {
    let start = usize::try_from(data_at).ok();
    let end = data_at
        .checked_add(len)
        .and_then(|e| usize::try_from(e).ok());
    start
        .zip(end)
        .and_then(|(s, e)| script.data.get(s..e))
        .ok_or_else(|| std::io::Error::other("write bytes outside the data"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace() -> Trace {
        let mut trace = Trace::default();
        trace
            .initial
            .insert("old".to_owned(), InitialEntry::File(0));
        trace.initial_contents.push(b"old\n".to_vec());
        trace.inode_count = 2;
        trace.data = b"new\nOLD".to_vec();
        trace.ops = vec![
            TraceOp::Mkdir { path: "d".into() },
            TraceOp::Create {
                path: "d/ckpt.tmp".into(),
                inode: 1,
            },
            TraceOp::Write {
                inode: 1,
                offset: 0,
                len: 4,
                data_at: 0,
            },
            TraceOp::Fsync {
                inode: 1,
                entered_after: 3,
            },
            TraceOp::Rename {
                from: "d/ckpt.tmp".into(),
                to: "d/ckpt".into(),
                noreplace: true,
            },
            TraceOp::Write {
                inode: 0,
                offset: 0,
                len: 3,
                data_at: 4,
            },
            TraceOp::Link {
                path: "again".into(),
                inode: 1,
            },
            TraceOp::FsyncDir {
                path: String::new(),
                entered_after: 7,
            },
            TraceOp::SyncAll { entered_after: 8 },
        ];
        trace.acknowledged_at = vec![5, 9];
        trace
    }

    /// The replayed tree is the writer's, and the acknowledgement comes where it was given.
    #[test]
    fn a_script_replays_the_writers_operations_and_acknowledgements() {
        let script = decode(&encode(&trace()).expect("encode")).expect("decode");
        assert_eq!(script.operations(), 9);
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("old"), b"old\n").expect("initial");
        let mut out = Vec::new();
        replay(&script, dir.path(), &mut out).expect("replay");
        assert_eq!(out, format!("{REPLAY_ACK}\n").into_bytes());
        let read = |p: &str| std::fs::read(dir.path().join(p)).expect(p);
        assert_eq!(read("d/ckpt"), b"new\n");
        assert_eq!(read("again"), b"new\n");
        assert_eq!(read("old"), b"OLD\n");
        assert!(!dir.path().join("d/ckpt.tmp").exists());
    }

    /// Bad scripts are refused before anything is replayed, each with its own error.
    #[test]
    fn bad_scripts_are_refused_by_kind() {
        let good = encode(&trace()).expect("encode");
        assert!(matches!(decode(b"nonsense"), Err(ReplayError::NotAScript)));
        let truncated = &good[..good.len() - 1];
        assert!(matches!(
            decode(truncated),
            Err(ReplayError::Malformed { .. })
        ));
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&(MAX_HEADER_BYTES + 1).to_le_bytes());
        assert!(matches!(decode(&huge), Err(ReplayError::TooLarge { .. })));

        for hostile in ["../escape", "/etc/passwd", "a//b", ""] {
            let mut t = trace();
            t.ops[0] = TraceOp::Mkdir {
                path: hostile.into(),
            };
            let error = decode(&encode(&t).expect("encode")).err();
            assert!(
                matches!(error, Some(ReplayError::UnsafePath { .. })),
                "{hostile}: {error:?}"
            );
        }
        // A write whose bytes lie past the data, with a consistent header otherwise.
        let mut t = trace();
        t.ops[2] = TraceOp::Write {
            inode: 1,
            offset: 0,
            len: 4,
            data_at: 6,
        };
        assert!(matches!(
            decode(&encode(&t).expect("encode")),
            Err(ReplayError::Malformed { .. })
        ));
    }

    /// A failing operation names itself and stops the replay.
    #[test]
    fn a_failing_operation_is_named() {
        let script = decode(&encode(&trace()).expect("encode")).expect("decode");
        let dir = tempfile::tempdir().expect("tempdir");
        // No initial file: the write to inode 0 (operation 5) cannot open it.
        let error = replay(&script, dir.path(), &mut Vec::new()).expect_err("fails");
        assert!(
            matches!(error, ReplayError::Operation { index: 5, .. }),
            "{error}"
        );
    }
}
