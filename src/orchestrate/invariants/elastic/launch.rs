//! Launching `torch.distributed.run` and gathering what it left.
use std::io::Read;
use std::path::{Path, PathBuf};

use crate::core::canonical;
use crate::core::digest::Digest;
use crate::durable::{self};
use crate::supervise::process::{ChildSpec, ExitOutcome, Role, Signal, SupervisedChild};

use crate::orchestrate::invariants::evidence::Observation;
use crate::orchestrate::invariants::scenarios::{next_step, store_receipts, Context};

use super::observe::*;
use super::*;

/// A free loopback port. Racy by nature: the port is released before the launcher binds
/// it, so another process could take it in between; the caller retries once on a
/// rendezvous failure.
fn free_loopback_port() -> Result<u16, ElasticError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(io_error("binding 127.0.0.1:0 to pick a port"))?;
    let port = listener
        .local_addr()
        .map_err(io_error("reading the picked port"))?
        .port();
    drop(listener);
    Ok(port)
}

/// A digest of everything under a store: every entry's path (relative, in order), kind,
/// size and content digest (a symlink's target). Any write to the store changes it.
pub fn store_tree_sha256(store_dir: &Path) -> Result<Digest, ElasticError> {
    let mut hasher = crate::core::digest::FramedHasher::new("shardlift/invariants/store-tree/v1");
    let walk = walkdir::WalkDir::new(store_dir)
        .follow_links(false)
        .sort_by_file_name();
    for entry in walk {
        let entry = entry.map_err(|e| ElasticError::Io {
            context: "walking the store".into(),
            source: e.into(),
        })?;
        let relative = entry
            .path()
            .strip_prefix(store_dir)
            .unwrap_or(entry.path())
            .as_os_str()
            .as_encoded_bytes()
            .to_vec();
        hasher.field(&relative);
        let kind = entry.file_type();
        if kind.is_file() {
            let bytes = std::fs::read(entry.path()).map_err(io_error("reading a store file"))?;
            hasher.field(b"file").u64(bytes.len() as u64);
            hasher.field(Digest::of(&bytes).0.as_slice());
        } else if kind.is_dir() {
            hasher.field(b"dir");
        } else if kind.is_symlink() {
            let target =
                std::fs::read_link(entry.path()).map_err(io_error("reading a store symlink"))?;
            hasher
                .field(b"symlink")
                .field(target.as_os_str().as_encoded_bytes());
        } else {
            hasher.field(b"other");
        }
    }
    Ok(hasher.finish())
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |entries| entries.count())
}

/// Where the launcher comes from and what to run.
#[derive(Clone, Debug)]
pub struct LaunchOptions {
    /// The `torchrun` executable of the pinned wheel.
    pub torchrun: PathBuf,
    /// Where the Fashion-MNIST payloads are cached.
    pub cache_directory: PathBuf,
    /// A local copy of the payloads, if any.
    pub source_directory: Option<PathBuf>,
    /// Deadline of one launcher run, in seconds.
    pub timeout_s: u64,
    /// Test only: have rank 1 perturb its state on the restarted attempt.
    pub inject: bool,
}

/// One launcher run; returns (exit, timed_out, log).
fn launch_once(
    ctx: &Context<'_>,
    options: &LaunchOptions,
    store_dir: &Path,
    marker_dir: &Path,
    out_dir: &Path,
) -> Result<(Option<ExitOutcome>, bool, String), ElasticError> {
    let port = free_loopback_port()?;
    let mut spec = ChildSpec::new("/bin/sh", Role::Launcher, "invariants-elastic")
        // The launcher logs on stderr; fold it into the one pipe we read.
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 2>&1")
        .arg(&options.torchrun)
        .arg("--no-python")
        .arg("--nnodes=1")
        .arg(format!("--nproc-per-node={WORLD_SIZE}"))
        .arg(format!("--max-restarts={MAX_RESTARTS}"))
        .arg("--monitor-interval=0.5")
        .arg("--rdzv-backend=c10d")
        .arg(format!("--rdzv-endpoint=127.0.0.1:{port}"))
        .arg("--local-addr=127.0.0.1")
        .arg(&ctx.shardlift_exe)
        .arg("elastic-worker")
        .arg("--store")
        .arg(store_dir)
        .arg("--marker-dir")
        .arg(marker_dir)
        .arg("--out")
        .arg(out_dir)
        .arg("--cache-directory")
        .arg(&options.cache_directory)
        .env("OMP_NUM_THREADS", "1")
        .piped_stdout();
    if let Some(source) = &options.source_directory {
        spec = spec.arg("--source-directory").arg(source);
    }
    if options.inject {
        spec = spec.arg("--inject-violation");
    }
    let mut child = SupervisedChild::spawn(spec)?;
    let mut stdout = child.take_stdout().ok_or_else(|| ElasticError::Io {
        context: "launcher output".into(),
        source: std::io::Error::other("no stdout pipe"),
    })?;
    let reader = std::thread::spawn(move || {
        let mut buffer = Vec::new();
        let _ = (&mut stdout).take(8 << 20).read_to_end(&mut buffer);
        String::from_utf8_lossy(&buffer).into_owned()
    });
    let exit = child.wait_timeout(options.timeout_s * 1000)?.cloned();
    let timed_out = exit.is_none();
    let exit = match exit {
        Some(record) => Some(record.outcome),
        None => {
            eprintln!(
                "invariants: the launcher did not finish within {} s; tearing it down",
                options.timeout_s
            );
            // SIGTERM lets the launcher stop its workers; then SIGKILL its whole group.
            let _ = child.signal(Signal::TERM);
            let _ = child.wait_timeout(5_000);
            let _ = child.signal_group(Signal::KILL);
            let _ = child.kill_and_reap();
            None
        }
    };
    let log = reader.join().unwrap_or_default();
    Ok((exit, timed_out, log))
}

/// Runs scenario 11 end to end and returns its observation.
pub fn observe_elastic(
    ctx: &Context<'_>,
    options: &LaunchOptions,
) -> Result<Observation, ElasticError> {
    let store_dir = ctx.fresh_store("s11");
    let committed = crate::store::publish(
        &store_dir,
        &ctx.state1,
        crate::core::topology::Topology::new(WORLD_SIZE).map_err(crate::store::StoreError::from)?,
        &mut crate::store::NoHooks,
    )?;
    let (next, _) = next_step(&ctx.state1, ctx.data)?;
    let expected = ElasticExpectation {
        generation: committed.committed.generation,
        state: ctx.state1.clone(),
        next,
    };
    let mut run = ElasticRun {
        receipts_before: Some(store_receipts(&store_dir)?),
        staging_before: count_entries(&store_dir.join("staging")),
        store_tree_before: Some(store_tree_sha256(&store_dir)?),
        ..ElasticRun::default()
    };
    let mut attempt_dirs = None;
    for attempt in 1..=2u32 {
        let base = ctx.fresh_store("s11-run");
        let marker_dir = base.join("marker");
        let out_dir = base.join("out");
        for dir in [&marker_dir, &out_dir] {
            std::fs::create_dir_all(dir).map_err(io_error("creating the worker directories"))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(io_error("restricting the worker directories"))?;
        }
        eprintln!("invariants: elastic-restart: launching torch.distributed.run (try {attempt})");
        let (exit, timed_out, log) = launch_once(ctx, options, &store_dir, &marker_dir, &out_dir)?;
        run.launch_attempts = attempt;
        run.launcher_exit = exit;
        run.launcher_timed_out = timed_out;
        run.launcher_logged_failure_code = logged_failure_code(&log, 1);
        let rendezvous_failed = !timed_out
            && exit != Some(ExitOutcome::Code(0))
            && !marker_dir.join(MARKER_FILE).exists()
            && (log.contains("Rendezvous")
                || log.contains("rendezvous")
                || log.contains("Address already in use"));
        if exit != Some(ExitOutcome::Code(0)) {
            eprintln!("invariants: elastic-restart: launcher output follows\n{log}");
        }
        attempt_dirs = Some((marker_dir, out_dir));
        if rendezvous_failed && attempt == 1 {
            eprintln!("invariants: elastic-restart: rendezvous failed (port race?); retrying once");
            continue;
        }
        break;
    }
    if let Some((marker_dir, out_dir)) = attempt_dirs {
        run.marker = std::fs::read(marker_dir.join(MARKER_FILE))
            .ok()
            .and_then(|b| canonical::decode(&b).ok());
        let read_report = |name: String| -> Option<WorkerReport> {
            std::fs::read(out_dir.join(name))
                .ok()
                .and_then(|b| canonical::decode(&b).ok())
        };
        run.rank0_attempt0 = read_report(report_file(0, 0));
        run.finals = (0..WORLD_SIZE)
            .filter_map(|rank| read_report(report_file(rank, MAX_RESTARTS)))
            .collect();
    }
    run.receipts_after = Some(store_receipts(&store_dir)?);
    run.staging_after = count_entries(&store_dir.join("staging"));
    run.store_tree_after = Some(store_tree_sha256(&store_dir)?);
    Ok(elastic_observation(&run, &expected))
}

/// The launcher's provenance from its virtual environment: the torch version its wheel
/// reports and whether its `libtorch_cpu.so` is byte-identical to the one loaded here.
pub fn launcher_provenance(
    torchrun: &Path,
    loaded: Digest,
) -> Option<crate::orchestrate::invariants::evidence::LauncherProvenance> {
    let venv = torchrun.parent()?.parent()?;
    let lib = venv.join("lib");
    let torch_dir = std::fs::read_dir(&lib)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("site-packages/torch"))
        .find(|p| p.is_dir())?;
    let library = torch_dir
        .join("lib")
        .join(crate::orchestrate::invariants::provenance::ATTESTED_LIBRARY);
    let (_, version) =
        crate::orchestrate::invariants::provenance::build_version_beside(&library).ok()?;
    let digest = durable::file_sha256(&library).ok()?;
    Some(
        crate::orchestrate::invariants::evidence::LauncherProvenance {
            launcher: "torch.distributed.run (torchrun --no-python)".into(),
            python_torch_version: version,
            wheel_libtorch_cpu_matches_loaded: digest == loaded,
        },
    )
}
