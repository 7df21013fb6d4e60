//! Literal pins the release evidence binds: the libtorch wheels (from `ci/libtorch.lock`),
//! the versions, the runtime-source rule and the fixed names of the evidence layout.
//!
//! `pipeline` builds `shardlift` without its `torch` feature, so the tch/libtorch
//! constants of `shardlift::orchestrate::demo` are not available here; the values below are the same
//! ones `ci/libtorch.lock` holds, and `release-evidence` refuses a checkout whose
//! `ci/libtorch.lock` (read from the HEAD tree) names other hashes.

use shardlift::core::barrier::DEMO_BARRIERS;
pub use shardlift::core::pins::{LIBTORCH_VERSION, TCH_VERSION};

/// One hash-locked wheel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WheelPin {
    /// The requirement name as written in `ci/libtorch.lock`.
    pub package: &'static str,
    /// The locked version, e.g. `2.13.0`.
    pub version: &'static str,
    /// The wheel's file name (what pip downloads for the locked platform).
    pub file_name: &'static str,
    /// The wheel's SHA-256, lowercase hex (its `--hash=sha256:` in the lock).
    pub sha256: &'static str,
}

/// The three wheels `ci/libtorch.lock` locks, in its order.
pub const LIBTORCH_WHEELS: [WheelPin; 3] = [
    WheelPin {
        package: "torch",
        version: "2.13.0",
        file_name: "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        sha256: "60fcdcb2f3876e21146cb4524ef06397d727ca9ad5f020818547e25075fe3cb7",
    },
    WheelPin {
        package: "nvidia-cuda-runtime",
        version: "13.0.96",
        file_name:
            "nvidia_cuda_runtime-13.0.96-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl",
        sha256: "7f82250d7782aa23b6cfe765ecc7db554bd3c2870c43f3d1821f1d18aebf0548",
    },
    WheelPin {
        package: "nvidia-cuda-cupti",
        version: "13.0.85",
        file_name: "nvidia_cuda_cupti-13.0.85-py3-none-manylinux_2_25_x86_64.whl",
        sha256: "4eb01c08e859bf924d222250d2e8f8b8ff6d3db4721288cf35d14252a4d933c8",
    },
];

/// Canonical upstream folder of the Fashion-MNIST `.gz` resources (not a package
/// registry: the project's own repository).
pub const FASHION_MNIST_UPSTREAM: &str =
    "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion";

/// Which tracked files are "runtime sources": the inputs of the `shardlift` and `pipeline`
/// binaries. An entry ending in `/` is a folder prefix; any other entry is an exact path.
/// The rule is recorded in the evidence, so a later check applies the same one.
pub const RUNTIME_SOURCE_RULE: [&str; 8] = [
    ".cargo/config.toml",
    "Cargo.lock",
    "Cargo.toml",
    "build.rs",
    "ci/libtorch.lock",
    "pipeline/Cargo.toml",
    "pipeline/src/",
    "src/",
];

/// Whether `path` (repository-relative, `/`-separated) is selected by `rule`.
pub fn rule_selects(rule: &[String], path: &str) -> bool {
    rule.iter().any(|entry| {
        if entry.ends_with('/') {
            path.starts_with(entry.as_str())
        } else {
            path == entry
        }
    })
}

/// The two barriers every release runs, in order.
pub const BARRIERS: [&str; 2] = [DEMO_BARRIERS[0].name(), DEMO_BARRIERS[1].name()];

/// The SSHSIG namespace of release-evidence signatures (never shared with other uses).
pub const SIGNATURE_NAMESPACE: &str = "shardlift-release-evidence-v1";

/// File name of the digest list over every other file of the evidence.
pub const SHA256SUMS: &str = "SHA256SUMS";
/// File name of the SSHSIG signature over `SHA256SUMS`, when signed.
pub const SIGNATURE: &str = "SHA256SUMS.sig";
/// File name of the in-toto Statement with the SLSA provenance predicate.
pub const STATEMENT: &str = "release-evidence.json";
/// File name of the canonical-JSON summary of the runs.
pub const SUMMARY: &str = "summary.json";
/// The merged test-lane receipt of this revision, when one is included (`--receipt`).
pub const RECEIPT: &str = "receipts/merged.json";

/// The transcript of the killer-demo run at `barrier`.
pub fn demo_transcript(barrier: &str) -> String {
    format!("transcripts/{barrier}.killer-demo.txt")
}

/// The transcript of `verify-bundle` on the run at `barrier`.
pub fn verify_transcript(barrier: &str) -> String {
    format!("transcripts/{barrier}.verify-bundle.txt")
}

/// The folder (inside the evidence directory) holding the bundle of `barrier`.
pub fn bundle_folder(barrier: &str) -> String {
    format!("bundles/{barrier}")
}

/// Every file a release-evidence directory holds besides `SHA256SUMS` and its
/// signature, sorted by byte order (the order of `SHA256SUMS`); `with_receipt` adds the
/// merged test-lane receipt.
pub fn expected_files(with_receipt: bool) -> Vec<String> {
    let mut files = vec![STATEMENT.to_owned(), SUMMARY.to_owned()];
    if with_receipt {
        files.push(RECEIPT.to_owned());
    }
    for barrier in BARRIERS {
        for name in shardlift::evidence::bundle::BUNDLE_FILES {
            files.push(format!("{}/{name}", bundle_folder(barrier)));
        }
        files.push(demo_transcript(barrier));
        files.push(verify_transcript(barrier));
    }
    files.sort();
    files
}

/// What the evidence does not prove, written into the summary and the Statement.
pub const NONCLAIMS: [&str; 6] = [
    "no authenticity without a signature: SHA256SUMS only detects changes; anyone can regenerate a consistent directory unless SHA256SUMS.sig verifies against a key you trust",
    "no freshness: nothing binds the evidence to a time; an old directory verifies forever",
    "no power-loss durability on real hardware: the runs kill a publisher process with SIGKILL; power loss is only modelled in the crash matrix",
    "local host only: one machine, CPU, one process tree; no multi-node or network file system",
    "no reproducible-build claim: the binary digests identify the binaries that ran, not a build from the recorded commit",
    "no performance claim",
];

/// Checks that `lock` (the bytes of `ci/libtorch.lock`) locks exactly [`LIBTORCH_WHEELS`].
pub fn lock_matches(lock: &str) -> Result<(), String> {
    let mut found = Vec::new();
    for line in lock.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(spec), Some(hash), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("unexpected line {line:?}"));
        };
        let (Some((package, version)), Some(sha256)) =
            (spec.split_once("=="), hash.strip_prefix("--hash=sha256:"))
        else {
            return Err(format!("unexpected line {line:?}"));
        };
        found.push((package.to_owned(), version.to_owned(), sha256.to_owned()));
    }
    let expected: Vec<(String, String, String)> = LIBTORCH_WHEELS
        .iter()
        .map(|w| (w.package.into(), w.version.into(), w.sha256.into()))
        .collect();
    if found != expected {
        return Err(format!(
            "it locks {found:?}; this pipeline binds {expected:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_lock_file_matches_the_literal_pins() {
        let lock = include_str!("../../../ci/libtorch.lock");
        assert_eq!(lock_matches(lock), Ok(()));
        assert!(lock_matches("torch==2.13.0 --hash=sha256:00\n").is_err());
    }

    #[test]
    fn rule_selects_prefixes_and_exact_paths() {
        let rule: Vec<String> = RUNTIME_SOURCE_RULE.iter().map(|s| s.to_string()).collect();
        assert!(rule_selects(&rule, "src/lib.rs"));
        assert!(rule_selects(&rule, "Cargo.lock"));
        assert!(rule_selects(&rule, "pipeline/src/release.rs"));
        assert!(!rule_selects(&rule, "pipeline/tests/release_flow.rs"));
        assert!(!rule_selects(&rule, "srcx/lib.rs"));
        assert!(!rule_selects(&rule, "docs/architecture.md"));
    }

    #[test]
    fn expected_files_are_sorted_and_complete() {
        let files = expected_files(false);
        assert_eq!(files.len(), 2 + 2 * 6);
        let mut sorted = files.clone();
        sorted.sort();
        assert_eq!(files, sorted);
    }
}
