//! Runtime sources from a commit's tree (through [`crate::git`]): never from working-tree
//! bytes.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::error::ReleaseError;
use super::pins::rule_selects;
use crate::git::{GitError, HeadIds, Repo};

impl From<GitError> for ReleaseError {
    fn from(error: GitError) -> Self {
        match error {
            GitError::NotInTree { path } => ReleaseError::NotInTree { path },
            GitError::Open { message, .. } | GitError::Git(message) => ReleaseError::Git(message),
            other => ReleaseError::Git(other.to_string()),
        }
    }
}

/// HEAD's commit and tree, opened for reading.
pub struct HeadTree {
    repository: Repo,
    pub commit: String,
    pub tree: String,
}

impl HeadTree {
    /// Opens `repository` and resolves HEAD to its commit and tree.
    pub fn open(repository: &Path) -> Result<Self, ReleaseError> {
        let repository = Repo::open(repository)?;
        let HeadIds { commit, tree } = repository.head_ids()?;
        Ok(HeadTree {
            repository,
            commit,
            tree,
        })
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

/// How the runtime sources of a commit differ from those recorded in evidence.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Staleness {
    pub recorded_commit: String,
    pub current_commit: String,
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
