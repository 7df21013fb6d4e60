//! Runtime sources and lock files from a commit's tree (through [`crate::git`]): never from
//! working-tree bytes.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use shardlift::core::digest::Digest;

use super::error::ReleaseError;
use super::pins::{lock_matches, rule_selects};
use crate::git::{GitError, HeadIds, Repo};
use crate::intoto::ResourceDescriptor;

impl From<GitError> for ReleaseError {
    fn from(error: GitError) -> Self {
        match error {
            GitError::NotInTree { path } => ReleaseError::NotInTree { path },
            GitError::Open { message, .. } | GitError::Git(message) => ReleaseError::Git(message),
            other => ReleaseError::Git(other.to_string()),
        }
    }
}

/// A commit's tree, opened for reading: HEAD's ([`CommitTree::head`]) or a recorded
/// commit's ([`CommitTree::at`]).
pub struct CommitTree {
    repository: Repo,
    /// The commit id.
    pub commit: String,
    /// Its tree id.
    pub tree: String,
}

impl CommitTree {
    /// Opens `repository` and resolves HEAD to its commit and tree.
    pub fn head(repository: &Path) -> Result<Self, ReleaseError> {
        let repository = Repo::open(repository)?;
        let HeadIds { commit, tree } = repository.head_ids()?;
        Ok(CommitTree {
            repository,
            commit,
            tree,
        })
    }

    /// Opens `repository` at `commit`, which must be in it.
    pub fn at(repository: &Path, commit: &str) -> Result<Self, ReleaseError> {
        let opened = Repo::open(repository)?;
        let tree = opened.find_commit_tree(commit)?.ok_or_else(|| {
            ReleaseError::CommitNotInRepository {
                commit: commit.to_owned(),
                repository: repository.to_owned(),
            }
        })?;
        Ok(CommitTree {
            repository: opened,
            commit: commit.to_owned(),
            tree,
        })
    }

    /// The opened repository.
    pub fn repository(&self) -> &Repo {
        &self.repository
    }

    /// Blob ids of every blob in the tree selected by `rule`, by path.
    pub fn blobs(&self, rule: &[String]) -> Result<BTreeMap<String, String>, ReleaseError> {
        Ok(self
            .repository
            .selected_blobs(&self.tree, |path| rule_selects(rule, path))?)
    }

    /// The blob id and bytes of `path` in the tree.
    pub fn read(&self, path: &str) -> Result<(String, Vec<u8>), ReleaseError> {
        Ok(self.repository.read_blob(&self.tree, path)?)
    }
}

/// The inputs release evidence binds from a commit's tree: the runtime sources selected by
/// the rule (blob ids) and the two lock files (blob id and SHA-256 of their bytes).
/// `release-evidence` reads them at HEAD; `verify-release --repository` reads them again
/// at the recorded commit and compares.
pub struct SourceInputs {
    /// The runtime-source rule: folder prefixes (ending in `/`) and exact paths.
    pub rule: Vec<String>,
    /// Path → blob id of every blob the rule selects.
    pub runtime: BTreeMap<String, String>,
    /// `Cargo.lock`: its blob id and the SHA-256 of its bytes.
    pub cargo_lock: (String, Digest),
    /// `ci/libtorch.lock`: its blob id and the SHA-256 of its bytes.
    pub libtorch_lock: (String, Digest),
}

impl SourceInputs {
    /// Reads the inputs from `tree` under `rule`; `ci/libtorch.lock` must lock the pins.
    pub fn read(tree: &CommitTree, rule: Vec<String>) -> Result<Self, ReleaseError> {
        let runtime = tree.blobs(&rule)?;
        let (cargo_blob, cargo_bytes) = tree.read("Cargo.lock")?;
        let (lock_blob, lock_bytes) = tree.read("ci/libtorch.lock")?;
        let lock_text = String::from_utf8(lock_bytes.clone())
            .map_err(|_| ReleaseError::LockMismatch("it is not UTF-8".into()))?;
        lock_matches(&lock_text).map_err(ReleaseError::LockMismatch)?;
        Ok(SourceInputs {
            rule,
            runtime,
            cargo_lock: (cargo_blob, Digest::of(&cargo_bytes)),
            libtorch_lock: (lock_blob, Digest::of(&lock_bytes)),
        })
    }

    /// The Statement's resolved dependency for each runtime source: its blob id, and for
    /// the two lock files also their SHA-256.
    pub fn descriptors(&self) -> impl Iterator<Item = ResourceDescriptor> + '_ {
        self.runtime.iter().map(|(path, blob)| {
            let mut digest = vec![("gitBlob", blob.clone())];
            if path == "Cargo.lock" {
                digest.push(("sha256", self.cargo_lock.1.to_hex()));
            } else if path == "ci/libtorch.lock" {
                digest.push(("sha256", self.libtorch_lock.1.to_hex()));
            }
            ResourceDescriptor::named(path.clone(), &digest)
                .annotate("runtimeSource", serde_json::json!(true))
        })
    }
}

/// How the runtime sources of a commit differ from those recorded in evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Staleness {
    /// The commit the evidence records.
    pub recorded_commit: String,
    /// The commit compared (HEAD).
    pub current_commit: String,
    /// Whether any runtime source was changed, added or removed.
    pub stale: bool,
    /// Recorded and present with another blob id.
    pub changed: Vec<String>,
    /// Present now, selected by the recorded rule, not recorded.
    pub added: Vec<String>,
    /// Recorded, no longer present.
    pub removed: Vec<String>,
}

/// Compares `recorded` (path → blob id) with `current` under the same rule.
pub fn compare(
    recorded_commit: &str,
    recorded: &BTreeMap<String, String>,
    current_commit: &str,
    current: &BTreeMap<String, String>,
) -> Staleness {
    let mut staleness = Staleness {
        recorded_commit: recorded_commit.to_owned(),
        current_commit: current_commit.to_owned(),
        ..Staleness::default()
    };
    for (path, blob) in recorded {
        match current.get(path) {
            Some(now) if now == blob => {}
            Some(_) => staleness.changed.push(path.clone()),
            None => staleness.removed.push(path.clone()),
        }
    }
    for path in current.keys() {
        if !recorded.contains_key(path) {
            staleness.added.push(path.clone());
        }
    }
    staleness.stale = !(staleness.changed.is_empty()
        && staleness.added.is_empty()
        && staleness.removed.is_empty());
    staleness
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_names_changed_added_and_removed() {
        let recorded: BTreeMap<String, String> = [("a", "1"), ("b", "2"), ("c", "3")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let current: BTreeMap<String, String> = [("a", "1"), ("b", "9"), ("d", "4")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let s = compare("x", &recorded, "y", &current);
        assert!(s.stale);
        assert_eq!(s.changed, vec!["b"]);
        assert_eq!(s.added, vec!["d"]);
        assert_eq!(s.removed, vec!["c"]);
        assert!(!compare("x", &recorded, "x", &recorded).stale);
    }
}
