//! The writer protocol's named barriers: one enum, in protocol order (RFC 0001 §4). The
//! one home of the barrier names: the store, the crash lab, the demo, the bundle checks
//! and the release pipeline all use this enum, never the strings.
use serde::{Deserialize, Serialize};

/// A point in the writer protocol just after one step has completed.
///
/// The order of `Barrier::ALL` is the normative order of RFC 0001; a test checks that the
/// RFC's numbered list equals it. Object barriers repeat once per chunk payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Barrier {
    /// A chunk object's bytes are written to its temporary file.
    ObjectAfterWrite,
    /// The chunk object's temporary file is fsynced.
    ObjectAfterFileFsync,
    /// The chunk object is renamed into `objects/`.
    ObjectAfterRename,
    /// The object's directory is fsynced.
    ObjectAfterDirectoryFsync,
    /// The manifest's bytes are written to its temporary file.
    ManifestAfterWrite,
    /// The manifest's temporary file is fsynced.
    ManifestAfterFileFsync,
    /// The manifest is renamed into `objects/`.
    ManifestAfterRename,
    /// The manifest's directory is fsynced.
    ManifestAfterDirectoryFsync,
    /// The commit record's bytes are written to its temporary file.
    CommitAfterWrite,
    /// The commit record's temporary file is fsynced (a demo barrier).
    CommitAfterFileFsync,
    /// The commit record is renamed into `commits/`: the generation is visible (a demo barrier).
    CommitAfterRename,
    /// `commits/` is fsynced: the generation is durable.
    CommitAfterDirectoryFsync,
    /// The new `refs/LATEST` hint is written to its temporary file.
    LatestAfterWrite,
    /// The `refs/LATEST` temporary file is fsynced.
    LatestAfterFileFsync,
    /// `refs/LATEST` is replaced by rename.
    LatestAfterRename,
    /// `refs/` is fsynced.
    LatestAfterDirectoryFsync,
}

impl Barrier {
    /// Every barrier, in protocol order.
    pub const ALL: [Barrier; 16] = [
        Barrier::ObjectAfterWrite,
        Barrier::ObjectAfterFileFsync,
        Barrier::ObjectAfterRename,
        Barrier::ObjectAfterDirectoryFsync,
        Barrier::ManifestAfterWrite,
        Barrier::ManifestAfterFileFsync,
        Barrier::ManifestAfterRename,
        Barrier::ManifestAfterDirectoryFsync,
        Barrier::CommitAfterWrite,
        Barrier::CommitAfterFileFsync,
        Barrier::CommitAfterRename,
        Barrier::CommitAfterDirectoryFsync,
        Barrier::LatestAfterWrite,
        Barrier::LatestAfterFileFsync,
        Barrier::LatestAfterRename,
        Barrier::LatestAfterDirectoryFsync,
    ];

    /// The kebab-case name used in the RFC, events and the CLI.
    pub const fn name(self) -> &'static str {
        match self {
            Barrier::ObjectAfterWrite => "object-after-write",
            Barrier::ObjectAfterFileFsync => "object-after-file-fsync",
            Barrier::ObjectAfterRename => "object-after-rename",
            Barrier::ObjectAfterDirectoryFsync => "object-after-directory-fsync",
            Barrier::ManifestAfterWrite => "manifest-after-write",
            Barrier::ManifestAfterFileFsync => "manifest-after-file-fsync",
            Barrier::ManifestAfterRename => "manifest-after-rename",
            Barrier::ManifestAfterDirectoryFsync => "manifest-after-directory-fsync",
            Barrier::CommitAfterWrite => "commit-after-write",
            Barrier::CommitAfterFileFsync => "commit-after-file-fsync",
            Barrier::CommitAfterRename => "commit-after-rename",
            Barrier::CommitAfterDirectoryFsync => "commit-after-directory-fsync",
            Barrier::LatestAfterWrite => "latest-after-write",
            Barrier::LatestAfterFileFsync => "latest-after-file-fsync",
            Barrier::LatestAfterRename => "latest-after-rename",
            Barrier::LatestAfterDirectoryFsync => "latest-after-directory-fsync",
        }
    }

    /// The barrier with this kebab-case name, if any.
    pub fn from_name(name: &str) -> Option<Barrier> {
        Barrier::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Whether, once this barrier is reached, the candidate record is visible in `commits/`
    /// under the correct protocol.
    pub fn commit_visible(self) -> bool {
        self >= Barrier::CommitAfterRename
    }
}

impl std::fmt::Display for Barrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Barrier {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Barrier::from_name(s).ok_or_else(|| format!("unknown barrier {s:?}"))
    }
}

impl Serialize for Barrier {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Barrier {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Barrier::from_name(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown barrier {text:?}")))
    }
}

/// The two barriers the killer demo and every release run, in this order: killed just
/// before the commit record is renamed into `commits/`, and just after.
pub const DEMO_BARRIERS: [Barrier; 2] = [Barrier::CommitAfterFileFsync, Barrier::CommitAfterRename];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_round_trip() {
        let mut names: Vec<_> = Barrier::ALL.iter().map(|b| b.name()).collect();
        for b in Barrier::ALL {
            assert_eq!(Barrier::from_name(b.name()), Some(b));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Barrier::ALL.len());
        let mut sorted = Barrier::ALL;
        sorted.sort();
        assert_eq!(sorted, Barrier::ALL);
    }
}
