//! Starting the workers and accepting their connections on a private socket.
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::core::topology::Topology;
use crate::supervise::ipc::{self, FramedStream, IpcError};
use crate::supervise::process::{
    worker_malloc_tunables, ChildSpec, Role, Supervisor, MALLOC_TUNABLES_VARIABLE,
};

use crate::trainer::protocol::Message;

use super::*;

static SOCKET_SERIAL: AtomicU32 = AtomicU32::new(0);

/// A private directory for the session's socket, removed on drop. Kept short: sun_path
/// holds 108 bytes, and run directories can be deep.
#[derive(Debug)]
pub(super) struct SocketDirectory(pub(super) PathBuf);

impl SocketDirectory {
    pub(super) fn create() -> Result<Self, SessionError> {
        let serial = SOCKET_SERIAL.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sl-{}-{serial}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| SessionError::SocketDirectory {
                path: path.clone(),
                source,
            })?;
        Ok(SocketDirectory(path))
    }
}

impl Drop for SocketDirectory {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Starts one `shardlift worker` per rank; returns each rank's child index.
pub(super) fn spawn_workers(
    supervisor: &mut Supervisor,
    options: &SessionOptions,
    topology: Topology,
    socket_path: &Path,
) -> Result<Vec<usize>, SessionError> {
    let mut child_of_rank = Vec::new();
    for rank in 0..topology.workers() {
        child_of_rank.push(supervisor.spawn(worker_spec(options, socket_path, rank))?);
    }
    Ok(child_of_rank)
}

/// `shardlift worker --socket S --rank R --engine E` with one BLAS/OpenMP thread and the
/// workers' allocator settings: the argv the binary's hidden `worker` command parses.
pub(super) fn worker_spec(options: &SessionOptions, socket: &Path, rank: u32) -> ChildSpec {
    ChildSpec::new(&options.shardlift_exe, Role::Worker, &options.session)
        .arg("worker")
        .arg("--socket")
        .arg(socket)
        .arg("--rank")
        .arg(rank.to_string())
        .arg("--engine")
        .arg(options.engine.name())
        .env("OMP_NUM_THREADS", "1")
        .env("MKL_NUM_THREADS", "1")
        .envs(worker_malloc_tunables(std::env::var_os(
            MALLOC_TUNABLES_VARIABLE,
        )))
        .rank(rank)
}

/// Accepts one checked connection per rank, ordered by rank. The caller tears the group
/// down on failure.
pub(super) fn accept_workers(
    listener: &UnixListener,
    supervisor: &mut Supervisor,
    child_of_rank: &[usize],
    options: &SessionOptions,
) -> Result<Vec<FramedStream>, SessionError> {
    let mut by_rank: Vec<Option<FramedStream>> = child_of_rank.iter().map(|_| None).collect();
    for _ in 0..child_of_rank.len() {
        let (rank, pid, framed) = accept_hello(listener, supervisor, options)?;
        // The rank claimed must be the rank we spawned at that pid.
        let expected_pid = child_of_rank
            .get(rank as usize)
            .and_then(|&index| supervisor.children().get(index))
            .map(|child| child.pid());
        match by_rank.get_mut(rank as usize) {
            Some(slot @ None) if expected_pid == Some(pid) => *slot = Some(framed),
            _ => {
                return Err(SessionError::BadReply {
                    rank,
                    reason: format!("pid {pid} claimed rank {rank}"),
                })
            }
        }
    }
    Ok(by_rank.into_iter().flatten().collect())
}

/// Accepts the next connection from a live worker and reads its `Hello`: the claimed
/// rank, the peer's pid and the connection.
pub(super) fn accept_hello(
    listener: &UnixListener,
    supervisor: &mut Supervisor,
    options: &SessionOptions,
) -> Result<(u32, u32, FramedStream), SessionError> {
    let live = supervisor.live_pids();
    let (stream, pid) = ipc::accept_checked(
        listener,
        options.connect_timeout_ms,
        |pid| live.contains(&pid),
        || match supervisor.poll_exited() {
            Ok(Some(record)) => Err(IpcError::Malformed {
                peer: format!("worker rank {:?}", record.rank),
                reason: format!("exited before connecting ({})", record.outcome),
            }),
            _ => Ok(()),
        },
    )
    .map_err(SessionError::Accept)?;
    let mut framed =
        FramedStream::new(stream, format!("worker pid {pid}"), options.step_timeout_ms)
            .map_err(SessionError::Accept)?;
    let hello = framed.receive().map_err(SessionError::Accept)?;
    match Message::decode(&hello) {
        Ok(Message::Hello { rank }) => Ok((rank, pid, framed)),
        Ok(other) => Err(SessionError::UnexpectedMessage {
            rank: u32::MAX,
            expected: "hello",
            got: other.kind(),
        }),
        Err(source) => Err(SessionError::Protocol {
            rank: u32::MAX,
            source,
        }),
    }
}
