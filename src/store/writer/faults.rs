//! Deliberate protocol violations a publish can be run with, for the crash lab's writer mutants.

/// Deliberate protocol violations, for tests that show the power-loss checker can fail.
/// Never set outside tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriterFaults {
    /// Skip the `commits/` fsync after installing the commit record.
    pub skip_commit_directory_fsync: bool,
    /// Advance LATEST before renaming the commit record into `commits/`.
    pub latest_before_commit_rename: bool,
    /// The pre-RFC-0001-§4 writer: fsync a directory into its parent only when this
    /// writer created it, trusting directories a killed writer may have left non-durable.
    pub trust_existing_directories: bool,
    /// Skip the fsync of each chunk object's temp file.
    pub skip_object_file_fsync: bool,
    /// Skip the fsync of the fan-out directory after a chunk object's rename.
    pub skip_object_directory_fsync: bool,
    /// Skip the fsync of `objects/` that makes a fan-out directory durable.
    pub skip_objects_directory_fsync: bool,
    /// Skip the fsync of the manifest's temp file.
    pub skip_manifest_file_fsync: bool,
    /// Skip the fsync of the fan-out directory after the manifest's rename.
    pub skip_manifest_directory_fsync: bool,
    /// Skip the fsync of the commit record's temp file.
    pub skip_commit_file_fsync: bool,
    /// Skip the fsyncs of the store root (and its parent) that make the layout durable.
    pub skip_layout_fsync: bool,
    /// Skip only the fsync of the store root's parent, which makes the root's own entry
    /// durable (the root's fsync still runs).
    pub skip_root_parent_fsync: bool,
    /// A `--repair-latest` that advances LATEST without first fsyncing `commits/`, so
    /// LATEST may name a generation whose record's name is not yet durable.
    pub repair_without_commits_fsync: bool,
    /// Skip the fsync of LATEST's temp file.
    pub skip_latest_file_fsync: bool,
    /// Rename the commit record into `commits/` first and fsync it there afterwards.
    pub commit_rename_before_fsync: bool,
    /// Write the commit record in place in `commits/` (no temp file, no rename).
    pub commit_written_in_place: bool,
    /// Fsync chunk objects (file and fan-out directory) only after the commit is durable.
    pub objects_durable_after_commit: bool,
    /// Keep an object found at its address without fsyncing it: trust a killed writer's
    /// object (whose data may never have reached the disk) to be durable.
    pub skip_found_object_fsync: bool,
    /// Leave the fan-out directory of an object found at its address out of the directory
    /// fsyncs: trust a killed writer's rename into it to be durable.
    pub skip_found_object_directory_fsync: bool,
    /// Keep an object found at its address without checking its bytes: trust whatever
    /// file holds the name to be the object.
    pub skip_found_object_check: bool,
    /// Install the commit record with a rename that replaces: a writer racing for a
    /// generation another already committed overwrites that record.
    pub commit_rename_replaces: bool,
    /// Skip the fsync of `refs/` after LATEST's rename (step 16).
    pub skip_latest_directory_fsync: bool,
}

impl WriterFaults {
    /// Whether a writer with these faults may install objects concurrently (RFC 0001 §4,
    /// "Concurrent objects") when no hook observes it: with no fault, or only the object
    /// fsync faults (of a written or a found object), which the concurrent install honours
    /// too (so the power-loss model can show it catches a concurrent writer that skips
    /// them). Any other fault keeps the writer sequential.
    pub fn allow_concurrent_install(&self) -> bool {
        let other_faults = WriterFaults {
            skip_object_file_fsync: false,
            skip_object_directory_fsync: false,
            skip_found_object_fsync: false,
            skip_found_object_directory_fsync: false,
            ..*self
        };
        other_faults == WriterFaults::NONE
    }

    /// The correct writer (no fault), usable in constants.
    pub const NONE: WriterFaults = WriterFaults {
        skip_commit_directory_fsync: false,
        latest_before_commit_rename: false,
        trust_existing_directories: false,
        skip_object_file_fsync: false,
        skip_object_directory_fsync: false,
        skip_objects_directory_fsync: false,
        skip_manifest_file_fsync: false,
        skip_manifest_directory_fsync: false,
        skip_commit_file_fsync: false,
        skip_layout_fsync: false,
        skip_root_parent_fsync: false,
        repair_without_commits_fsync: false,
        skip_latest_file_fsync: false,
        commit_rename_before_fsync: false,
        commit_written_in_place: false,
        objects_durable_after_commit: false,
        skip_found_object_fsync: false,
        skip_found_object_directory_fsync: false,
        skip_found_object_check: false,
        commit_rename_replaces: false,
        skip_latest_directory_fsync: false,
    };
}
