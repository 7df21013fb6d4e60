//! The probe's line protocol (docs/resume-test.md): decoding the records a run appends
//! to its channel file, read incrementally while the run goes on.
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use super::error::ResumeError;

/// The protocol version every record carries as `v`.
pub const PROTOCOL_VERSION: u32 = 1;
/// The longest record line accepted, in bytes.
pub const MAX_RECORD_BYTES: usize = 8 << 20;
/// The most records one run may append.
pub const MAX_RECORDS_PER_RUN: usize = 1 << 20;
/// The most components one step record may carry.
pub const MAX_COMPONENTS: usize = 1 << 16;

/// What a record reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    /// The state after a training step.
    Step,
    /// A checkpoint of the state after `step` is about to be written.
    Saving,
    /// The checkpoint of the state after `step` is durable.
    Saved,
}

/// One record as written on the wire (a closed schema).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct WireRecord {
    v: u32,
    kind: RecordKind,
    step: u64,
    rank: u32,
    world: u32,
    #[serde(default)]
    components: Option<BTreeMap<String, String>>,
    #[serde(default)]
    probe_ns: Option<u64>,
}

/// One decoded record, with when the supervisor saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// What it reports.
    pub kind: RecordKind,
    /// The training step it concerns.
    pub step: u64,
    /// The reporting process's rank (0 outside `torchrun`).
    pub rank: u32,
    /// The number of processes of the run (1 outside `torchrun`).
    pub world: u32,
    /// Component name → digest (step records; absent on the steps `--every` skips).
    pub components: Option<BTreeMap<String, String>>,
    /// The probe's own time for this call, in nanoseconds.
    pub probe_ns: Option<u64>,
    /// Milliseconds after the run started at which the supervisor read the record.
    pub observed_ms: u64,
}

/// Decodes one line (without its newline).
pub fn decode_line(line: &[u8], observed_ms: u64) -> Result<Record, String> {
    let wire: WireRecord = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if wire.v != PROTOCOL_VERSION {
        return Err(format!(
            "protocol version {} (this build reads {PROTOCOL_VERSION})",
            wire.v
        ));
    }
    if wire.world == 0 || wire.rank >= wire.world {
        return Err(format!("rank {} of a world of {}", wire.rank, wire.world));
    }
    if wire.kind != RecordKind::Step && wire.components.is_some() {
        return Err("only step records carry components".to_owned());
    }
    if wire
        .components
        .as_ref()
        .is_some_and(|c| c.len() > MAX_COMPONENTS)
    {
        return Err(format!("more than {MAX_COMPONENTS} components"));
    }
    Ok(Record {
        kind: wire.kind,
        step: wire.step,
        rank: wire.rank,
        world: wire.world,
        components: wire.components,
        probe_ns: wire.probe_ns,
        observed_ms,
    })
}

/// Reads a channel file as it grows. Complete lines are decoded as they appear; a final
/// line without its newline stays pending until it is completed or the run ends.
#[derive(Debug)]
pub struct ChannelReader {
    path: PathBuf,
    offset: u64,
    pending: Vec<u8>,
    lines: usize,
}

impl ChannelReader {
    /// A reader of `path` (which need not exist yet).
    pub fn new(path: &Path) -> Self {
        ChannelReader {
            path: path.to_path_buf(),
            offset: 0,
            pending: Vec::new(),
            lines: 0,
        }
    }

    /// The records completed since the last call, stamped `observed_ms`.
    pub fn poll(&mut self, observed_ms: u64) -> Result<Vec<Record>, ResumeError> {
        let mut file = match std::fs::File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ResumeError::io("open the probe channel", &self.path)(e)),
        };
        file.seek(SeekFrom::Start(self.offset))
            .map_err(ResumeError::io("read the probe channel", &self.path))?;
        let mut fresh = Vec::new();
        let read = file
            .take(MAX_RECORD_BYTES as u64 * 4)
            .read_to_end(&mut fresh)
            .map_err(ResumeError::io("read the probe channel", &self.path))?;
        self.offset += read as u64;
        self.pending.extend_from_slice(&fresh);
        let mut records = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            self.lines += 1;
            let record = decode_line(&line[..end], observed_ms)
                .map_err(|reason| self.undecodable(reason))?;
            records.push(record);
        }
        if self.pending.len() > MAX_RECORD_BYTES {
            return Err(self.undecodable(format!("a line longer than {MAX_RECORD_BYTES} bytes")));
        }
        if self.lines > MAX_RECORDS_PER_RUN {
            return Err(self.undecodable(format!("more than {MAX_RECORDS_PER_RUN} records")));
        }
        Ok(records)
    }

    /// Ends the read. A pending, unterminated last line is what a SIGKILL during the
    /// probe's write can leave: allowed (its length is returned) when the run was
    /// killed, an error when the run ended by itself.
    pub fn finish(self, killed: bool) -> Result<usize, ResumeError> {
        if self.pending.is_empty() || killed {
            return Ok(self.pending.len());
        }
        let reason = "an unterminated last line from a run that was not killed".to_owned();
        Err(ResumeError::Undecodable {
            path: self.path,
            line: self.lines + 1,
            reason,
        })
    }

    fn undecodable(&self, reason: String) -> ResumeError {
        ResumeError::Undecodable {
            path: self.path.clone(),
            line: self.lines,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STEP: &str = r#"{"components":{"loss":"float32:00000000"},"kind":"step","rank":0,"step":1,"v":1,"world":1}"#;

    fn channel(bytes: &[u8]) -> (tempfile::TempDir, ChannelReader) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("channel.jsonl");
        std::fs::write(&path, bytes).expect("write");
        let reader = ChannelReader::new(&path);
        (dir, reader)
    }

    #[test]
    fn a_torn_last_line_is_allowed_only_after_a_kill() {
        let torn = format!("{STEP}\n{}", &STEP[..20]);
        let (_dir, mut reader) = channel(torn.as_bytes());
        assert_eq!(reader.poll(5).expect("poll").len(), 1);
        assert_eq!(reader.finish(true).expect("killed"), 20);
        let (_dir, mut reader) = channel(torn.as_bytes());
        reader.poll(5).expect("poll");
        assert!(matches!(
            reader.finish(false),
            Err(ResumeError::Undecodable { line: 2, .. })
        ));
    }

    #[test]
    fn a_corrupt_line_in_the_middle_is_an_error() {
        let corrupt = format!("{STEP}\n{}\n{STEP}\n", &STEP[..20]);
        let (_dir, mut reader) = channel(corrupt.as_bytes());
        assert!(matches!(
            reader.poll(5),
            Err(ResumeError::Undecodable { line: 2, .. })
        ));
    }

    #[test]
    fn lines_are_decoded_as_they_are_completed() {
        let (dir, mut reader) = channel(&STEP.as_bytes()[..10]);
        assert!(reader.poll(1).expect("poll").is_empty());
        std::fs::write(dir.path().join("channel.jsonl"), format!("{STEP}\n")).expect("write");
        let records = reader.poll(7).expect("poll");
        assert_eq!(records.len(), 1);
        assert_eq!((records[0].step, records[0].observed_ms), (1, 7));
    }

    #[test]
    fn records_outside_the_schema_do_not_decode() {
        for line in [
            STEP.replace(r#""v":1"#, r#""v":2"#),
            STEP.replace(r#""rank":0"#, r#""rank":1"#),
            STEP.replace(r#""kind":"step""#, r#""kind":"saved""#),
            STEP.replace(r#""world":1"#, r#""world":1,"extra":0"#),
        ] {
            assert!(decode_line(line.as_bytes(), 0).is_err(), "{line}");
        }
        assert!(decode_line(STEP.as_bytes(), 0).is_ok());
    }
}
