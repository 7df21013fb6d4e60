//! The runtime provenance guard: before any scenario runs, the libtorch this process
//! actually mapped is checked against registered exact pairs (tch version, libtorch build
//! version, SHA-256 of the mapped `libtorch_cpu.so`). Anything else is refused.
//!
//! The library is found through `/proc/self/maps` (the file the dynamic loader really
//! mapped, not the one a build script or environment variable names); its build version
//! is read from the `build-version` (libtorch zip) or `version.py` (wheel) file beside
//! its `lib/` directory. The attestation written into the evidence holds the observed
//! values and the verdict, never the path.
use std::path::{Path, PathBuf};

use crate::core::digest::Digest;
use crate::durable::{self, DurableError};

use crate::core::pins::{LIBTORCH_VERSION, TCH_VERSION};

/// The library file whose digest is attested.
pub const ATTESTED_LIBRARY: &str = "libtorch_cpu.so";

/// One accepted combination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegisteredPair {
    /// The tch crate version.
    pub tch_version: &'static str,
    /// The libtorch release (without a local suffix).
    pub libtorch_version: &'static str,
    /// SHA-256 of `libtorch_cpu.so`, lowercase hex.
    pub libtorch_cpu_sha256: &'static str,
    /// Where the bytes come from, for people reading the registry.
    pub origin: &'static str,
}

/// The registry of exact pairs. The digest is that of `torch/lib/libtorch_cpu.so` inside
/// the pinned wheel torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl (sha256 60fcdcb2…,
/// ci/libtorch.lock), as ci/bootstrap extracts it.
pub const REGISTERED_PAIRS: [RegisteredPair; 1] = [RegisteredPair {
    tch_version: TCH_VERSION,
    libtorch_version: LIBTORCH_VERSION,
    libtorch_cpu_sha256: "096eed6e217377ccda4d50693b680e2771709c01f58fe52717835b017fed9c58",
    origin: "libtorch_cpu.so of the PyPI wheel torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl",
}];

/// What was observed about the running process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedRuntime {
    /// The tch crate version linked.
    pub tch_version: String,
    /// The build version without any local suffix (`2.13.0+cu130` → `2.13.0`).
    pub libtorch_version: String,
    /// The full build version string as found (e.g. `2.13.0+cu130`).
    pub libtorch_build: String,
    /// SHA-256 of the `libtorch_cpu.so` file mapped into this process.
    pub libtorch_cpu_sha256: Digest,
}

/// Why the guard refused or could not observe.
#[derive(Debug, thiserror::Error)]
pub enum ProvenanceError {
    /// `/proc/self/maps` could not be read.
    #[error("cannot read /proc/self/maps to find the loaded libtorch: {0}")]
    Maps(std::io::Error),
    /// No `libtorch_cpu.so` is mapped.
    #[error("no {ATTESTED_LIBRARY} is mapped into this process (is this a torch build?)")]
    NotMapped,
    /// `libtorch_cpu.so` is mapped from two different files.
    #[error("{ATTESTED_LIBRARY} is mapped from more than one file")]
    MappedTwice,
    /// The mapped library could not be hashed.
    #[error("cannot hash the loaded {path}: {source}")]
    Hash {
        /// The library's path.
        path: PathBuf,
        /// The underlying error.
        source: DurableError,
    },
    /// Neither version file lies beside the library.
    #[error("no build-version or version.py beside the loaded libtorch ({dir})")]
    NoVersionFile {
        /// The library's directory.
        dir: PathBuf,
    },
    /// The version file holds no version this guard can read.
    #[error("cannot parse the libtorch build version from {path}")]
    BadVersionFile {
        /// The version file.
        path: PathBuf,
    },
    /// The observed versions and digest are not a registered exact pair.
    #[error(
        "refusing to run: the loaded runtime (tch {tch}, libtorch {libtorch}, {ATTESTED_LIBRARY} sha256 {digest}) \
         is not a registered exact pair; registered: {registered}. Run ci/bootstrap to link the pinned libtorch"
    )]
    Unregistered {
        /// The tch version observed.
        tch: String,
        /// The libtorch version observed.
        libtorch: String,
        /// The library digest observed, hex.
        digest: String,
        /// The registered pairs, described.
        registered: String,
    },
}

/// The registered pair `observed` matches exactly, or a refusal naming what differs.
pub fn check_runtime(
    observed: &ObservedRuntime,
    registry: &[RegisteredPair],
) -> Result<RegisteredPair, ProvenanceError> {
    registry
        .iter()
        .find(|pair| {
            pair.tch_version == observed.tch_version
                && pair.libtorch_version == observed.libtorch_version
                && pair.libtorch_cpu_sha256 == observed.libtorch_cpu_sha256.to_hex()
        })
        .copied()
        .ok_or_else(|| ProvenanceError::Unregistered {
            tch: observed.tch_version.clone(),
            libtorch: observed.libtorch_version.clone(),
            digest: observed.libtorch_cpu_sha256.to_hex(),
            registered: registry
                .iter()
                .map(|p| {
                    format!(
                        "(tch {}, libtorch {}, sha256 {})",
                        p.tch_version, p.libtorch_version, p.libtorch_cpu_sha256
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// The path of the mapped `libtorch_cpu.so`, from `/proc/self/maps` text.
pub fn mapped_library(maps: &str) -> Result<PathBuf, ProvenanceError> {
    let mut found: Option<&str> = None;
    for line in maps.lines() {
        // address perms offset dev inode pathname (the path may contain spaces).
        let path = line.splitn(6, ' ').nth(5).map(str::trim_start);
        let Some(path) = path else { continue };
        if Path::new(path).file_name().and_then(|n| n.to_str()) != Some(ATTESTED_LIBRARY) {
            continue;
        }
        match found {
            None => found = Some(path),
            Some(previous) if previous == path => {}
            Some(_) => return Err(ProvenanceError::MappedTwice),
        }
    }
    found.map(PathBuf::from).ok_or(ProvenanceError::NotMapped)
}

/// The libtorch build version recorded beside a `lib/` directory: `build-version`
/// (libtorch zip) or `version.py` (wheel). Returns (full, without local suffix).
pub fn build_version_beside(lib_file: &Path) -> Result<(String, String), ProvenanceError> {
    let root = lib_file
        .parent()
        .and_then(Path::parent)
        .unwrap_or(Path::new("/"));
    let build_version = root.join("build-version");
    let version_py = root.join("version.py");
    let full = if let Ok(text) = std::fs::read_to_string(&build_version) {
        text.trim().to_owned()
    } else if let Ok(text) = std::fs::read_to_string(&version_py) {
        text.lines()
            .find_map(|line| {
                let rest = line.strip_prefix("__version__ = ")?.trim();
                let quote = rest.chars().next()?;
                if quote != '\'' && quote != '"' {
                    return None;
                }
                Some(rest.trim_matches(quote).to_owned())
            })
            .ok_or(ProvenanceError::BadVersionFile { path: version_py })?
    } else {
        return Err(ProvenanceError::NoVersionFile { dir: root.into() });
    };
    let short = full.split('+').next().unwrap_or_default().to_owned();
    let well_formed = !short.is_empty()
        && short
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    if !well_formed {
        return Err(ProvenanceError::BadVersionFile {
            path: root.to_owned(),
        });
    }
    Ok((full, short))
}

/// Observes this process's runtime: the mapped library, its digest and build version.
pub fn observe_runtime() -> Result<ObservedRuntime, ProvenanceError> {
    // Make sure libtorch is really in use (as-needed linking maps it at start-up anyway).
    let _ = tch::utils::has_openmp();
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(ProvenanceError::Maps)?;
    let library = mapped_library(&maps)?;
    let digest = durable::file_sha256(&library).map_err(|source| ProvenanceError::Hash {
        path: library.clone(),
        source,
    })?;
    let (full, short) = build_version_beside(&library)?;
    Ok(ObservedRuntime {
        tch_version: TCH_VERSION.to_owned(),
        libtorch_version: short,
        libtorch_build: full,
        libtorch_cpu_sha256: digest,
    })
}

/// The start-up guard: observe, then check against [`REGISTERED_PAIRS`].
pub fn guard() -> Result<(ObservedRuntime, RegisteredPair), ProvenanceError> {
    let observed = observe_runtime()?;
    let pair = check_runtime(&observed, &REGISTERED_PAIRS)?;
    Ok((observed, pair))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observed(tch: &str, libtorch: &str, digest: &str) -> ObservedRuntime {
        ObservedRuntime {
            tch_version: tch.into(),
            libtorch_version: libtorch.into(),
            libtorch_build: libtorch.into(),
            libtorch_cpu_sha256: Digest::from_hex(digest).expect("hex"),
        }
    }

    #[test]
    fn registered_pair_is_accepted_and_any_difference_refused() {
        let good = REGISTERED_PAIRS[0];
        assert!(check_runtime(
            &observed(
                good.tch_version,
                good.libtorch_version,
                good.libtorch_cpu_sha256
            ),
            &REGISTERED_PAIRS
        )
        .is_ok());
        let other = "11".repeat(32);
        for bad in [
            observed("0.25.0", good.libtorch_version, good.libtorch_cpu_sha256),
            observed(good.tch_version, "2.12.0", good.libtorch_cpu_sha256),
            observed(good.tch_version, good.libtorch_version, &other),
        ] {
            let error = check_runtime(&bad, &REGISTERED_PAIRS).expect_err("refused");
            assert!(error.to_string().contains("refusing to run"), "{error}");
        }
    }

    #[test]
    fn linked_tch_version_matches_the_lock() {
        let lock = include_str!("../../../Cargo.lock");
        let expected = format!("name = \"tch\"\nversion = \"{TCH_VERSION}\"");
        assert!(
            lock.contains(&expected),
            "Cargo.lock does not pin tch {TCH_VERSION}"
        );
    }

    #[test]
    fn maps_parsing_finds_one_library() {
        let maps = "7f00-7f01 r--p 00000000 fd:00 1 /x/lib/libtorch_cpu.so\n\
                    7f01-7f02 r-xp 00001000 fd:00 1 /x/lib/libtorch_cpu.so\n\
                    7f02-7f03 r--p 00000000 fd:00 2 /x/lib/libc10.so\n";
        assert_eq!(
            mapped_library(maps).expect("found"),
            PathBuf::from("/x/lib/libtorch_cpu.so")
        );
        assert!(matches!(
            mapped_library("7f02-7f03 r--p 00000000 fd:00 2 /x/lib/libc10.so\n"),
            Err(ProvenanceError::NotMapped)
        ));
        let twice = format!("{maps}7f04-7f05 r--p 0 fd:00 3 /y/lib/libtorch_cpu.so\n");
        assert!(matches!(
            mapped_library(&twice),
            Err(ProvenanceError::MappedTwice)
        ));
    }
}
