//! `shardlift store ...`: publish, recover, verify, reshard, export and import, bench.
use std::path::{Path, PathBuf};

use anyhow::Context;

use shardlift::core::logical::LogicalState;
use shardlift::core::progress::NoProgress;
use shardlift::core::topology::{Topology, MAX_WORKERS};

use shardlift::store::barrier::{BarrierHook, InOrder, NoHooks};
use shardlift::store::layout::synthetic_state;
use shardlift::store::location::{Location, S3Location};
use shardlift::store::protocol::{chunk_payload_bytes, SyntheticSpec};
use shardlift::store::ObjectCheck;

use super::opened_store::{CommitReport, OpenedStore};
use super::store_report::{
    check_expected_root, print_recovery, print_reshard_report, verified_report,
};
use super::{print_json, print_report};

/// `store bench` arguments.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Chunk-payload bytes of the one large synthetic state the bandwidth figures publish,
    /// reshard, copy and verify (`large`).
    #[arg(long, default_value_t = 1 << 30)]
    pub state_bytes: u64,
    /// FP32 values per chunk of the large state (each object holds 4 × this many bytes).
    #[arg(long, default_value_t = 8192)]
    pub chunk_elements: u32,
    /// Total chunk-payload bytes of the per-commit figure (`small_state`): whole 1.2 MB
    /// model states, one generation each.
    #[arg(long, default_value_t = 64 << 20)]
    pub bytes: u64,
    /// Skip the per-commit figure (`small_state` is then null).
    #[arg(long)]
    pub skip_small: bool,
    /// Drop the whole page cache (needs root) before the cold figures instead of evicting
    /// only the bench's own files (posix_fadvise).
    #[arg(long)]
    pub drop_caches: bool,
    /// Skip the large-state figures (`large` is then null).
    #[arg(long)]
    pub skip_large: bool,
    /// Print JSON (the only output format; accepted for symmetry with other commands).
    #[arg(long)]
    pub json: bool,
    /// Directory for the scratch store (default: the system temp dir).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// An object store (`s3://bucket/prefix`, a fresh prefix): publish one state of
    /// --state-bytes there and PUT the same bytes plainly, printing both throughputs
    /// (the local figures are not run).
    #[arg(
        long,
        value_name = "s3://BUCKET/PREFIX",
        conflicts_with_all = ["bytes", "skip_small", "skip_large", "drop_caches", "dir"]
    )]
    pub store: Option<S3Location>,
    /// Seed of the object-store bench's synthetic state (default 1; with --store only).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// `shardlift store …`: the subcommand, and the bounds of the object-store client.
#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// Object stores: each S3 request attempt ends after this many milliseconds (default
    /// 30000); the connect timeout and the retry window shrink with it, and one request
    /// with its retries ends within (retries + 2) times it (RFC 0001 §9). Local stores
    /// ignore it.
    #[arg(long, global = true, value_name = "MS",
          value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub request_timeout_ms: Option<u64>,
    #[command(subcommand)]
    pub command: StoreCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {
    /// Scan commit records, verify everything, select the newest valid generation and
    /// report LATEST's status. Read-only unless --repair-latest.
    Recover {
        #[arg(long)]
        store: Location,
        #[arg(long)]
        json: bool,
        /// Rewrite refs/LATEST to name the selected generation if it does not.
        #[arg(long)]
        repair_latest: bool,
        /// Fail (exit 1) unless the selected generation's logical-state root is one of
        /// these (repeatable; e.g. the previous and the new checkpoint, as a crash-test
        /// check).
        #[arg(long, value_name = "ROOT")]
        expect_root: Vec<String>,
    },
    /// Offline reshard: check the generation, then commit the next generation with the
    /// same chunk objects and the ownership map for N workers (no chunk is rewritten).
    ///
    /// The source's commit record and manifest are verified in full (bytes, schema,
    /// bindings, structure) and every object it references must be present with exactly
    /// its recorded length, checked from file metadata: a reshard of a 1 GiB state takes
    /// metadata time. Object bytes are not re-hashed unless --verify-objects says so:
    /// recovery and every load hash each byte before it is used, so a same-length change
    /// of an object's bytes leaves both the source and the reshard unselectable, never
    /// loaded (`store verify` re-hashes a generation on demand). RFC 0001 §7.
    ///
    /// Progress goes to stderr: "checking generation G" ("verifying" with
    /// --verify-objects), then "committing the reshard". The JSON report says which
    /// check the source passed (`source_objects`: "lengths" or "hashed").
    Reshard {
        #[arg(long)]
        store: Location,
        #[arg(long)]
        generation: u64,
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)))]
        workers: u32,
        /// Re-hash every object of the source before committing, as a loader does.
        #[arg(long)]
        verify_objects: bool,
        #[arg(long)]
        json: bool,
    },
    /// Load and fully verify one generation; print its root and placement.
    Verify {
        #[arg(long)]
        store: Location,
        #[arg(long)]
        generation: u64,
        #[arg(long)]
        json: bool,
    },
    /// Publish a synthetic state (for demos and tests).
    PublishSynthetic {
        #[arg(long)]
        store: Location,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 0)]
        step: u64,
        #[arg(long, default_value_t = 4)]
        workers: u32,
        #[arg(long, default_value_t = 8192)]
        chunk_elements: u32,
        /// Scale the state to this many chunk-payload bytes with synthetic objects of the
        /// chunk size (deterministic content from --seed), listed by the manifest.
        #[arg(long, conflicts_with = "trace_operations")]
        state_bytes: Option<u64>,
        #[arg(long)]
        json: bool,
        /// With --json, add `operation_trace`: every mutating file-system operation the
        /// writer issued through its seam, in order.
        #[arg(long, requires = "json")]
        trace_operations: bool,
        /// Install the objects one after another, from one thread, in RFC 0001 §4 order
        /// (a deterministic operation order, e.g. for `crash-test`). By default a local
        /// publish installs them from up to 16 threads and fsyncs each fan-out directory
        /// once after the last rename (RFC 0001 §4, "Concurrent objects").
        #[arg(long)]
        sequential: bool,
        /// `barriers`: pause after every barrier event until acknowledged, streaming each
        /// as a `{"barrier":…}` line on stdout first (the `store-child publish` protocol;
        /// for kills at every request boundary). Object stores only; a local store's
        /// paused publisher is `store-child publish`.
        #[arg(long, hide = true, value_name = "barriers")]
        pause_at: Option<String>,
    },
    /// Measure publish, reshard and recovery against plain writes, copies and SHA-256.
    Bench(BenchArgs),
    /// Verify a generation and write it as PyTorch-loadable safetensors: OUT/
    /// model.safetensors (nn.Linear names and shapes), optimizer.safetensors (AdamW
    /// exp_avg, exp_avg_sq per parameter) and metadata.json. OUT must not exist; it
    /// appears whole or not at all.
    Export {
        #[arg(long)]
        store: Location,
        #[arg(long)]
        generation: u64,
        #[arg(long)]
        out: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Check an export directory (digests, safetensors header, names, F32, shapes, root)
    /// and commit its state as a new generation on N workers. Nothing is committed
    /// unless every check passes.
    Import {
        #[arg(long)]
        store: Location,
        #[arg(long)]
        from: PathBuf,
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_WORKERS)))]
        workers: u32,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    match command {
        StoreCommand::Recover {
            store,
            json,
            repair_latest,
            expect_root,
        } => recover_command(store, json, repair_latest, &expect_root),
        StoreCommand::Reshard {
            store,
            generation,
            workers,
            verify_objects,
            json,
        } => reshard_command(store, generation, workers, verify_objects, json),
        StoreCommand::Verify {
            store,
            generation,
            json,
        } => verify(&store, generation, json),
        StoreCommand::PublishSynthetic {
            store,
            seed,
            step,
            workers,
            chunk_elements,
            state_bytes,
            json,
            trace_operations,
            sequential,
            pause_at,
        } => {
            let state = synthetic_state(seed, step, chunk_elements);
            let options = PublishOptions {
                workers,
                state_bytes,
                json,
                trace_operations,
                sequential,
                pause_at,
            };
            publish_command(&store, &state, seed, options)
        }
        StoreCommand::Export {
            store,
            generation,
            out,
            json,
        } => export(&store, generation, &out, json),
        StoreCommand::Import {
            store,
            from,
            workers,
            json,
        } => import(&store, &from, workers, json),
        StoreCommand::Bench(args) => bench(&args),
    }
}

/// `store recover`: the read-only scan, and with `--repair-latest` (a local store only)
/// LATEST rewritten to name the selected generation.
fn recover_command(
    store: Location,
    json: bool,
    repair_latest: bool,
    expect_root: &[String],
) -> anyhow::Result<()> {
    let store = OpenedStore::open(&store, false, json)?;
    let (report, scan) = store.recover(repair_latest)?;
    if json {
        print_json(&report)?;
    } else {
        print_recovery(&scan)?;
    }
    check_expected_root(&scan, expect_root)
}

/// `store reshard`: `generation` on `workers` workers as the next generation.
fn reshard_command(
    store: Location,
    generation: u64,
    workers: u32,
    verify_objects: bool,
    json: bool,
) -> anyhow::Result<()> {
    let objects = if verify_objects {
        ObjectCheck::Hashed
    } else {
        ObjectCheck::Lengths
    };
    let topology = Topology::new(workers)?;
    let store = OpenedStore::open(&store, true, json)?;
    let mut progress = super::progress::StderrProgress::new();
    let summary = store.reshard(generation, topology, objects, &mut progress)?;
    drop(progress);
    let committed = summary.committed();
    print_reshard_report(json, &summary, objects, || {
        format!(
            "generation {} = generation {generation} on {workers} workers (root {}; source \
             objects checked: {})",
            committed.generation,
            committed.logical_state_root,
            objects.name()
        )
    })
}

/// The options of `store publish-synthetic` beyond the state itself.
struct PublishOptions {
    workers: u32,
    state_bytes: Option<u64>,
    json: bool,
    trace_operations: bool,
    sequential: bool,
    pause_at: Option<String>,
}

/// `store publish-synthetic` on either backend. Options only one backend has are refused
/// on the other before anything is opened: `--trace-operations` and `--sequential` need
/// the local file-system seam, `--pause-at` is the object store's paused publisher (a
/// local one is `store-child publish`).
fn publish_command(
    store: &Location,
    state: &LogicalState,
    seed: u64,
    options: PublishOptions,
) -> anyhow::Result<()> {
    let PublishOptions {
        workers,
        state_bytes,
        json,
        trace_operations,
        sequential,
        pause_at,
    } = options;
    let local = matches!(store, Location::Dir(_));
    anyhow::ensure!(
        local || !trace_operations,
        "--trace-operations traces the local file-system seam; an object store has none"
    );
    anyhow::ensure!(
        local || !sequential,
        "--sequential is for a local store; an object store's writer always issues one request after another (RFC 0001 §9.3)"
    );
    anyhow::ensure!(
        !local || pause_at.is_none(),
        "--pause-at works on an object store only; a local store's paused publisher is `store-child publish`"
    );
    let pause_at_barriers = match pause_at.as_deref() {
        None => false,
        Some("barriers") => true,
        Some(other) => anyhow::bail!("--pause-at {other:?}: expected barriers"),
    };
    let topology = Topology::new(workers)?;
    if let (Location::Dir(dir), true) = (store, trace_operations) {
        let (summary, trace) = shardlift::lab::harness::publish_traced(dir, state, topology)?;
        return print_json(&serde_json::json!({
            "summary": summary,
            "operation_trace": trace,
        }));
    }
    let opened = OpenedStore::open(store, true, json)?;
    opened.announce_capability();
    let mut hooks: Box<dyn BarrierHook> = if pause_at_barriers {
        Box::new(shardlift::lab::harness::stepping_barrier_hook())
    } else if sequential {
        Box::new(InOrder)
    } else {
        Box::new(NoHooks)
    };
    let synthetic = state_bytes.map(|bytes| SyntheticSpec::scaling(state, seed, bytes));
    let mut progress = super::progress::StderrProgress::new();
    let commit = opened.publish(state, topology, synthetic, hooks.as_mut(), &mut progress)?;
    drop(progress);
    let generation = commit.committed().generation;
    let Some(spec) = synthetic else {
        return print_report(json, &commit, || {
            format!("published generation {generation}")
        });
    };
    let state_bytes = chunk_payload_bytes(state) + spec.total_bytes;
    if json {
        return print_json(&serde_json::json!({
            "summary": commit,
            "state_bytes": state_bytes,
            "synthetic_objects": spec.object_count(),
        }));
    }
    outln!("published generation {generation} ({state_bytes} bytes of chunk payloads)");
    Ok(())
}

fn export(store: &Location, generation: u64, out: &Path, json: bool) -> anyhow::Result<()> {
    // Checked before any generation is loaded.
    shardlift::interop::check_output(out)?;
    let summary = OpenedStore::open(store, false, json)?.export(generation, out)?;
    print_report(json, &summary, || {
        format!(
            "exported generation {generation} (root {}) to {}",
            summary
                .metadata
                .logical_state_root
                .map_or_else(String::new, |r| r.to_string()),
            out.display()
        )
    })
}

fn import(store: &Location, from: &Path, workers: u32, json: bool) -> anyhow::Result<()> {
    let topology = Topology::new(workers)?;
    let (state, _) = shardlift::interop::read_export(from)
        .with_context(|| format!("importing {}", from.display()))?;
    let commit = OpenedStore::open(store, true, json)?.publish(
        &state,
        topology,
        None,
        &mut NoHooks,
        &mut NoProgress,
    )?;
    let generation = commit.committed().generation;
    let imported = shardlift::interop::ImportSummary::<CommitReport> {
        commit,
        imported_root: state.logical_state_root(),
    };
    print_report(json, &imported, || {
        format!(
            "imported as generation {generation} (root {})",
            imported.imported_root
        )
    })
}

/// `store bench`: the large-state figures, then the small-state ones, as one JSON object
/// (progress on stderr).
fn bench(args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.seed.is_none() || args.store.is_some(),
        "--seed seeds the object-store bench (--store s3://…); the local bench's states are fixed"
    );
    if let Some(location) = &args.store {
        let seed = args.seed.unwrap_or(1);
        return super::objstore::bench(location, args.state_bytes, args.chunk_elements, seed);
    }
    let mut progress = super::progress::StderrProgress::new();
    let large = if args.skip_large {
        None
    } else {
        let options = shardlift::lab::bench::LargeBenchOptions {
            state_bytes: args.state_bytes,
            chunk_elements: args.chunk_elements,
            dir: args.dir.clone(),
            drop_caches: args.drop_caches,
        };
        Some(shardlift::lab::bench::run_large(&options, &mut progress)?)
    };
    let small_state = if args.skip_small {
        None
    } else {
        Some(shardlift::lab::bench::run(
            args.bytes,
            args.dir.as_deref(),
            &mut progress,
        )?)
    };
    drop(progress);
    print_json(&serde_json::json!({
        "large": large,
        "small_state": small_state,
    }))
}

fn verify(store: &Location, generation: u64, json: bool) -> anyhow::Result<()> {
    let store = OpenedStore::open(store, false, json)?;
    let (state, topology) = store.load_generation(generation)?;
    let root = state.logical_state_root();
    let mut report = verified_report(generation, &state, topology);
    store.describe(&mut report);
    print_report(json, &report, || {
        format!("generation {generation} verifies: root {root}")
    })
}
