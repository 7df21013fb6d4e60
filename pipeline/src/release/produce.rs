//! `release-evidence`: bind a clean checkout, run both killer-demo barriers as child
//! processes, verify their bundles, and emit the evidence directory.
//!
//! Order: everything that can be refused (the output path, the checkout, the pins at
//! HEAD, the binaries) is refused before any run. The runs and the bundle copies live in
//! a scratch folder outside the checkout (so the runs' own clean-checkout checks still see
//! a clean tree); `--out` is created only after the checkout is re-checked.
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use shardlift::core::digest::Digest;
use shardlift::dataset::FASHION_MNIST;
use shardlift::durable::{self, Replace, WriteOptions};
use shardlift::evidence::bundle::BUNDLE_FILES;

use super::error::{io, ReleaseError};
use super::pins::{self, BARRIERS, LIBTORCH_WHEELS};
use super::scan;
use super::sources::HeadTree;
use super::statement::{
    BuildDefinition, BuildIdentity, Builder, ExternalParameters, InternalParameters, LoadedLibrary,
    Provenance, RunDetails, Statement, BUILDER_ID, BUILD_TYPE, PREDICATE_TYPE,
};
use super::summary::{
    ReleaseSummary, RunStatus, RunSummary, SourceSummary, SUMMARY_SCHEMA, SUMMARY_VERSION,
};
use super::sums;
use crate::intoto::{ResourceDescriptor, STATEMENT_TYPE};

/// A killer-demo run may take this long before it is killed and reported as failed.
const RUN_DEADLINE: Duration = Duration::from_secs(600);
/// `verify-bundle` is quick; it gets this long.
const VERIFY_DEADLINE: Duration = Duration::from_secs(120);
/// The seed of both runs (killer-demo's default, passed explicitly).
const SEED: u64 = 0;
/// The biggest file read back from a run or a binary digest (libtorch_cpu.so is ~500 MB,
/// hashed by streaming, so this caps only what is held in memory).
const MEMBER_CAP: u64 = 1 << 20;

/// What the caller asked for.
#[derive(Clone, Debug)]
pub struct ProduceOptions {
    pub repository: PathBuf,
    pub out: PathBuf,
    pub sign_key: Option<PathBuf>,
    pub shardlift: PathBuf,
    pub cache_directory: PathBuf,
    pub source_directory: Option<PathBuf>,
    /// The merged test-lane receipt of this revision to include (its commit must be HEAD).
    pub receipt: Option<PathBuf>,
}

/// What was written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Produced {
    pub status: &'static str,
    pub out: PathBuf,
    pub commit: String,
    pub tree: String,
    pub files: usize,
    pub signed: bool,
}

fn absolute(path: &Path) -> Result<PathBuf, ReleaseError> {
    std::fs::canonicalize(path).map_err(io(path))
}

/// The output directory must not exist yet.
fn refuse_existing_out(out: &Path) -> Result<(), ReleaseError> {
    if out.symlink_metadata().is_ok() {
        return Err(ReleaseError::OutExists {
            path: out.to_owned(),
        });
    }
    Ok(())
}

/// Everything bound from the HEAD tree.
struct SourceFacts {
    commit: String,
    tree: String,
    ignored: Vec<String>,
    rule: Vec<String>,
    runtime: BTreeMap<String, String>,
    cargo_lock: (String, Digest),
    libtorch_lock: (String, Digest),
}

fn bind_source(repository: &Path) -> Result<SourceFacts, ReleaseError> {
    let binding = shardlift::evidence::source::check_clean_checkout(repository, None)?;
    let head = HeadTree::open(repository)?;
    if head.commit != binding.commit {
        return Err(ReleaseError::CheckoutChanged(format!(
            "HEAD moved from {} to {} while it was being read",
            binding.commit, head.commit
        )));
    }
    let rule: Vec<String> = pins::RUNTIME_SOURCE_RULE
        .iter()
        .map(|s| s.to_string())
        .collect();
    let runtime = head.blobs(&rule)?;
    let (cargo_blob, cargo_bytes) = head.read("Cargo.lock")?;
    let (lock_blob, lock_bytes) = head.read("ci/libtorch.lock")?;
    let lock_text = String::from_utf8(lock_bytes.clone())
        .map_err(|_| ReleaseError::LockMismatch("it is not UTF-8".into()))?;
    pins::lock_matches(&lock_text).map_err(ReleaseError::LockMismatch)?;
    Ok(SourceFacts {
        commit: binding.commit,
        tree: binding.tree,
        ignored: binding.ignored,
        rule,
        runtime,
        cargo_lock: (cargo_blob, Digest::of(&cargo_bytes)),
        libtorch_lock: (lock_blob, Digest::of(&lock_bytes)),
    })
}

/// One finished child process.
struct ChildRun {
    command_line: String,
    outcome: String,
    success: bool,
    stdout: String,
    stderr: String,
    /// Mapped libtorch libraries (absolute paths), when observed.
    libraries: BTreeSet<PathBuf>,
}

/// The libraries of the libtorch install `maps` shows mapped: every mapped file in the
/// directory of `libtorch_cpu.so` or below its wheel prefix (`<prefix>/torch/lib`).
/// `None` until both `libtorch_cpu.so` and `libc10.so` are mapped.
fn libtorch_mappings(maps: &str) -> Option<Vec<PathBuf>> {
    let mut mapped: Vec<PathBuf> = maps
        .lines()
        .filter_map(|line| {
            let path = line.split_whitespace().nth(5)?;
            path.starts_with('/')
                .then(|| PathBuf::from(path.trim_end_matches(" (deleted)")))
        })
        .collect();
    mapped.sort();
    mapped.dedup();
    let named = |name: &str| {
        mapped
            .iter()
            .find(|p| p.file_name().is_some_and(|f| f == name))
    };
    let torch_cpu = named("libtorch_cpu.so")?.clone();
    named("libc10.so")?;
    let lib_dir = torch_cpu.parent()?.to_owned();
    let prefix = if lib_dir.ends_with("torch/lib") {
        lib_dir.parent().and_then(Path::parent).map(Path::to_owned)
    } else {
        None
    };
    Some(
        mapped
            .into_iter()
            .filter(|p| {
                p.parent() == Some(lib_dir.as_path())
                    || prefix
                        .as_deref()
                        .is_some_and(|prefix| p.starts_with(prefix))
            })
            .collect(),
    )
}

/// The wheel-relative name of a mapped library (`torch/lib/libc10.so`), or its file name.
fn library_name(path: &Path, libtorch_cpu: &Path) -> String {
    let prefix = libtorch_cpu
        .parent()
        .filter(|dir| dir.ends_with("torch/lib"))
        .and_then(Path::parent)
        .and_then(Path::parent);
    if let Some(relative) = prefix.and_then(|prefix| path.strip_prefix(prefix).ok()) {
        return relative.to_string_lossy().into_owned();
    }
    path.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn wait_with_deadline(
    child: &mut Child,
    deadline: Duration,
    mut poll: impl FnMut(u32),
) -> Result<std::process::ExitStatus, std::io::Error> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if started.elapsed() > deadline {
            // The child is ours and unreaped, so its pid cannot have been reused.
            let _ = child.kill();
            return child.wait();
        }
        poll(child.id());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn run_child(
    program: &Path,
    args: &[String],
    logs: &Path,
    label: &str,
    deadline: Duration,
    observe_libraries: bool,
) -> Result<ChildRun, ReleaseError> {
    let stdout_path = logs.join(format!("{label}.stdout"));
    let stderr_path = logs.join(format!("{label}.stderr"));
    let stdout = File::create(&stdout_path).map_err(io(&stdout_path))?;
    let stderr = File::create(&stderr_path).map_err(io(&stderr_path))?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .map_err(|e| ReleaseError::Shardlift {
            path: program.to_owned(),
            message: format!("cannot start it: {e}"),
        })?;
    // The union of the libtorch mappings seen while the process runs: every 5 ms until
    // libtorch_cpu.so and libc10.so appear (the loader maps the rest around them), then
    // every 100 ms, so libraries mapped later are seen too.
    let mut libraries: BTreeSet<PathBuf> = BTreeSet::new();
    let mut polls = 0u64;
    let status = wait_with_deadline(&mut child, deadline, |pid| {
        polls += 1;
        if observe_libraries && (libraries.is_empty() || polls % 20 == 0) {
            if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                libraries.extend(libtorch_mappings(&maps).unwrap_or_default());
            }
        }
    })
    .map_err(io(program))?;
    let outcome = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "unknown exit".to_owned(),
    };
    let read = |path: &Path| -> Result<String, ReleaseError> {
        let bytes = std::fs::read(path).map_err(io(path))?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    Ok(ChildRun {
        command_line: String::new(),
        outcome,
        success: status.success(),
        stdout: read(&stdout_path)?,
        stderr: read(&stderr_path)?,
        libraries,
    })
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Replaces host-specific strings in a transcript with fixed placeholders.
struct Normaliser {
    replacements: Vec<(String, &'static str)>,
}

impl Normaliser {
    fn new(mut replacements: Vec<(String, &'static str)>) -> Self {
        replacements.retain(|(from, _)| from.len() > 1);
        // Longest first, so a path is replaced before any of its prefixes.
        replacements.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Normaliser { replacements }
    }

    fn apply(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (from, to) in &self.replacements {
            text = text.replace(from.as_str(), to);
        }
        elide_number(&text, "\"wall_time_ms\":")
    }
}

/// Replaces the number after each `key` with `"<elided>"` (wall time is host context).
fn elide_number(text: &str, key: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(index) = rest.find(key) {
        let (before, after) = rest.split_at(index + key.len());
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("\"<elided>\"");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

fn transcript(command_line: &str, run: &ChildRun, normaliser: &Normaliser) -> String {
    format!(
        "$ {}\nresult: {}\n--- stderr ---\n{}--- stdout ---\n{}",
        normaliser.apply(command_line),
        run.outcome,
        ensure_newline(&normaliser.apply(&run.stderr)),
        ensure_newline(&normaliser.apply(&run.stdout)),
    )
}

fn ensure_newline(text: &str) -> String {
    if text.is_empty() || text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

/// The record `killer-demo` prints (the fields the pipeline checks).
#[derive(serde::Deserialize)]
struct DemoLine {
    status: RunStatus,
    barrier: String,
    audit_sha256: Digest,
}

/// Evidence files are new (never written over) and stay writable by their owner.
const NEW_FILE: WriteOptions = WriteOptions {
    replace: Replace::Never,
    read_only: false,
};

/// Writes `root/name` durably, creating its missing folders durably first.
fn write_file(root: &Path, name: &str, bytes: &[u8]) -> Result<(), ReleaseError> {
    let path = root.join(name);
    if let Some(parent) = path.parent() {
        durable::ensure_dir_all(parent)?;
    }
    durable::write_file(&path, bytes, NEW_FILE)?;
    Ok(())
}

/// Produces the release evidence described in the module docs.
pub fn produce(options: &ProduceOptions) -> Result<Produced, ReleaseError> {
    // ---- refusals, before any run ----
    refuse_existing_out(&options.out)?;
    let repository = absolute(&options.repository)?;
    let source = bind_source(&repository)?;
    let shardlift = absolute(&options.shardlift).map_err(|_| ReleaseError::Shardlift {
        path: options.shardlift.clone(),
        message: "not found (build it with `cargo build`, or pass --shardlift)".into(),
    })?;
    if !shardlift.is_file() {
        return Err(ReleaseError::Shardlift {
            path: shardlift,
            message: "not a file".into(),
        });
    }
    let shardlift_sha256 = durable::file_sha256(&shardlift)?;
    let pipeline_exe = std::env::current_exe().map_err(io(Path::new("/proc/self/exe")))?;
    let pipeline_sha256 = durable::file_sha256(&pipeline_exe)?;
    if let Some(key) = &options.sign_key {
        // An unusable key (missing, encrypted, unsupported) is refused before the runs.
        crate::sshsig::sign(key, pins::SIGNATURE_NAMESPACE, b"preflight")
            .map_err(ReleaseError::Sign)?;
    }

    // The receipt, if any, must record the tests of exactly this revision.
    let receipt = match &options.receipt {
        Some(path) => {
            let bytes = durable::read_capped(path, 64 << 20)?;
            let decoded = crate::receipt::schema::Receipt::decode(&bytes).map_err(|e| {
                ReleaseError::Malformed {
                    name: pins::RECEIPT.into(),
                    message: e.to_string(),
                }
            })?;
            if decoded.shardlift.commit != source.commit {
                return Err(ReleaseError::Inconsistent {
                    name: pins::RECEIPT.into(),
                    claim: format!(
                        "the receipt records commit {}, not HEAD {}: run ci/test at HEAD first",
                        decoded.shardlift.commit, source.commit
                    ),
                });
            }
            Some(bytes)
        }
        None => None,
    };

    let scratch = tempfile::Builder::new()
        .prefix("shardlift-release-")
        .tempdir()
        .map_err(io(&std::env::temp_dir()))?;
    let scratch_path = scratch.path().to_owned();
    let runs = scratch_path.join("runs");
    let logs = scratch_path.join("logs");
    let staging = scratch_path.join("evidence");
    for dir in [&runs, &logs, &staging] {
        durable::ensure_dir_all(dir)?;
    }
    let normaliser = Normaliser::new(vec![
        (runs.to_string_lossy().into_owned(), "<runs>"),
        (scratch_path.to_string_lossy().into_owned(), "<scratch>"),
        (repository.to_string_lossy().into_owned(), "<repository>"),
        (
            options.cache_directory.to_string_lossy().into_owned(),
            "<cache-directory>",
        ),
        (
            options
                .source_directory
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            "<source-directory>",
        ),
        (shardlift.to_string_lossy().into_owned(), "shardlift"),
    ]);

    // ---- the runs ----
    let mut emitted: Vec<(String, Vec<u8>)> = Vec::new();
    let mut run_summaries = Vec::new();
    let mut observed: BTreeSet<PathBuf> = BTreeSet::new();
    let mut keep_scratch = false;
    let result = (|| -> Result<(), ReleaseError> {
        for barrier in BARRIERS {
            let run_directory = runs.join(barrier);
            let mut demo_args: Vec<String> = vec![
                "killer-demo".into(),
                "--run-directory".into(),
                run_directory.to_string_lossy().into_owned(),
                "--barrier".into(),
                barrier.into(),
                "--seed".into(),
                SEED.to_string(),
                "--repository".into(),
                repository.to_string_lossy().into_owned(),
                "--expected-revision".into(),
                source.commit.clone(),
                "--cache-directory".into(),
                options.cache_directory.to_string_lossy().into_owned(),
            ];
            if let Some(dir) = &options.source_directory {
                demo_args.push("--source-directory".into());
                demo_args.push(dir.to_string_lossy().into_owned());
            }
            eprintln!("release-evidence: running killer-demo at {barrier}");
            let mut demo = run_child(
                &shardlift,
                &demo_args,
                &logs,
                &format!("{barrier}.killer-demo"),
                RUN_DEADLINE,
                true,
            )?;
            demo.command_line = format!("{} {}", shardlift.display(), demo_args.join(" "));
            if !demo.success {
                keep_scratch = true;
                return Err(ReleaseError::ChildFailed {
                    command: "killer-demo",
                    barrier: barrier.into(),
                    outcome: demo.outcome,
                    kept: run_directory,
                    stderr_tail: tail(&demo.stderr, 15),
                });
            }
            if demo.libraries.is_empty() {
                return Err(ReleaseError::LoadedLibraries(format!(
                    "no libtorch_cpu.so/libc10.so mapping was seen in the killer-demo process at {barrier}"
                )));
            }
            observed.extend(demo.libraries.iter().cloned());
            let line: DemoLine =
                serde_json::from_str(demo.stdout.trim()).map_err(|e| ReleaseError::DemoOutput {
                    barrier: barrier.into(),
                    message: e.to_string(),
                })?;
            if line.status != RunStatus::Passed || line.barrier != barrier {
                keep_scratch = true;
                return Err(ReleaseError::DemoOutput {
                    barrier: barrier.into(),
                    message: format!(
                        "status {:?} for barrier {:?}",
                        line.status.as_str(),
                        line.barrier
                    ),
                });
            }

            let bundle = run_directory.join("bundle");
            let verify_args: Vec<String> = vec![
                "verify-bundle".into(),
                "--bundle-directory".into(),
                bundle.to_string_lossy().into_owned(),
            ];
            let mut verified = run_child(
                &shardlift,
                &verify_args,
                &logs,
                &format!("{barrier}.verify-bundle"),
                VERIFY_DEADLINE,
                false,
            )?;
            verified.command_line = format!("{} {}", shardlift.display(), verify_args.join(" "));
            if !verified.success {
                keep_scratch = true;
                return Err(ReleaseError::ChildFailed {
                    command: "verify-bundle",
                    barrier: barrier.into(),
                    outcome: verified.outcome,
                    kept: run_directory,
                    stderr_tail: tail(&format!("{}{}", verified.stdout, verified.stderr), 15),
                });
            }

            // Copy the bundle into the evidence and verify the copy.
            let folder = pins::bundle_folder(barrier);
            for name in BUNDLE_FILES {
                let bytes = durable::read_capped(&bundle.join(name), MEMBER_CAP)?;
                write_file(&staging, &format!("{folder}/{name}"), &bytes)?;
                emitted.push((format!("{folder}/{name}"), bytes));
            }
            let copy =
                shardlift::evidence::bundle::verify(&staging.join(&folder)).map_err(|source| {
                    ReleaseError::BundleRejected {
                        name: folder.clone(),
                        error: Box::new(source),
                    }
                })?;
            if copy.audit_sha256 != line.audit_sha256
                || RunStatus::from(copy.run_status.as_str()) != RunStatus::Passed
            {
                return Err(ReleaseError::DemoOutput {
                    barrier: barrier.into(),
                    message: "the copied bundle is not the one killer-demo reported".into(),
                });
            }
            run_summaries.push(RunSummary::from_bundle(&folder, &copy));
            emitted.push((
                pins::demo_transcript(barrier),
                transcript(&demo.command_line, &demo, &normaliser).into_bytes(),
            ));
            emitted.push((
                pins::verify_transcript(barrier),
                transcript(&verified.command_line, &verified, &normaliser).into_bytes(),
            ));
        }
        Ok(())
    })();
    if let Err(error) = result {
        if keep_scratch {
            // The failed run directory is kept for inspection.
            let _ = scratch.keep();
        }
        return Err(error);
    }

    // ---- the checkout must not have changed under the runs ----
    let after =
        shardlift::evidence::source::check_clean_checkout(&repository, Some(&source.commit))
            .map_err(|e| ReleaseError::CheckoutChanged(e.to_string()))?;
    if after.tree != source.tree {
        return Err(ReleaseError::CheckoutChanged(format!(
            "the tree moved from {} to {}",
            source.tree, after.tree
        )));
    }

    // The binaries must be the ones hashed before the runs (a shared target directory
    // can be rebuilt underneath a long run).
    if durable::file_sha256(&shardlift)? != shardlift_sha256 {
        return Err(ReleaseError::Shardlift {
            path: shardlift,
            message: "the binary changed while the runs were in progress".into(),
        });
    }

    // ---- loaded libraries ----
    let libraries = observed;
    let libtorch_cpu = libraries
        .iter()
        .find(|p| p.file_name().is_some_and(|f| f == "libtorch_cpu.so"))
        .cloned()
        .ok_or_else(|| ReleaseError::LoadedLibraries("libtorch_cpu.so was not mapped".into()))?;
    let mut loaded = Vec::new();
    for path in &libraries {
        loaded.push(LoadedLibrary {
            name: library_name(path, &libtorch_cpu),
            sha256: durable::file_sha256(path)?.to_hex(),
        });
    }
    loaded.sort();

    // ---- summary, Statement, SHA256SUMS, signature ----
    let summary = ReleaseSummary {
        schema: SUMMARY_SCHEMA.into(),
        version: SUMMARY_VERSION,
        source: SourceSummary {
            commit: source.commit.clone(),
            tree: source.tree.clone(),
            runtime_sources: source.runtime.len() as u64,
        },
        runs: run_summaries,
        nonclaims: pins::NONCLAIMS.iter().map(|s| s.to_string()).collect(),
    };
    let summary_bytes =
        shardlift::core::canonical::encode(&summary).map_err(|e| ReleaseError::Encode {
            name: pins::SUMMARY.into(),
            message: e.to_string(),
        })?;
    emitted.push((pins::SUMMARY.into(), summary_bytes));
    if let Some(bytes) = receipt {
        emitted.push((pins::RECEIPT.into(), bytes));
    }

    let statement = build_statement(&source, &emitted, shardlift_sha256, pipeline_sha256, loaded);
    let statement_bytes =
        serde_json_canonicalizer::to_vec(&statement).map_err(|e| ReleaseError::Encode {
            name: pins::STATEMENT.into(),
            message: e.to_string(),
        })?;
    emitted.push((pins::STATEMENT.into(), statement_bytes));

    // Nothing host-specific may leave this machine in the evidence.
    let mut needles: Vec<String> = vec![
        repository.to_string_lossy().into_owned(),
        scratch_path.to_string_lossy().into_owned(),
        options.cache_directory.to_string_lossy().into_owned(),
        shardlift.to_string_lossy().into_owned(),
        pipeline_exe.to_string_lossy().into_owned(),
    ];
    if let Some(dir) = &options.source_directory {
        needles.push(dir.to_string_lossy().into_owned());
    }
    if let Some(home) = std::env::var_os("HOME") {
        needles.push(home.to_string_lossy().into_owned());
    }
    // The host name, when it cannot be an ordinary word of a transcript ("test", "main"):
    // machine names like "ip-10-0-0-1" or "build7.example" are searched for.
    if let Ok(host) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let host = host.trim();
        if host.len() >= 6
            && host
                .bytes()
                .any(|b| b.is_ascii_digit() || b == b'-' || b == b'.')
        {
            needles.push(host.to_owned());
        }
    }
    needles.retain(|n| n.len() > 1);
    // The receipt is an input recorded by ci/test, bound here by its digest; it keeps the
    // lane environment it recorded verbatim, so it is not held to path-freeness.
    for (name, bytes) in emitted.iter().filter(|(name, _)| name != pins::RECEIPT) {
        let text = String::from_utf8_lossy(bytes);
        if let Some((needle, excerpt)) = scan::find_any(&text, &needles) {
            return Err(ReleaseError::HostLeak {
                name: name.clone(),
                what: format!("{needle:?} in {excerpt:?}"),
            });
        }
        if let Some(excerpt) = scan::absolute_path_excerpt(&text) {
            return Err(ReleaseError::HostLeak {
                name: name.clone(),
                what: format!("an absolute path in {excerpt:?}"),
            });
        }
    }

    let sums_entries: Vec<(String, Digest)> = emitted
        .iter()
        .map(|(name, bytes)| (name.clone(), Digest::of(bytes)))
        .collect();
    let sums_text = sums::render(&sums_entries);
    let signature = match &options.sign_key {
        Some(key) => Some(
            crate::sshsig::sign(key, pins::SIGNATURE_NAMESPACE, sums_text.as_bytes())
                .map_err(ReleaseError::Sign)?,
        ),
        None => None,
    };

    // ---- write ----
    install(&options.out, &emitted, &sums_text, signature.as_deref())?;
    Ok(Produced {
        status: "produced",
        out: options.out.clone(),
        commit: source.commit,
        tree: source.tree,
        files: emitted.len() + 1 + usize::from(signature.is_some()),
        signed: signature.is_some(),
    })
}

/// Writes the staged files durably into `out`, which must not exist.
fn install(
    out: &Path,
    emitted: &[(String, Vec<u8>)],
    sums_text: &str,
    signature: Option<&str>,
) -> Result<(), ReleaseError> {
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        durable::ensure_dir_all(parent)?;
    }
    // Created here, not by ensure_dir_*, so that an `out` made concurrently is refused.
    std::fs::create_dir(out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => ReleaseError::OutExists {
            path: out.to_owned(),
        },
        _ => ReleaseError::Io {
            path: out.to_owned(),
            error: e,
        },
    })?;
    let result = (|| {
        // Makes the new `out` entry durable in its parent.
        durable::ensure_dir_with(&durable::RealFs, out)?;
        for (name, bytes) in emitted {
            write_file(out, name, bytes)?;
        }
        write_file(out, pins::SHA256SUMS, sums_text.as_bytes())?;
        if let Some(signature) = signature {
            write_file(out, pins::SIGNATURE, signature.as_bytes())?;
        }
        // Each write fsyncs its folder, and each folder was made durable in its parent.
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(out);
    }
    result
}

fn build_statement(
    source: &SourceFacts,
    emitted: &[(String, Vec<u8>)],
    shardlift_sha256: Digest,
    pipeline_sha256: Digest,
    loaded_libraries: Vec<LoadedLibrary>,
) -> Statement {
    let sha = |bytes: &[u8]| ("sha256", Digest::of(bytes).to_hex());
    let mut subject = Vec::new();
    let mut byproducts = Vec::new();
    for (name, bytes) in emitted {
        let descriptor = ResourceDescriptor::named(name.clone(), &[sha(bytes)]);
        if name.starts_with("bundles/") {
            subject.push(descriptor);
        } else {
            byproducts.push(descriptor);
        }
    }
    subject.sort_by(|a, b| a.name.cmp(&b.name));
    byproducts.sort_by(|a, b| a.name.cmp(&b.name));

    let mut dependencies = vec![ResourceDescriptor::named(
        "source",
        &[
            ("gitCommit", source.commit.clone()),
            ("gitTree", source.tree.clone()),
        ],
    )];
    for wheel in LIBTORCH_WHEELS {
        dependencies.push(
            ResourceDescriptor::named(wheel.file_name, &[("sha256", wheel.sha256.to_owned())])
                .with_uri(format!("pkg:pypi/{}@{}", wheel.package, wheel.version)),
        );
    }
    for pin in FASHION_MNIST.resources {
        let gz = format!("{}.gz", pin.name);
        dependencies.push(
            ResourceDescriptor::named(
                format!("fashion-mnist/{gz}"),
                &[("sha256", pin.gzip.sha256.to_hex())],
            )
            .with_uri(format!("{}/{gz}", pins::FASHION_MNIST_UPSTREAM))
            .annotate("bytes", json!(pin.gzip.bytes))
            .annotate("payloadName", json!(pin.name))
            .annotate("payloadBytes", json!(pin.payload.bytes))
            .annotate("payloadSha256", json!(pin.payload.sha256.to_hex())),
        );
    }
    for (path, blob) in &source.runtime {
        let mut digest = vec![("gitBlob", blob.clone())];
        if path == "Cargo.lock" {
            digest.push(("sha256", source.cargo_lock.1.to_hex()));
        } else if path == "ci/libtorch.lock" {
            digest.push(("sha256", source.libtorch_lock.1.to_hex()));
        }
        dependencies.push(
            ResourceDescriptor::named(path.clone(), &digest).annotate("runtimeSource", json!(true)),
        );
    }

    Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject,
        predicate_type: PREDICATE_TYPE.into(),
        predicate: Provenance {
            build_definition: BuildDefinition {
                build_type: BUILD_TYPE.into(),
                external_parameters: ExternalParameters {
                    barriers: BARRIERS.iter().map(|s| s.to_string()).collect(),
                    seed: SEED,
                    source_revision: source.commit.clone(),
                },
                internal_parameters: InternalParameters {
                    runtime_source_rule: source.rule.clone(),
                    ignored_files: source.ignored.clone(),
                    build_identity: BuildIdentity {
                        shardlift_sha256: shardlift_sha256.to_hex(),
                        pipeline_sha256: pipeline_sha256.to_hex(),
                        pipeline_version: env!("CARGO_PKG_VERSION").into(),
                        tch_version: pins::TCH_VERSION.into(),
                        libtorch_version: pins::LIBTORCH_VERSION.into(),
                        loaded_libraries,
                    },
                    nonclaims: pins::NONCLAIMS.iter().map(|s| s.to_string()).collect(),
                },
                resolved_dependencies: dependencies,
            },
            run_details: RunDetails {
                builder: Builder {
                    id: BUILDER_ID.into(),
                    version: [("pipeline".to_owned(), env!("CARGO_PKG_VERSION").to_owned())]
                        .into_iter()
                        .collect(),
                },
                byproducts,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_parsing_finds_the_libtorch_prefix() {
        let maps = "\
7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6
7f01-7f02 r-xp 00000000 08:01 2 /cache/lt/torch/lib/libtorch_cpu.so
7f02-7f03 r--p 00000000 08:01 3 /cache/lt/torch/lib/libc10.so
7f03-7f04 r--p 00000000 08:01 4 /cache/lt/torch/lib/libgomp-a34b3233.so.1
7f04-7f05 r--p 00000000 08:01 5 /cache/lt/nvidia/cu13/lib/libcudart.so.13
7f05-7f06 rw-p 00000000 00:00 0 [heap]
";
        let found = libtorch_mappings(maps).expect("both mapped");
        assert_eq!(found.len(), 4);
        let cpu = PathBuf::from("/cache/lt/torch/lib/libtorch_cpu.so");
        let names: Vec<String> = found.iter().map(|p| library_name(p, &cpu)).collect();
        assert!(names.contains(&"torch/lib/libc10.so".to_owned()));
        assert!(names.contains(&"nvidia/cu13/lib/libcudart.so.13".to_owned()));
        assert_eq!(
            libtorch_mappings("7f01-7f02 r-xp 0 08:01 2 /x/torch/lib/libtorch_cpu.so\n"),
            None
        );
    }

    #[test]
    fn normaliser_replaces_paths_and_elides_wall_time() {
        let n = Normaliser::new(vec![
            ("/tmp/s/runs".into(), "<runs>"),
            ("/tmp/s".into(), "<scratch>"),
        ]);
        assert_eq!(
            n.apply(r#"{"bundle_directory":"/tmp/s/runs/a/bundle","wall_time_ms":11984} /tmp/s/x"#),
            r#"{"bundle_directory":"<runs>/a/bundle","wall_time_ms":"<elided>"} <scratch>/x"#
        );
    }
}
