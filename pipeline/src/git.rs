//! The one git2 wrapper of the pipeline, shared by release evidence and receipts: open a
//! repository, resolve HEAD (and the working tree's cleanliness), ancestry, and read
//! commit trees (walk them, select blobs, read one blob). Everything is read from git
//! objects, never from working-tree bytes.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Why a git operation of the pipeline failed.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// No repository could be opened, discovered or cloned at the path.
    #[error("cannot open the git repository at {path}: {message}")]
    Open {
        /// The path given (the source, for a clone).
        path: PathBuf,
        /// git2's message.
        message: String,
    },
    /// The repository has no working tree, and the operation needs one.
    #[error("the repository at {0} has no working tree")]
    Bare(PathBuf),
    /// Any other git2 failure; its message.
    #[error("git: {0}")]
    Git(String),
    /// The text is not a hexadecimal commit id.
    #[error("{0:?} is not a valid commit id")]
    BadCommit(String),
    /// The path names no blob in the tree read.
    #[error("{path} is not in the tree")]
    NotInTree {
        /// The `/`-separated path asked for.
        path: String,
    },
}

fn git(error: git2::Error) -> GitError {
    GitError::Git(error.message().to_owned())
}

/// An opened repository.
pub struct Repo {
    repo: git2::Repository,
    /// Where the repository was asked for (named by [`GitError::Bare`]).
    path: PathBuf,
}

/// HEAD's commit and tree ids.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeadIds {
    /// The commit id (40 hex digits).
    pub commit: String,
    /// Its tree id.
    pub tree: String,
}

/// HEAD and the state of the working tree.
pub struct HeadState {
    /// HEAD's commit id (40 hex digits).
    pub commit: String,
    /// Its tree id.
    pub tree: String,
    /// Modified, staged or untracked files (ignored files do not count).
    pub dirty_files: Vec<String>,
}

impl Repo {
    /// Clones the local repository `source` into `into` (which must not exist) and checks
    /// out `commit` there, detached: a clean checkout of exactly that commit that leaves
    /// `source` and its working tree untouched.
    pub fn clone_at(source: &Path, into: &Path, commit: &str) -> Result<Repo, GitError> {
        let oid =
            git2::Oid::from_str(commit).map_err(|_| GitError::BadCommit(commit.to_owned()))?;
        let url = source.to_str().ok_or_else(|| GitError::Open {
            path: source.to_owned(),
            message: "the path is not UTF-8".into(),
        })?;
        let repo = git2::build::RepoBuilder::new()
            .clone(url, into)
            .map_err(|e| GitError::Open {
                path: source.to_owned(),
                message: e.message().to_owned(),
            })?;
        {
            let target = repo.find_commit(oid).map_err(git)?;
            let mut checkout = git2::build::CheckoutBuilder::new();
            checkout.force();
            repo.checkout_tree(target.as_object(), Some(&mut checkout))
                .map_err(git)?;
            repo.set_head_detached(oid).map_err(git)?;
        }
        Ok(Repo {
            repo,
            path: into.to_owned(),
        })
    }

    /// The repository containing `path` (any folder inside the working tree will do).
    pub fn discover(path: &Path) -> Result<Repo, GitError> {
        let repo = git2::Repository::discover(path).map_err(|e| GitError::Open {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        let repo = Repo {
            repo,
            path: path.to_owned(),
        };
        // Receipts digest working-tree files, so a bare repository is refused up front.
        repo.workdir()?;
        Ok(repo)
    }

    /// The repository at exactly `path` (release evidence binds this checkout, not one
    /// that happens to contain it).
    pub fn open(path: &Path) -> Result<Repo, GitError> {
        let repo = git2::Repository::open(path).map_err(|e| GitError::Open {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        Ok(Repo {
            repo,
            path: path.to_owned(),
        })
    }

    /// The root of the working tree.
    pub fn workdir(&self) -> Result<&Path, GitError> {
        self.repo
            .workdir()
            .ok_or_else(|| GitError::Bare(self.path.clone()))
    }

    /// HEAD's commit and tree ids.
    pub fn head_ids(&self) -> Result<HeadIds, GitError> {
        let commit = self
            .repo
            .head()
            .and_then(|head| head.peel_to_commit())
            .map_err(git)?;
        Ok(HeadIds {
            commit: commit.id().to_string(),
            tree: commit.tree_id().to_string(),
        })
    }

    /// HEAD and the files that make the working tree differ from it.
    pub fn head(&self) -> Result<HeadState, GitError> {
        let HeadIds { commit, tree } = self.head_ids()?;
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
            commit,
            tree,
            dirty_files,
        })
    }

    /// Whether `ancestor` is `commit` or one of its ancestors. An unknown commit is not.
    pub fn is_same_or_ancestor(&self, ancestor: &str, commit: &str) -> Result<bool, GitError> {
        let ancestor = parse_commit(ancestor)?;
        let commit = parse_commit(commit)?;
        if ancestor == commit {
            return Ok(true);
        }
        if self.repo.find_commit(ancestor).is_err() {
            return Ok(false);
        }
        self.repo.graph_descendant_of(commit, ancestor).map_err(git)
    }

    /// The tree id of `commit`, or `None` when the repository has no such commit.
    pub fn find_commit_tree(&self, commit: &str) -> Result<Option<String>, GitError> {
        let oid = parse_commit(commit)?;
        match self.repo.find_commit(oid) {
            Ok(found) => Ok(Some(found.tree_id().to_string())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(git(e)),
        }
    }

    /// The tree of `commit`.
    pub fn commit_tree(&self, commit: &str) -> Result<git2::Tree<'_>, GitError> {
        let oid = parse_commit(commit)?;
        self.repo
            .find_commit(oid)
            .and_then(|c| c.tree())
            .map_err(git)
    }

    /// The committer time of `commit`, in seconds since the epoch (0 if before it).
    pub fn commit_time(&self, commit: &str) -> Result<u64, GitError> {
        let oid = parse_commit(commit)?;
        let found = self.repo.find_commit(oid).map_err(git)?;
        Ok(u64::try_from(found.time().seconds()).unwrap_or(0))
    }

    /// The bytes of the blob `oid`.
    pub fn blob(&self, oid: git2::Oid) -> Result<Vec<u8>, GitError> {
        let blob = self.repo.find_blob(oid).map_err(git)?;
        Ok(blob.content().to_vec())
    }

    /// The tree with id `tree`.
    pub fn tree(&self, tree: &str) -> Result<git2::Tree<'_>, GitError> {
        let oid = git2::Oid::from_str(tree).map_err(git)?;
        self.find_tree(oid)
    }

    /// The tree with id `oid`.
    pub fn find_tree(&self, oid: git2::Oid) -> Result<git2::Tree<'_>, GitError> {
        self.repo.find_tree(oid).map_err(git)
    }

    /// Every entry below `tree` not `excluded`, by `/`-separated path under `prefix`:
    /// blob ids, and `commit:<id>` for submodules. Non-UTF-8 names are taken lossily.
    pub fn walk_tree(
        &self,
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
                    let subtree = self.find_tree(entry.id())?;
                    self.walk_tree(&subtree, &path, excluded, out)?;
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

    /// Blob ids of every blob in tree `tree` whose path `select` accepts, by path. A
    /// non-UTF-8 name is an error (it could not be named in evidence).
    pub fn selected_blobs(
        &self,
        tree: &str,
        select: impl Fn(&str) -> bool,
    ) -> Result<BTreeMap<String, String>, GitError> {
        let tree = self.tree(tree)?;
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
            if select(&path) {
                blobs.insert(path, entry.id().to_string());
            }
            git2::TreeWalkResult::Ok
        })
        .map_err(|e| bad_name.clone().map_or_else(|| git(e), GitError::Git))?;
        if let Some(name) = bad_name {
            return Err(GitError::Git(format!(
                "a tree entry has a non-UTF-8 name: {name}"
            )));
        }
        Ok(blobs)
    }

    /// The blob id and bytes of `path` in tree `tree`.
    pub fn read_blob(&self, tree: &str, path: &str) -> Result<(String, Vec<u8>), GitError> {
        let tree = self.tree(tree)?;
        let not_in_tree = |_| GitError::NotInTree {
            path: path.to_owned(),
        };
        let entry = tree.get_path(Path::new(path)).map_err(not_in_tree)?;
        let blob = self.repo.find_blob(entry.id()).map_err(not_in_tree)?;
        Ok((entry.id().to_string(), blob.content().to_vec()))
    }
}

fn parse_commit(commit: &str) -> Result<git2::Oid, GitError> {
    git2::Oid::from_str(commit).map_err(|_| GitError::BadCommit(commit.to_owned()))
}
