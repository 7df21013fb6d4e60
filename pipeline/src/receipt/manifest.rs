//! The narrow manifest of a shard's scope: the blob ids of its tracked paths at a commit
//! (read through [`crate::git`]) and the content digests of its extra, untracked paths.
use std::collections::BTreeMap;
use std::path::Path;

use shardlift::core::digest::Digest;

use super::schema::{Manifest, Scope};
use crate::git::{GitError, Repo};

/// Why a narrow manifest could not be computed.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// Reading the commit's tree failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// Recording: a scope path is not in the commit's tree.
    #[error("the scope path {path:?} is not in the tree of commit {commit}")]
    PathNotInTree {
        /// The scope path.
        path: String,
        /// The commit.
        commit: String,
    },
    /// A scope path is empty, absolute, ends in `/`, or has an empty, `.` or `..` part
    /// (other than `.` alone, the whole tree).
    #[error("the scope path {0:?} must be relative, without `..` (use `.` for the whole tree)")]
    BadScopePath(String),
    /// An extra path could not be read from the working tree.
    #[error("cannot read the extra path {path}: {message}")]
    ReadExtra {
        /// The extra path, as declared.
        path: String,
        /// The I/O error's message.
        message: String,
    },
}

/// The narrow manifest of `scope` at `commit`. With `strict`, a scope path missing
/// from the tree is an error (recording); otherwise it simply contributes nothing, so
/// a comparison names the files that went away.
pub fn manifest(
    repo: &Repo,
    commit: &str,
    scope: &Scope,
    strict: bool,
) -> Result<Manifest, ManifestError> {
    let tree = repo.commit_tree(commit)?;
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
            repo.walk_tree(&tree, "", &excluded, &mut blobs)?;
            continue;
        }
        let entry = match tree.get_path(Path::new(path)) {
            Ok(entry) => entry,
            Err(_) if !strict => continue,
            Err(_) => {
                return Err(ManifestError::PathNotInTree {
                    path: path.clone(),
                    commit: commit.to_owned(),
                })
            }
        };
        match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                let subtree = repo.find_tree(entry.id())?;
                repo.walk_tree(&subtree, path, &excluded, &mut blobs)?;
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
        digest_extra(repo.workdir()?, path, &excluded, &mut extras)?;
    }
    Ok(Manifest { blobs, extras })
}

fn digest_extra(
    workdir: &Path,
    path: &str,
    excluded: &dyn Fn(&str) -> bool,
    out: &mut BTreeMap<String, Option<Digest>>,
) -> Result<(), ManifestError> {
    if excluded(path) {
        return Ok(());
    }
    let full = if path == "." {
        workdir.to_owned()
    } else {
        workdir.join(path)
    };
    let read_error = |e: std::io::Error| ManifestError::ReadExtra {
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
                digest_extra(workdir, &child, excluded, out)?;
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

/// Whether `path` is `prefix` or lies under it.
fn under(path: &str, prefix: &str) -> bool {
    prefix == "."
        || path == prefix
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('/'))
}

fn check_scope_path(path: &str) -> Result<(), ManifestError> {
    let bad = path.is_empty()
        || path.starts_with('/')
        || path.ends_with('/')
        || (path != "." && path.split('/').any(|part| matches!(part, "" | "." | "..")));
    if bad {
        return Err(ManifestError::BadScopePath(path.to_owned()));
    }
    Ok(())
}
