//! Runtime sources from a commit's tree (git2): never from working-tree bytes.
use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::error::ReleaseError;
use super::pins::rule_selects;

fn git(error: git2::Error) -> ReleaseError {
    ReleaseError::Git(error.message().to_owned())
}

/// A commit's tree, opened for reading.
pub struct HeadTree {
    repository: git2::Repository,
    pub commit: String,
    pub tree: String,
}

impl HeadTree {
    /// Opens `repository` and resolves HEAD to its commit and tree.
    pub fn open(repository: &Path) -> Result<Self, ReleaseError> {
        let repo = git2::Repository::open(repository).map_err(git)?;
        let (commit, tree) = {
            let commit = repo
                .head()
                .and_then(|head| head.peel_to_commit())
                .map_err(git)?;
            (commit.id().to_string(), commit.tree_id().to_string())
        };
        Ok(HeadTree {
            repository: repo,
            commit,
            tree,
        })
    }

    fn tree(&self) -> Result<git2::Tree<'_>, ReleaseError> {
        let oid = git2::Oid::from_str(&self.tree).map_err(git)?;
        self.repository.find_tree(oid).map_err(git)
    }

    /// Blob ids of every blob in the tree selected by `rule`, by path.
    pub fn blobs(&self, rule: &[String]) -> Result<BTreeMap<String, String>, ReleaseError> {
        let tree = self.tree()?;
        let mut blobs = BTreeMap::new();
        let mut bad_name = None;
        tree.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
            if entry.kind() != Some(git2::ObjectType::Blob) {
                return git2::TreeWalkResult::Ok;
            }
            let Some(name) = entry.name() else {
                bad_name = Some(format!("{parent}<non-UTF-8 name>"));
                return git2::TreeWalkResult::Abort;
            };
            let path = format!("{parent}{name}");
            if rule_selects(rule, &path) {
                blobs.insert(path, entry.id().to_string());
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(|e| bad_name.clone().map_or_else(|| git(e), ReleaseError::Git))?;
        if let Some(name) = bad_name {
            return Err(ReleaseError::Git(format!(
                "a tree entry has a non-UTF-8 name: {name}"
            )));
        }
        Ok(blobs)
    }

    /// The blob id and bytes of `path` in the tree.
    pub fn read(&self, path: &str) -> Result<(String, Vec<u8>), ReleaseError> {
        let tree = self.tree()?;
        let entry = tree
            .get_path(Path::new(path))
            .map_err(|_| ReleaseError::NotInTree {
                path: path.to_owned(),
            })?;
        let blob = self
            .repository
            .find_blob(entry.id())
            .map_err(|_| ReleaseError::NotInTree {
                path: path.to_owned(),
            })?;
        Ok((entry.id().to_string(), blob.content().to_vec()))
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
