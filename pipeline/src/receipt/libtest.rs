//! Reads test IDs and outcomes from `cargo test` output (libtest's human format).
//!
//! Cargo announces each test binary on stderr (`Running unittests src/lib.rs
//! (target/debug/deps/shardlift-…)`, `Running tests/store_x.rs (…)`, `Doc-tests
//! shardlift`) and runs them one after another; each binary writes one block to stdout:
//! `running N tests`, one `test NAME ... ok|FAILED|ignored` line per test, optionally a
//! `failures:` section, then `test result: … P passed; F failed; I ignored; …`. The k-th
//! block on stdout therefore belongs to the k-th announcement on stderr, whatever the
//! interleaving of the two streams. A test ID is `<binary>::<test name>` where the binary
//! is `<target name>/<source>` (`shardlift/src/lib.rs`, `store_x/tests/store_x.rs`) or
//! `doc/<crate>`, unique across a workspace.
//!
//! Every block that reached its `test result:` line must list exactly as many tests per
//! outcome as that line counts; otherwise the output was not understood and nothing is
//! recorded.
use super::schema::{Counts, TestOutcome};

/// Why a lane's libtest output was not understood (nothing is recorded then).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LibtestError {
    /// Stdout has more test blocks than stderr announced test binaries.
    #[error("stdout has test block {index} but stderr announced only {announced} test binaries")]
    UnannouncedBlock {
        /// The block's position on stdout, 0-based.
        index: usize,
        /// How many binaries stderr announced.
        announced: usize,
    },
    /// Stdout has test blocks but stderr announced no binary: the run was quiet.
    #[error("stdout has test blocks but stderr announced no test binary: quiet output (`cargo -q`, libtest `--quiet`) names no test; run the lane without -q, or under cargo nextest with --junit")]
    NoAnnouncements,
    /// A completed block's test lines do not add up to its `test result:` line.
    #[error("{binary}: the test lines count {parsed:?} but libtest's summary says {summary:?}")]
    CountMismatch {
        /// The binary of the block (`<target name>/<source>` or `doc/<crate>`).
        binary: String,
        /// The counts of its `test NAME ... outcome` lines.
        parsed: Counts,
        /// The counts its summary line states.
        summary: Counts,
    },
    /// A test ID appears twice in the lane's output.
    #[error("test ID {0:?} appears twice in the lane's output")]
    DuplicateTestId(String),
    /// A `test result:` line does not parse.
    #[error("unreadable libtest summary line {0:?}")]
    BadSummary(String),
}

/// The tests a lane ran, read from its output (libtest's or a JUnit report).
#[derive(Debug, Default)]
pub struct Parsed {
    /// (test ID, outcome) in output order.
    pub tests: Vec<(String, TestOutcome)>,
    /// Sum of the summaries of the blocks that completed.
    pub summary: Counts,
    /// Blocks that never reached their summary line (a crashed test binary).
    pub incomplete_blocks: usize,
}

/// The binaries cargo announced on stderr, in order.
pub fn announced_binaries(stderr: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in stderr.lines() {
        let line = strip_ansi(line);
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("Running ") {
            // `unittests src/lib.rs (target/debug/deps/shardlift-0123abcd)` or
            // `tests/store_x.rs (target/debug/deps/store_x-0123abcd)`
            let rest = rest.strip_prefix("unittests ").unwrap_or(rest);
            let Some((source, artifact)) = rest.rsplit_once(" (") else {
                continue;
            };
            let artifact = artifact.trim_end_matches(')');
            let file = artifact.rsplit('/').next().unwrap_or(artifact);
            let stem = match file.rsplit_once('-') {
                Some((stem, hash)) if hash.bytes().all(|b| b.is_ascii_hexdigit()) => stem,
                _ => file,
            };
            out.push(format!("{stem}/{source}"));
        } else if let Some(krate) = line.strip_prefix("Doc-tests ") {
            out.push(format!("doc/{}", krate.trim()));
        }
    }
    out
}

/// Parses stdout against the binaries announced on stderr.
pub fn parse(stdout: &str, stderr: &str) -> Result<Parsed, LibtestError> {
    let mut parser = Parser {
        binaries: announced_binaries(stderr),
        parsed: Parsed::default(),
        seen: std::collections::BTreeSet::new(),
        block: None,
        started_blocks: 0,
    };
    for raw in stdout.lines() {
        let line = strip_ansi(raw);
        parser.line(line.trim_end())?;
    }
    if parser.block.is_some() {
        parser.parsed.incomplete_blocks += 1;
    }
    Ok(parser.parsed)
}

/// The lane command without its quiet flags, when it is a `cargo test` invocation (run
/// directly or through `env NAME=VALUE…`) that has any: `-q`/`--quiet` among cargo's
/// options hide the binaries' announcements, and after `--` make libtest print one
/// character per test instead of its name, so a quiet run names no test. `None` when
/// there is nothing to remove (or the command is not a direct `cargo test`).
pub fn without_quiet(command: &[String]) -> Option<Vec<String>> {
    let is = |arg: &String, name: &str| {
        std::path::Path::new(arg)
            .file_name()
            .is_some_and(|n| n == name)
    };
    let mut index = 0;
    if command.first().is_some_and(|a| is(a, "env")) {
        index = 1;
        while command
            .get(index)
            .is_some_and(|a| a.contains('=') && !a.starts_with('-'))
        {
            index += 1;
        }
    }
    if !command.get(index).is_some_and(|a| is(a, "cargo")) {
        return None;
    }
    // cargo [+toolchain] [global options] test …
    let mut sub = index + 1;
    while let Some(arg) = command.get(sub) {
        if arg.starts_with('+') || matches!(arg.as_str(), "-q" | "--quiet" | "-v" | "--verbose") {
            sub += 1;
        } else if matches!(arg.as_str(), "--color" | "--config" | "-Z" | "-C") {
            sub += 2;
        } else if arg.starts_with('-') {
            sub += 1;
        } else {
            break;
        }
    }
    if command.get(sub).map(String::as_str) != Some("test") {
        return None;
    }
    let quiet = |a: &String| matches!(a.as_str(), "-q" | "--quiet");
    if !command[index + 1..].iter().any(quiet) {
        return None;
    }
    let mut out = command[..=index].to_vec();
    out.extend(command[index + 1..].iter().filter(|a| !quiet(a)).cloned());
    Some(out)
}

/// The state of [`parse`] between stdout lines.
struct Parser {
    binaries: Vec<String>,
    parsed: Parsed,
    /// Test IDs seen so far (each may appear once).
    seen: std::collections::BTreeSet<String>,
    /// The block being read, if any.
    block: Option<Block>,
    /// How many blocks have started (the next one belongs to `binaries[started_blocks]`).
    started_blocks: usize,
}

impl Parser {
    fn line(&mut self, trimmed: &str) -> Result<(), LibtestError> {
        if let Some(rest) = trimmed.strip_prefix("running ") {
            if rest.ends_with(" tests") || rest.ends_with(" test") {
                return self.start_block();
            }
        }
        let Some(current) = self.block.as_mut() else {
            return Ok(());
        };
        if let Some(rest) = trimmed.strip_prefix("test result: ") {
            return self.finish_block(rest);
        }
        if current.in_failures {
            return Ok(());
        }
        if trimmed == "failures:" {
            current.in_failures = true;
            return Ok(());
        }
        let Some((name, outcome)) = current.test_line(trimmed) else {
            return Ok(());
        };
        let id = format!("{}::{name}", current.binary);
        if !self.seen.insert(id.clone()) {
            return Err(LibtestError::DuplicateTestId(id));
        }
        current.counts.add(outcome);
        self.parsed.tests.push((id, outcome));
        Ok(())
    }

    /// A `running N tests` line: a block of the next announced binary begins (and one
    /// still open never reached its summary).
    fn start_block(&mut self) -> Result<(), LibtestError> {
        if self.block.take().is_some() {
            self.parsed.incomplete_blocks += 1;
        }
        if self.binaries.is_empty() {
            return Err(LibtestError::NoAnnouncements);
        }
        let binary = self.binaries.get(self.started_blocks).cloned().ok_or(
            LibtestError::UnannouncedBlock {
                index: self.started_blocks + 1,
                announced: self.binaries.len(),
            },
        )?;
        self.started_blocks += 1;
        self.block = Some(Block {
            binary,
            counts: Counts::default(),
            in_failures: false,
            pending: None,
        });
        Ok(())
    }

    /// A `test result:` line: its counts must be those of the block's test lines.
    fn finish_block(&mut self, summary_text: &str) -> Result<(), LibtestError> {
        let summary = parse_summary(summary_text)?;
        if let Some(current) = self.block.take() {
            if summary != current.counts {
                return Err(LibtestError::CountMismatch {
                    binary: current.binary,
                    parsed: current.counts,
                    summary,
                });
            }
        }
        self.parsed.summary = self.parsed.summary.plus(summary);
        Ok(())
    }
}

struct Block {
    binary: String,
    counts: Counts,
    in_failures: bool,
    /// A test whose name was printed without its result yet (`--test-threads=1`).
    pending: Option<String>,
}

impl Block {
    /// The test and outcome a line reports, if any: `test NAME ... RESULT`, or the
    /// result of a pending test on a line of its own.
    fn test_line(&mut self, trimmed: &str) -> Option<(String, TestOutcome)> {
        if let Some(rest) = trimmed.strip_prefix("test ") {
            let (name, result) = rest.rsplit_once(" ...")?;
            return match outcome(result.trim()) {
                Some(Some(outcome)) => Some((name.to_owned(), outcome)),
                Some(None) => None, // a benchmark line
                None if result.trim().is_empty() => {
                    // `--test-threads=1` prints the name first, the result later.
                    self.pending = Some(name.to_owned());
                    None
                }
                None => None,
            };
        }
        let name = self.pending.clone()?;
        match outcome(trimmed.trim()) {
            Some(Some(outcome)) => {
                self.pending = None;
                Some((name, outcome))
            }
            _ => None,
        }
    }
}

/// `Some(Some(outcome))` for a test result, `Some(None)` for a bench line, `None` otherwise.
fn outcome(result: &str) -> Option<Option<TestOutcome>> {
    match result {
        "ok" => Some(Some(TestOutcome::Passed)),
        "FAILED" => Some(Some(TestOutcome::Failed)),
        "ignored" => Some(Some(TestOutcome::Ignored)),
        r if r.starts_with("ignored, ") => Some(Some(TestOutcome::Ignored)),
        r if r.starts_with("bench:") => Some(None),
        _ => None,
    }
}

/// `ok. 3 passed; 0 failed; 1 ignored; 0 measured; 2 filtered out; finished in 0.01s`
fn parse_summary(rest: &str) -> Result<Counts, LibtestError> {
    let bad = || LibtestError::BadSummary(rest.to_owned());
    let (_, counts) = rest.split_once(". ").ok_or_else(bad)?;
    let mut summary = Counts::default();
    let mut found = 0;
    for part in counts.split(';') {
        let mut words = part.split_whitespace();
        let (Some(number), Some(label)) = (words.next(), words.next()) else {
            continue;
        };
        let Ok(number) = number.parse::<u64>() else {
            continue;
        };
        match label {
            "passed" => summary.passed = number,
            "failed" => summary.failed = number,
            "ignored" => summary.ignored = number,
            _ => continue,
        }
        found += 1;
    }
    if found != 3 {
        return Err(bad());
    }
    Ok(summary)
}

pub(crate) fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STDERR: &str = "   Compiling x\n     Running unittests src/lib.rs (target/debug/deps/shardlift-0123abcd)\n     Running tests/store_a.rs (target/debug/deps/store_a-ffee)\n   Doc-tests shardlift\n";

    #[test]
    fn blocks_follow_announcements() {
        let stdout = "\nrunning 2 tests\ntest a::b ... ok\ntest a::c ... ignored, slow\n\ntest result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.00s\n\nrunning 1 test\ntest t ... \nnoise from a child\nFAILED\n\nfailures:\n\n---- t stdout ----\ntest fake ... ok\n\nfailures:\n    t\n\ntest result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out\n\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        let parsed = parse(stdout, STDERR).expect("parse");
        assert_eq!(
            parsed.tests,
            vec![
                ("shardlift/src/lib.rs::a::b".to_owned(), TestOutcome::Passed),
                (
                    "shardlift/src/lib.rs::a::c".to_owned(),
                    TestOutcome::Ignored
                ),
                (
                    "store_a/tests/store_a.rs::t".to_owned(),
                    TestOutcome::Failed
                ),
            ]
        );
        assert_eq!(parsed.summary.total(), 3);
        assert_eq!(parsed.incomplete_blocks, 0);
    }

    #[test]
    fn disagreeing_summary_is_refused() {
        let stdout = "running 1 test\ntest a ... ok\ntest result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert!(matches!(
            parse(stdout, STDERR),
            Err(LibtestError::CountMismatch { .. })
        ));
        // Two blocks on stdout, one binary announced on stderr.
        let one = "running 1 test\ntest a ... ok\ntest result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out\n";
        assert_eq!(
            parse(
                &format!("{one}{one}"),
                "     Running tests/a.rs (target/debug/deps/a-01)\n"
            )
            .err(),
            Some(LibtestError::UnannouncedBlock {
                index: 2,
                announced: 1
            })
        );
    }

    #[test]
    fn quiet_output_is_refused_by_name() {
        // `cargo test -q`: no announcement on stderr, one character per test on stdout.
        let stdout = "\nrunning 3 tests\ni..\ntest result: ok. 2 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
        assert_eq!(parse(stdout, "").err(), Some(LibtestError::NoAnnouncements));
    }

    fn words(text: &str) -> Vec<String> {
        text.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn quiet_flags_leave_direct_cargo_test_commands() {
        assert_eq!(
            without_quiet(&words("cargo test --no-default-features -q")),
            Some(words("cargo test --no-default-features"))
        );
        assert_eq!(
            without_quiet(&words(
                "env CARGO_TARGET_DIR=t /usr/bin/cargo +stable --quiet --color never test --lib -- --quiet --skip x"
            )),
            Some(words(
                "env CARGO_TARGET_DIR=t /usr/bin/cargo +stable --color never test --lib -- --skip x"
            ))
        );
        // Nothing to remove, not cargo test, or hidden in a shell: unchanged.
        assert_eq!(without_quiet(&words("cargo test --lib")), None);
        assert_eq!(without_quiet(&words("cargo nextest run -q")), None);
        assert_eq!(without_quiet(&words("cargo build -q")), None);
        assert_eq!(without_quiet(&words("sh -c cargo test -q")), None);
        assert_eq!(without_quiet(&[]), None);
    }
}
