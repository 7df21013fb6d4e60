//! Acknowledgements: the moments a writer claims its work durable. Its exit is one, and
//! so is each line of its stdout that matches `--ack REGEX`. Each is placed in the trace
//! by the write that completed the line (the recorder stamps every write to the stdout
//! log with the number of operations completed by then), so a crash state with crash
//! point `c` follows every acknowledgement placed at or before `c`: nothing has to
//! happen between an acknowledgement and the next operation for a crash to follow it.
//! The check then runs with `SHARDLIFT_ACKED=<that count>` and may demand the new state.
use regex::bytes::Regex;
use serde::Serialize;

use crate::lab::crash_model::trace::StdoutWrite;
use crate::lab::external::error::CrashTestError;

/// Environment variable holding, for the check, the acknowledgements before the crash.
pub const ACKED_ENV: &str = "SHARDLIFT_ACKED";

/// The text of the exit's acknowledgement in reports.
pub const EXIT_ACK: &str = "<exit>";

/// Longest acknowledgement line kept in reports, in bytes.
const MAX_LINE_BYTES: usize = 200;

/// One acknowledgement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Acknowledgement {
    /// Trace operations completed when it was given.
    pub after_operations: usize,
    /// The matching stdout line (cut to 200 bytes), or `<exit>`.
    pub line: String,
}

/// A compiled `--ack` pattern.
#[derive(Clone, Debug)]
pub struct AckPattern(Regex);

impl AckPattern {
    /// Compiles `pattern`; a bad one is [`CrashTestError::BadAckPattern`].
    pub fn new(pattern: &str) -> Result<Self, CrashTestError> {
        Regex::new(pattern)
            .map(AckPattern)
            .map_err(|e| CrashTestError::BadAckPattern {
                pattern: pattern.to_owned(),
                reason: e.to_string(),
            })
    }
}

/// The acknowledgements of a run, in order: each stdout line matching `pattern`, placed
/// by the write that completed it, then the exit after all `operations`. Bytes beyond
/// what the recorded writes account for (written by a call the recorder does not stamp)
/// are placed at the exit, the latest the run can show.
pub fn acknowledgements(
    stdout: &[u8],
    writes: &[StdoutWrite],
    pattern: Option<&AckPattern>,
    operations: usize,
) -> Vec<Acknowledgement> {
    let mut acks = Vec::new();
    if let Some(AckPattern(regex)) = pattern {
        let mut line_start = 0usize;
        let mut write_index = 0usize;
        let mut written_end: u64 = 0;
        while line_start < stdout.len() {
            let line_end = stdout[line_start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(stdout.len(), |i| line_start + i + 1);
            let line = &stdout[line_start..line_end];
            let text = line.strip_suffix(b"\n").unwrap_or(line);
            if regex.is_match(text) {
                // The write that completed this line: the first whose end reaches it.
                while written_end < line_end as u64 && write_index < writes.len() {
                    written_end = written_end.saturating_add(writes[write_index].len);
                    write_index += 1;
                }
                let after_operations = match write_index.checked_sub(1) {
                    Some(i) if written_end >= line_end as u64 => writes[i].after_operations,
                    _ => operations,
                };
                let shown = &text[..text.len().min(MAX_LINE_BYTES)];
                acks.push(Acknowledgement {
                    after_operations,
                    line: String::from_utf8_lossy(shown).into_owned(),
                });
            }
            line_start = line_end;
        }
    }
    acks.push(Acknowledgement {
        after_operations: operations,
        line: EXIT_ACK.to_owned(),
    });
    acks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(after_operations: usize, len: u64) -> StdoutWrite {
        StdoutWrite {
            after_operations,
            len,
        }
    }

    /// Lines are placed by the write that completed them, not the one that began them.
    #[test]
    fn a_line_is_placed_by_the_write_that_completes_it() {
        let stdout = b"step 1\ncommitted 1\ncommitted 2\n";
        let writes = [write(2, 7), write(3, 5), write(9, 7), write(12, 12)];
        let pattern = AckPattern::new("^committed").expect("pattern");
        let acks = acknowledgements(stdout, &writes, Some(&pattern), 20);
        let at: Vec<usize> = acks.iter().map(|a| a.after_operations).collect();
        assert_eq!(at, [9, 12, 20]);
        assert_eq!(acks[0].line, "committed 1");
        assert_eq!(acks[2].line, EXIT_ACK);
    }

    /// Without a pattern only the exit acknowledges; bytes nobody stamped go to the exit.
    #[test]
    fn the_exit_always_acknowledges_and_unstamped_bytes_go_to_it() {
        let acks = acknowledgements(b"committed\n", &[], None, 4);
        assert_eq!(acks.len(), 1);
        let pattern = AckPattern::new("committed").expect("pattern");
        let acks = acknowledgements(b"committed\n", &[], Some(&pattern), 4);
        assert_eq!(
            acks.iter().map(|a| a.after_operations).collect::<Vec<_>>(),
            [4, 4]
        );
    }

    #[test]
    fn a_bad_pattern_is_its_own_error() {
        let error = AckPattern::new("(").expect_err("unbalanced");
        assert_eq!(error.kind(), "bad-ack-pattern");
    }
}
