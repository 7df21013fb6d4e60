//! The local backend's steps of the one protocol ([`crate::store::protocol::WriteSteps`]):
//! each step of RFC 0001 §4 as files, fsyncs and a rename that never replaces.
use super::*;

impl WriteSteps for Writer<'_> {
    type Error = StoreError;

    fn protocol_error(error: StoreError) -> StoreError {
        error
    }

    fn prepare_publish(&mut self) -> Result<(), StoreError> {
        Ok(())
    }

    fn prepare_reshard(&mut self) -> Result<(), StoreError> {
        let found = self
            .fs
            .entry_kind(&self.root)
            .map_err(|e| StoreError::io(&self.root, e))?;
        if found != Some(EntryKind::Dir) {
            return Err(StoreError::NoStore {
                path: self.root.clone(),
                found,
            });
        }
        Ok(())
    }

    fn make_layout(&mut self) -> Result<(), StoreError> {
        ensure_layout(self.fs, &self.root)
    }

    fn highest_named_generation(&mut self) -> Result<Option<u64>, StoreError> {
        highest_commit_name(self.fs, &self.root)
    }

    fn begin(&mut self, generation: u64) {
        self.generation = generation;
        self.nonce = format!("{}-{generation}", std::process::id());
    }

    fn put_objects(
        &mut self,
        count: usize,
        source: ObjectSource<'_>,
        progress: &mut dyn Progress,
    ) -> Result<Vec<Digest>, StoreError> {
        put_objects_pipelined(self, count, source, progress)
    }

    fn objects_installed(&mut self) -> Result<(), StoreError> {
        self.sync_concurrent_fan_dirs()
    }

    fn put_manifest(&mut self, bytes: Vec<u8>, digest: Digest) -> Result<(), StoreError> {
        self.put_object_digested(&bytes, digest, true).map(|_| ())
    }

    fn install_commit(&mut self, bytes: Vec<u8>, _digest: Digest) -> Result<(), StoreError> {
        self.install_commit_record(&bytes)
    }

    fn advance_latest(&mut self, bytes: Vec<u8>) -> Result<(), StoreError> {
        self.write_latest(&bytes)
    }

    fn failed_after_commit(&self, error: StoreError) -> StoreError {
        StoreError::CommittedLatestNotAdvanced {
            generation: self.generation,
            source: Box::new(error),
        }
    }
}

impl SourceCheck for Writer<'_> {
    fn check_source(
        &mut self,
        generation: u64,
        objects: ObjectCheck,
        progress: &mut dyn Progress,
    ) -> Result<ManifestRecord, StoreError> {
        let source = crate::store::recovery::verify_generation_checking(
            self.fs, &self.root, generation, objects, progress,
        )?;
        Ok(source.manifest)
    }
}

impl Writer<'_> {
    /// What this run committed, as its summary.
    pub(super) fn summary(&self, committed: Committed) -> CommitSummary {
        CommitSummary {
            committed,
            objects_written: self.objects_written,
            objects_reused: self.objects_reused,
        }
    }
}
