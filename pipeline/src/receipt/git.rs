//! What receipts need from git (git2): HEAD, the tracked tree's fingerprint, cleanliness,
//! ancestry, and the narrow manifest of a shard's scope.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shardlift::core::digest::Digest;

use super::schema::{Manifest, Scope};

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("cannot open the git repository at {path}: {message}")]
    Open { path: PathBuf, message: String },
    #[error("the repository at {0} has no working tree")]
    Bare(PathBuf),
    #[error("git: {0}")]
    Git(String),
    #[error("{0:?} is not a valid commit id")]
    BadCommit(String),
    #[error("the scope path {path:?} is not in the tree of commit {commit}")]
    PathNotInTree { path: String, commit: String },
    #[error("the scope path {0:?} must be relative, without `..` (use `.` for the whole tree)")]
    BadScopePath(String),
    #[error("cannot read the extra path {path}: {message}")]
    ReadExtra { path: String, message: String },
}

fn git(error: git2::Error) -> GitError {
    GitError::Git(error.message().to_owned())
}

pub struct Repo {
    repo: git2::Repository,
    workdir: PathBuf,
}

/// HEAD and the state of the working tree.
pub struct HeadState {
    pub commit: String,
    pub tree: String,
    /// Modified, staged or untracked files (ignored files do not count).
    pub dirty_files: Vec<String>,
}

impl Repo {
    pub fn open(path: &Path) -> Result<Repo, GitError> {
        let repo = git2::Repository::discover(path).map_err(|e| GitError::Open {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        let workdir = repo
            .workdir()
            .ok_or_else(|| GitError::Bare(path.to_owned()))?
            .to_owned();
        Ok(Repo { repo, workdir })
    }

    pub fn head(&self) -> Result<HeadState, GitError> {
        let commit = self
            .repo
            .head()
            .and_then(|head| head.peel_to_commit())
            .map_err(git)?;
        let mut options = git2::StatusOptions::new();
        options
            .include_untracked(true)
            .recurse_untracked_dirs(true)
            .include_ignored(false)
            .exclude_submodules(false);
        let statuses = self.repo.statuses(Some(&mut options)).map_err(git)?;
        let mut dirty_files: Vec<String> = statuses
            .iter()
            .filter(|entry| entry.status() != git2::Status::CURRENT)
            .map(|entry| entry.path().unwrap_or("<non-UTF-8 path>").to_owned())
            .collect();
        dirty_files.sort();
        Ok(HeadState {
            commit: commit.id().to_string(),
            tree: commit.tree_id().to_string(),
            dirty_files,
        })
    }

    /// Whether `ancestor` is `commit` or one of its ancestors. An unknown commit is not.
    pub fn is_same_or_ancestor(&self, ancestor: &str, commit: &str) -> Result<bool, GitError> {
        let ancestor =
            git2::Oid::from_str(ancestor).map_err(|_| GitError::BadCommit(ancestor.to_owned()))?;
        let commit =
            git2::Oid::from_str(commit).map_err(|_| GitError::BadCommit(commit.to_owned()))?;
        if ancestor == commit {
            return Ok(true);
        }
        if self.repo.find_commit(ancestor).is_err() {
            return Ok(false);
        }
        self.repo.graph_descendant_of(commit, ancestor).map_err(git)
    }

    /// The narrow manifest of `scope` at `commit`. With `strict`, a scope path missing
    /// from the tree is an error (recording); otherwise it simply contributes nothing, so
    /// a comparison names the files that went away.
    pub fn manifest(
        &self,
        commit: &str,
        scope: &Scope,
        strict: bool,
    ) -> Result<Manifest, GitError> {
        let oid =
            git2::Oid::from_str(commit).map_err(|_| GitError::BadCommit(commit.to_owned()))?;
        let tree = self
            .repo
            .find_commit(oid)
            .and_then(|c| c.tree())
            .map_err(git)?;
        for path in scope
            .paths
            .iter()
            .chain(&scope.extra_paths)
            .chain(&scope.excluded_paths)
        {
            check_scope_path(path)?;
        }
        let excluded = |path: &str| scope.excluded_paths.iter().any(|ex| under(path, ex));
        let mut blobs = BTreeMap::new();
        for path in &scope.paths {
            if path == "." {
                walk_tree(&self.repo, &tree, "", &excluded, &mut blobs)?;
                continue;
            }
            let entry = match tree.get_path(Path::new(path)) {
                Ok(entry) => entry,
                Err(_) if !strict => continue,
                Err(_) => {
                    return Err(GitError::PathNotInTree {
                        path: path.clone(),
                        commit: commit.to_owned(),
                    })
                }
            };
            match entry.kind() {
                Some(git2::ObjectType::Tree) => {
                    let subtree = self.repo.find_tree(entry.id()).map_err(git)?;
                    walk_tree(&self.repo, &subtree, path, &excluded, &mut blobs)?;
                }
                Some(git2::ObjectType::Commit) if !excluded(path) => {
                    blobs.insert(path.clone(), format!("commit:{}", entry.id()));
                }
                _ if !excluded(path) => {
                    blobs.insert(path.clone(), entry.id().to_string());
                }
                _ => {}
            }
        }
        let mut extras = BTreeMap::new();
        for path in &scope.extra_paths {
            self.digest_extra(path, &excluded, &mut extras)?;
        }
        Ok(Manifest { blobs, extras })
    }

    fn digest_extra(
        &self,
        path: &str,
        excluded: &dyn Fn(&str) -> bool,
        out: &mut BTreeMap<String, Option<Digest>>,
    ) -> Result<(), GitError> {
        if excluded(path) {
            return Ok(());
        }
        let full = if path == "." {
            self.workdir.clone()
        } else {
            self.workdir.join(path)
        };
        let read_error = |e: std::io::Error| GitError::ReadExtra {
            path: path.to_owned(),
            message: e.to_string(),
        };
        match std::fs::symlink_metadata(&full) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.insert(path.to_owned(), None);
            }
            Err(e) => return Err(read_error(e)),
            Ok(meta) if meta.is_dir() => {
                let mut names: Vec<String> = std::fs::read_dir(&full)
                    .map_err(read_error)?
                    .map(|entry| entry.map(|e| e.file_name().to_string_lossy().into_owned()))
                    .collect::<Result<_, _>>()
                    .map_err(read_error)?;
                names.sort();
                for name in names {
                    let child = if path == "." {
                        name
                    } else {
                        format!("{path}/{name}")
                    };
                    self.digest_extra(&child, excluded, out)?;
                }
            }
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&full).map_err(read_error)?;
                let text = target.to_string_lossy();
                out.insert(path.to_owned(), Some(Digest::of(text.as_bytes())));
            }
            Ok(_) => {
                let bytes = std::fs::read(&full).map_err(read_error)?;
                out.insert(path.to_owned(), Some(Digest::of(&bytes)));
            }
        }
        Ok(())
    }
}

fn walk_tree(
    repo: &git2::Repository,
    tree: &git2::Tree<'_>,
    prefix: &str,
    excluded: &dyn Fn(&str) -> bool,
    out: &mut BTreeMap<String, String>,
) -> Result<(), GitError> {
    for entry in tree.iter() {
        let name = String::from_utf8_lossy(entry.name_bytes()).into_owned();
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if excluded(&path) {
            continue;
        }
        match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                let subtree = repo.find_tree(entry.id()).map_err(git)?;
                walk_tree(repo, &subtree, &path, excluded, out)?;
            }
            Some(git2::ObjectType::Commit) => {
                out.insert(path, format!("commit:{}", entry.id()));
            }
            _ => {
                out.insert(path, entry.id().to_string());
            }
        }
    }
    Ok(())
}

/// Whether `path` is `prefix` or lies under it.
fn under(path: &str, prefix: &str) -> bool {
    prefix == "."
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn check_scope_path(path: &str) -> Result<(), GitError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.ends_with('/')
        || (path != "." && path.split('/').any(|part| matches!(part, "" | "." | "..")));
    if bad {
        return Err(GitError::BadScopePath(path.to_owned()));
    }
    Ok(())
}
