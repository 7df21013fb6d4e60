//! `release-assets`: the downloadable assets of a release, reproducible from one commit.
//!
//! Into an empty (or new) directory it writes:
//!
//! - `shardlift-<commit12>-source.tar.gz`: the commit's tree under `shardlift-<commit12>/`,
//!   entries in `git archive` order (the tree walked depth first, a directory before its
//!   contents, names in git's tree order), read from git objects, never from the working
//!   tree;
//! - `shardlift-<commit12>-evidence-<dir>.tar.gz` (with `--evidence evidence/<dir>`): that
//!   directory of the same commit's tree, under `evidence/<dir>/`;
//! - `shardlift-<commit12>-<arch>-linux.tar.gz` (with `--binaries`): the `shardlift` and
//!   `pipeline` release binaries under `shardlift-<commit12>/bin/`;
//! - `SHA256SUMS` (GNU format, `sha256sum -c --strict` checks it) and, with a key,
//!   `SHA256SUMS.sig` (SSHSIG, namespace [`SIGNATURE_NAMESPACE`]).
//!
//! Every tarball is ustar/GNU tar written by the `tar` crate with fixed metadata — mtime
//! the commit's committer time, uid/gid 0 (`root`), mode 0644 (0755 for executables and
//! directories) — and gzip written by `flate2` with no name, mtime 0 and a fixed level,
//! so two runs on one commit (and the same binaries) give identical bytes. Every file is
//! written through the durable writer, never replaced.
use std::path::{Path, PathBuf};

use shardlift::core::digest::Digest;
use shardlift::durable;

use crate::git::{GitError, Repo};
use crate::release::sums;

/// The SSHSIG namespace of `SHA256SUMS.sig`.
pub const SIGNATURE_NAMESPACE: &str = "shardlift-release-assets-v1";

/// The two release binaries, by file name.
pub const BINARY_NAMES: [&str; 2] = ["pipeline", "shardlift"];

/// Why the release assets were not written.
#[derive(Debug, thiserror::Error)]
pub enum AssetsError {
    /// Reading the repository failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// The working tree has changed or untracked files.
    #[error("the checkout is not clean ({count} changed or untracked files, first {first}); commit or stash them")]
    Dirty {
        /// How many.
        count: usize,
        /// The first, in path order.
        first: String,
    },
    /// The commit asked for is not in the repository.
    #[error("commit {0} is not in the repository")]
    UnknownCommit(String),
    /// The evidence path is not a directory in the commit's tree.
    #[error("{path} is not a directory in the tree of commit {commit}")]
    MissingEvidence {
        /// The evidence path, `evidence/<dir>`.
        path: String,
        /// The commit.
        commit: String,
    },
    /// `--evidence` does not name `evidence/<dir>`.
    #[error("--evidence must name a directory evidence/<dir>, not {0:?}")]
    BadEvidencePath(String),
    /// The output directory exists and is not empty.
    #[error("the output directory {0} exists and is not empty")]
    OutNotEmpty(PathBuf),
    /// `--binaries` does not name exactly `pipeline` and `shardlift`; the names given.
    #[error("--binaries must name exactly the files `pipeline` and `shardlift`, got {0:?}")]
    BadBinaries(Vec<String>),
    /// A binary or the output directory could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error's message.
        message: String,
    },
    /// A tree entry (or symlink target) is not UTF-8, so it cannot be named in the tarball.
    #[error("{path}: a tree entry has a non-UTF-8 name")]
    BadName {
        /// The path of the entry's parent (or of the symlink).
        path: String,
    },
    /// Writing a tarball failed; the tar or gzip writer's message.
    #[error("cannot write the tarball: {0}")]
    Tar(String),
    /// Writing an asset durably failed.
    #[error(transparent)]
    Durable(#[from] durable::DurableError),
    /// Signing `SHA256SUMS` failed.
    #[error(transparent)]
    Sign(#[from] crate::sshsig::SshSigError),
}

/// What `release-assets` is asked to write.
pub struct AssetsOptions {
    /// A path inside the clean checkout.
    pub repository: PathBuf,
    /// The commit (default: HEAD).
    pub commit: Option<String>,
    /// The output directory: new, or empty.
    pub out: PathBuf,
    /// `evidence/<dir>` in the commit's tree.
    pub evidence: Option<String>,
    /// The `shardlift` and `pipeline` binaries.
    pub binaries: Vec<PathBuf>,
    /// The OpenSSH private key to sign `SHA256SUMS` with, if any.
    pub sign_key: Option<PathBuf>,
}

/// What was written: the commit and every file with its digest (`SHA256SUMS` order).
#[derive(Debug)]
pub struct Assets {
    /// The commit the assets are of.
    pub commit: String,
    /// Every tarball written, by name, with its SHA-256 (what `SHA256SUMS` lists).
    pub files: Vec<(String, Digest)>,
    /// Whether `SHA256SUMS.sig` was written.
    pub signed: bool,
}

/// Writes the release assets of a clean checkout's commit.
pub fn release_assets(options: &AssetsOptions) -> Result<Assets, AssetsError> {
    let repo = Repo::discover(&options.repository)?;
    let head = repo.head()?;
    if let Some(first) = head.dirty_files.first() {
        return Err(AssetsError::Dirty {
            count: head.dirty_files.len(),
            first: first.clone(),
        });
    }
    let commit = match &options.commit {
        None => head.commit.clone(),
        Some(commit) => {
            if repo.find_commit_tree(commit)?.is_none() {
                return Err(AssetsError::UnknownCommit(commit.clone()));
            }
            commit.clone()
        }
    };
    let evidence = match &options.evidence {
        None => None,
        Some(path) => Some(evidence_dir(path)?),
    };
    let binaries = binaries(&options.binaries)?;
    check_out_dir(&options.out)?;
    let tree = repo.commit_tree(&commit)?;
    let mtime = repo.commit_time(&commit)?;
    let short = &commit[..12.min(commit.len())];

    let mut assets: Vec<(String, Vec<u8>)> = Vec::new();
    let mut source = Tarball::new(mtime);
    repo_entries(&repo, &tree, &format!("shardlift-{short}"), &mut source)?;
    assets.push((format!("shardlift-{short}-source.tar.gz"), source.finish()?));
    if let Some((path, dir)) = &evidence {
        let name = format!("shardlift-{short}-evidence-{dir}.tar.gz");
        assets.push((name, evidence_tarball(&repo, &tree, path, &commit, mtime)?));
    }
    if !binaries.is_empty() {
        let arch = std::env::consts::ARCH;
        let name = format!("shardlift-{short}-{arch}-linux.tar.gz");
        assets.push((name, binaries_tarball(&binaries, short, mtime)?));
    }

    // Everything is computed (and signed) before the first write, so a refusal leaves
    // nothing behind.
    let mut files: Vec<(String, Digest)> = assets
        .iter()
        .map(|(name, bytes)| (name.clone(), Digest::of(bytes)))
        .collect();
    let sums_text = sums::render(&files);
    let signature = match &options.sign_key {
        Some(key) => Some(crate::sshsig::sign(
            key,
            SIGNATURE_NAMESPACE,
            sums_text.as_bytes(),
        )?),
        None => None,
    };
    assets.push(("SHA256SUMS".to_owned(), sums_text.into_bytes()));
    if let Some(armored) = signature {
        assets.push(("SHA256SUMS.sig".to_owned(), armored.into_bytes()));
    }
    durable::ensure_dir_all(&options.out)?;
    for (name, bytes) in &assets {
        durable::write_file(
            &options.out.join(name),
            bytes,
            durable::WriteOptions::IMMUTABLE,
        )?;
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Assets {
        commit,
        files,
        signed: options.sign_key.is_some(),
    })
}

/// The tarball of `path` (`evidence/<dir>`) in `tree`, as `git archive <commit>
/// evidence/<dir>` lists it: `evidence/`, then the tree.
fn evidence_tarball(
    repo: &Repo,
    tree: &git2::Tree<'_>,
    path: &str,
    commit: &str,
    mtime: u64,
) -> Result<Vec<u8>, AssetsError> {
    let subtree = tree
        .get_path(Path::new(path))
        .ok()
        .filter(|entry| entry.kind() == Some(git2::ObjectType::Tree))
        .ok_or_else(|| AssetsError::MissingEvidence {
            path: path.to_owned(),
            commit: commit.to_owned(),
        })?;
    let subtree = repo.find_tree(subtree.id())?;
    let mut tarball = Tarball::new(mtime);
    tarball.directory("evidence")?;
    repo_entries(repo, &subtree, path, &mut tarball)?;
    tarball.finish()
}

/// The tarball of the release `binaries` under `shardlift-<short>/bin/`.
fn binaries_tarball(
    binaries: &[(String, PathBuf)],
    short: &str,
    mtime: u64,
) -> Result<Vec<u8>, AssetsError> {
    let mut tarball = Tarball::new(mtime);
    let prefix = format!("shardlift-{short}/bin");
    tarball.directory(&format!("shardlift-{short}"))?;
    tarball.directory(&prefix)?;
    for (name, path) in binaries {
        let bytes = std::fs::read(path).map_err(|e| AssetsError::Read {
            path: path.clone(),
            message: e.to_string(),
        })?;
        tarball.file(&format!("{prefix}/{name}"), &bytes, true)?;
    }
    tarball.finish()
}

/// `evidence/<dir>` → (the path, `<dir>`).
fn evidence_dir(path: &str) -> Result<(String, String), AssetsError> {
    let path = path.trim_end_matches('/');
    match path.split_once('/') {
        Some(("evidence", dir)) if sums::is_plain_relative_path(dir) && !dir.contains('/') => {
            Ok((path.to_owned(), dir.to_owned()))
        }
        _ => Err(AssetsError::BadEvidencePath(path.to_owned())),
    }
}

/// The binaries by file name, sorted; exactly `pipeline` and `shardlift`, or none.
fn binaries(paths: &[PathBuf]) -> Result<Vec<(String, PathBuf)>, AssetsError> {
    let mut named: Vec<(String, PathBuf)> = paths
        .iter()
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, p.clone())
        })
        .collect();
    named.sort();
    let names: Vec<String> = named.iter().map(|(n, _)| n.clone()).collect();
    if !named.is_empty() && names != BINARY_NAMES {
        return Err(AssetsError::BadBinaries(names));
    }
    Ok(named)
}

/// The output directory must not exist or be empty.
fn check_out_dir(out: &Path) -> Result<(), AssetsError> {
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(AssetsError::OutNotEmpty(out.to_owned()));
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(AssetsError::Read {
            path: out.to_owned(),
            message: e.to_string(),
        }),
    }
}

/// Appends `tree` under `prefix` in `git archive` order: the directory itself, then each
/// entry in tree order, subdirectories recursively; submodules are left out (as `git
/// archive` does).
fn repo_entries(
    repo: &Repo,
    tree: &git2::Tree<'_>,
    prefix: &str,
    tarball: &mut Tarball,
) -> Result<(), AssetsError> {
    tarball.directory(prefix)?;
    for entry in tree.iter() {
        let name = entry.name().ok_or_else(|| AssetsError::BadName {
            path: prefix.to_owned(),
        })?;
        let path = format!("{prefix}/{name}");
        match entry.kind() {
            Some(git2::ObjectType::Tree) => {
                let subtree = repo.find_tree(entry.id())?;
                repo_entries(repo, &subtree, &path, tarball)?;
            }
            Some(git2::ObjectType::Blob) => {
                let bytes = repo.blob(entry.id())?;
                match entry.filemode() {
                    0o120000 => tarball.symlink(&path, &bytes)?,
                    mode => tarball.file(&path, &bytes, mode & 0o111 != 0)?,
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A tar stream with fixed metadata, gzipped when finished.
struct Tarball {
    builder: tar::Builder<Vec<u8>>,
    mtime: u64,
}

impl Tarball {
    fn new(mtime: u64) -> Tarball {
        Tarball {
            builder: tar::Builder::new(Vec::new()),
            mtime,
        }
    }

    fn header(
        &self,
        kind: tar::EntryType,
        mode: u32,
        size: u64,
    ) -> Result<tar::Header, AssetsError> {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(mode);
        header.set_size(size);
        header.set_mtime(self.mtime);
        header.set_uid(0);
        header.set_gid(0);
        header.set_username("root").map_err(tar_error)?;
        header.set_groupname("root").map_err(tar_error)?;
        Ok(header)
    }

    fn directory(&mut self, path: &str) -> Result<(), AssetsError> {
        let mut header = self.header(tar::EntryType::Directory, 0o755, 0)?;
        self.builder
            .append_data(&mut header, format!("{path}/"), std::io::empty())
            .map_err(tar_error)
    }

    fn file(&mut self, path: &str, bytes: &[u8], executable: bool) -> Result<(), AssetsError> {
        let mode = if executable { 0o755 } else { 0o644 };
        let mut header = self.header(tar::EntryType::Regular, mode, bytes.len() as u64)?;
        self.builder
            .append_data(&mut header, path, bytes)
            .map_err(tar_error)
    }

    fn symlink(&mut self, path: &str, target: &[u8]) -> Result<(), AssetsError> {
        let target = std::str::from_utf8(target).map_err(|_| AssetsError::BadName {
            path: path.to_owned(),
        })?;
        let mut header = self.header(tar::EntryType::Symlink, 0o777, 0)?;
        self.builder
            .append_link(&mut header, path, target)
            .map_err(tar_error)
    }

    /// The gzipped archive: no file name, mtime 0, best compression.
    fn finish(self) -> Result<Vec<u8>, AssetsError> {
        let tar = self.builder.into_inner().map_err(tar_error)?;
        let mut gzip = flate2::GzBuilder::new()
            .mtime(0)
            .write(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gzip, &tar).map_err(tar_error)?;
        gzip.finish().map_err(tar_error)
    }
}

fn tar_error(error: std::io::Error) -> AssetsError {
    AssetsError::Tar(error.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evidence_paths_name_one_directory_under_evidence() {
        assert_eq!(
            evidence_dir("evidence/run-1/").expect("ok"),
            ("evidence/run-1".to_owned(), "run-1".to_owned())
        );
        for bad in [
            "evidence",
            "docs/run",
            "evidence/a/b",
            "evidence/..",
            "/evidence/x",
        ] {
            assert!(
                matches!(evidence_dir(bad), Err(AssetsError::BadEvidencePath(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn binaries_are_exactly_the_two_release_binaries() {
        assert!(binaries(&[]).expect("none").is_empty());
        let two = binaries(&["/a/shardlift".into(), "/b/pipeline".into()]).expect("two");
        assert_eq!(two[0].0, "pipeline");
        assert!(matches!(
            binaries(&["/a/shardlift".into()]),
            Err(AssetsError::BadBinaries(_))
        ));
        assert!(matches!(
            binaries(&["/a/shardlift".into(), "/a/cargo".into()]),
            Err(AssetsError::BadBinaries(_))
        ));
    }

    #[test]
    fn gzip_and_tar_are_deterministic_and_readable() {
        let build = || {
            let mut tarball = Tarball::new(1_700_000_000);
            tarball.directory("p").expect("dir");
            tarball
                .file(&format!("p/{}", "long-name-".repeat(20)), b"x", false)
                .expect("file");
            tarball.symlink("p/link", b"target").expect("link");
            tarball.finish().expect("finish")
        };
        let bytes = build();
        assert_eq!(bytes, build());
        // gzip header: magic, deflate, no flags (no name), mtime 0.
        assert_eq!(&bytes[..8], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0]);
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
        let mut names = Vec::new();
        for entry in archive.entries().expect("entries") {
            let entry = entry.expect("entry");
            assert_eq!(entry.header().mtime().expect("mtime"), 1_700_000_000);
            assert_eq!(entry.header().uid().expect("uid"), 0);
            names.push(entry.path().expect("path").to_string_lossy().into_owned());
        }
        assert_eq!(names.len(), 3);
        assert_eq!(names[0], "p/");
        assert!(names[1].len() > 100);
    }
}
