//! Binding a run to a source revision: a clean git checkout at an exact commit (git2).
use std::path::{Path, PathBuf};

/// Why a checkout is not usable as a run's source binding.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The expected revision is not a full 40-digit lowercase hex commit id.
    #[error("{0:?} is not a full 40-digit lowercase hex commit id")]
    InvalidRevision(String),
    /// The path is not a git repository git2 can open.
    #[error("cannot open the git repository at {path}: {message}")]
    Open {
        /// The repository path given.
        path: PathBuf,
        /// git2's message.
        message: String,
    },
    /// Reading HEAD or the working tree's status failed; git2's message.
    #[error("git: {0}")]
    Git(String),
    /// HEAD is another commit than the expected revision.
    #[error("HEAD is {actual}, not the expected revision {expected}")]
    RevisionMismatch {
        /// The revision required.
        expected: String,
        /// HEAD's commit id.
        actual: String,
    },
    /// The working tree has modified, staged or untracked files.
    #[error("the checkout is not clean; refusing to bind evidence to it: {}", .files.join(", "))]
    Dirty {
        /// Their paths, relative to the working tree, sorted.
        files: Vec<String>,
    },
}

/// A verified clean checkout.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct SourceBinding {
    /// HEAD's commit id (40 hex digits).
    pub commit: String,
    /// The id of that commit's tree.
    pub tree: String,
    /// Ignored files present in the working tree (allowed; listed for the record).
    pub ignored: Vec<String>,
}

fn git(error: git2::Error) -> SourceError {
    SourceError::Git(error.message().to_owned())
}

/// Whether `text` is a full lowercase SHA-1 commit id.
pub fn is_full_revision(text: &str) -> bool {
    text.len() == 40
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Opens `repository`, requires HEAD to be exactly `expected_revision` (when given) and
/// the working tree to have no modified, staged or untracked files.
pub fn check_clean_checkout(
    repository: &Path,
    expected_revision: Option<&str>,
) -> Result<SourceBinding, SourceError> {
    if let Some(expected) = expected_revision {
        if !is_full_revision(expected) {
            return Err(SourceError::InvalidRevision(expected.to_owned()));
        }
    }
    let repo = git2::Repository::open(repository).map_err(|e| SourceError::Open {
        path: repository.to_owned(),
        message: e.message().to_owned(),
    })?;
    let commit = repo
        .head()
        .and_then(|head| head.peel_to_commit())
        .map_err(git)?;
    let actual = commit.id().to_string();
    if let Some(expected) = expected_revision {
        if actual != expected {
            return Err(SourceError::RevisionMismatch {
                expected: expected.to_owned(),
                actual,
            });
        }
    }
    let mut options = git2::StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(true)
        .exclude_submodules(false);
    let statuses = repo.statuses(Some(&mut options)).map_err(git)?;
    let mut dirty = Vec::new();
    let mut ignored = Vec::new();
    for entry in statuses.iter() {
        let path = entry.path().unwrap_or("<non-UTF-8 path>").to_owned();
        let status = entry.status();
        if status == git2::Status::IGNORED {
            ignored.push(path);
        } else if status != git2::Status::CURRENT {
            dirty.push(path);
        }
    }
    if !dirty.is_empty() {
        dirty.sort();
        return Err(SourceError::Dirty { files: dirty });
    }
    ignored.sort();
    Ok(SourceBinding {
        commit: actual,
        tree: commit.tree_id().to_string(),
        ignored,
    })
}
