//! The child side of the harness (`shardlift store-child`): it reads the sealed state,
//! publishes or recovers, and speaks the line protocol of the parent ([`super`]): one
//! event per barrier or operation, waiting for the acknowledgement byte after each.
use super::*;

/// Child side of `store-child publish`: reads the handoff and publishes. Pausing at
/// barriers, it streams one event per barrier and waits for an acknowledgement byte after
/// each; pausing at operations, it does the same before every file-system operation;
/// pausing nowhere, it says `ready` and runs free (no hook observes it, so it installs
/// objects concurrently, RFC 0001 §4; random-instant kills land in that order too).
pub fn child_publish(
    store_dir: &Path,
    handoff: &Path,
    pause: PublisherPause,
) -> Result<CommitSummary, LabError> {
    if !matches!(pause, PublisherPause::Operations) {
        return child_publish_on(handoff, pause, |state, topology, hooks| {
            publish_with(&RealFs, store_dir, state, topology, hooks).map_err(LabError::from)
        });
    }
    let (state, topology) = enter_child_and_read_handoff(handoff)?;
    let stepping = SteppingFs {
        root: store_dir,
        next_seq: std::cell::Cell::new(0),
        log: None,
    };
    let summary = publish_with(&stepping, store_dir, &state, topology, &mut NoHooks)?;
    send(&ChildMessage::Done(summary.clone()))?;
    Ok(summary)
}

/// Makes this process a supervised child, then reads and decodes the handoff (capped).
fn enter_child_and_read_handoff(handoff: &Path) -> Result<(LogicalState, Topology), LabError> {
    enter_supervised_child()?;
    let cap = (MAX_CHUNK_OBJECT_BYTES * 3)
        .saturating_add(MAX_MANIFEST_BYTES)
        .saturating_add(HANDOFF_MAGIC.len() as u64 + 8);
    let bytes = RealFs
        .read_file(handoff, cap)
        .map_err(|e| StoreError::io(handoff, e))?;
    if bytes.len() as u64 > cap {
        return Err(LabError::Store(StoreError::TooLarge {
            path: handoff.to_owned(),
            cap,
        }));
    }
    Ok(decode_handoff(handoff, &bytes)?)
}

/// Child side of `store-child publish` on a store the lab does not know (the object
/// store, whose writer lives above the lab): reads the handoff and runs `publish` with
/// the hook `pause` asks for, speaking the same protocol as [`child_publish`]. Pausing
/// before file-system operations has no meaning off the local file system: refused.
pub fn child_publish_on<E: From<LabError>>(
    handoff: &Path,
    pause: PublisherPause,
    publish: impl FnOnce(&LogicalState, Topology, &mut dyn BarrierHook) -> Result<CommitSummary, E>,
) -> Result<CommitSummary, E> {
    let (state, topology) = enter_child_and_read_handoff(handoff)?;
    let summary = match pause {
        PublisherPause::Barriers => publish(&state, topology, &mut stepping_barrier_hook())?,
        PublisherPause::Nowhere => {
            send(&ChildMessage::Ready)?;
            publish(&state, topology, &mut NoHooks)?
        }
        PublisherPause::Operations => {
            return Err(LabError::ChildProtocol(
                "pausing before file-system operations needs a local store directory".into(),
            )
            .into())
        }
    };
    send(&ChildMessage::Done(summary.clone()))?;
    Ok(summary)
}

/// Prints a recovery report as the one JSON line `store-child recover` answers with.
pub fn child_print_report(report: &RecoveryReport) -> Result<(), LabError> {
    let line = serde_json::to_string(report).map_err(|e| LabError::ChildProtocol(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| LabError::ChildProtocol(e.to_string()))
}

/// The barrier hook of a publisher paused at every barrier: each event goes to stdout as a
/// `{"barrier":{...}}` line and the publisher blocks until the parent acknowledges it
/// (one byte `A` on stdin; EOF stops it) — the `store-child publish --pause-at barriers`
/// protocol, reused by the object-store publisher (`store publish-synthetic --store s3://…
/// --pause-at barriers`) so a kill can land at every request boundary.
pub fn stepping_barrier_hook() -> FnHook<impl FnMut(&BarrierEvent) -> Result<(), HookStop>> {
    FnHook(|event: &BarrierEvent| {
        send_and_wait(&ChildMessage::Barrier(event.clone()))
            .map_err(|e| HookStop::from(e.to_string()))
    })
}

/// Child side of `store-child recover`: recovers and prints the report as one JSON line.
pub fn child_recover(store_dir: &Path) -> Result<(), LabError> {
    child_print_report(&crate::store::recover(store_dir)?)
}

/// Writes one protocol line to stdout.
fn send(message: &ChildMessage) -> Result<(), LabError> {
    let line =
        serde_json::to_string(message).map_err(|e| LabError::ChildProtocol(e.to_string()))?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| LabError::ChildProtocol(e.to_string()))
}

/// Writes one protocol line and blocks until the parent acknowledges it.
fn send_and_wait(message: &ChildMessage) -> Result<(), LabError> {
    send(message)?;
    let mut ack = [0u8; 1];
    std::io::stdin()
        .lock()
        .read_exact(&mut ack)
        .map_err(|e| LabError::ChildProtocol(format!("no acknowledgement: {e}")))?;
    if ack[0] != ACK {
        return Err(LabError::ChildProtocol(format!(
            "unexpected acknowledgement byte {}",
            ack[0]
        )));
    }
    Ok(())
}

/// Publishes on the real file system and returns, with the summary, every mutating
/// file-system operation the writer issued through its seam, in order (the trace
/// `crash-test`'s recorder must reproduce from outside).
pub fn publish_traced(
    store_dir: &Path,
    state: &LogicalState,
    topology: Topology,
) -> Result<(CommitSummary, Vec<OperationEvent>), LabError> {
    let tracing = SteppingFs {
        root: store_dir,
        next_seq: std::cell::Cell::new(0),
        log: Some(std::cell::RefCell::new(Vec::new())),
    };
    let summary = publish_with(&tracing, store_dir, state, topology, &mut NoHooks)?;
    let trace = tracing.log.map(|log| log.into_inner()).unwrap_or_default();
    Ok((summary, trace))
}

/// The real file system, announcing every mutating operation before it runs: to the
/// parent, waiting for its acknowledgement (`log: None`), or into `log`. Reads pass
/// straight through.
struct SteppingFs<'a> {
    root: &'a Path,
    next_seq: std::cell::Cell<u64>,
    log: Option<std::cell::RefCell<Vec<OperationEvent>>>,
}

impl SteppingFs<'_> {
    fn name(&self, path: &Path) -> String {
        match path.strip_prefix(self.root) {
            Ok(rel) => rel.to_string_lossy().into_owned(),
            Err(_) if self.root.starts_with(path) => "..".to_owned(),
            Err(_) => path.to_string_lossy().into_owned(),
        }
    }

    fn step(
        &self,
        kind: OperationKind,
        path: &Path,
        to: Option<&Path>,
        bytes: Option<usize>,
    ) -> std::io::Result<()> {
        let seq = self.next_seq.get();
        self.next_seq.set(seq + 1);
        let event = OperationEvent {
            seq,
            kind,
            path: self.name(path),
            to: to.map(|t| self.name(t)),
            bytes: bytes.map(|b| b as u64),
        };
        match &self.log {
            Some(log) => {
                log.borrow_mut().push(event);
                Ok(())
            }
            None => send_and_wait(&ChildMessage::Operation(event)).map_err(std::io::Error::other),
        }
    }
}

impl FileSystem for SteppingFs<'_> {
    fn create_dir(&self, path: &Path) -> std::io::Result<()> {
        self.step(OperationKind::Mkdir, path, None, None)?;
        RealFs.create_dir(path)
    }

    fn write_new_file(&self, path: &Path, bytes: &[u8], read_only: bool) -> std::io::Result<()> {
        self.step(OperationKind::CreateWrite, path, None, Some(bytes.len()))?;
        RealFs.write_new_file(path, bytes, read_only)
    }

    fn fsync_file(&self, path: &Path) -> std::io::Result<()> {
        self.step(OperationKind::FsyncFile, path, None, None)?;
        RealFs.fsync_file(path)
    }

    fn fsync_dir(&self, path: &Path) -> std::io::Result<()> {
        self.step(OperationKind::FsyncDir, path, None, None)?;
        RealFs.fsync_dir(path)
    }

    fn rename_noreplace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.step(OperationKind::Rename, from, Some(to), None)?;
        RealFs.rename_noreplace(from, to)
    }

    fn rename_replace(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.step(OperationKind::RenameReplace, from, Some(to), None)?;
        RealFs.rename_replace(from, to)
    }

    fn remove_file(&self, path: &Path) -> std::io::Result<()> {
        self.step(OperationKind::Unlink, path, None, None)?;
        RealFs.remove_file(path)
    }

    reads_from_real_disk!();
}
