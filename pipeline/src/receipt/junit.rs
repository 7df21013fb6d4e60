//! Reads test IDs and outcomes from a cargo-nextest JUnit report (machine-readable, the
//! same whatever the console's verbosity), cross-checked against what the runner printed.
//!
//! nextest writes one `<testsuite>` per test binary (named by its binary ID, e.g.
//! `shardlift`, `shardlift::bin/shardlift`, `shardlift::store_x`) and one `<testcase>` per
//! test it ran; tests it skipped (ignored or filtered out) are not listed. A test ID is
//! `<binary ID> <test name>`, nextest's own name for a test instance, unique across a
//! workspace.
//!
//! The report is deserialized by `quick-junit` (the crate nextest itself writes it with).
//! Nothing is recorded unless it is consistent: no test is listed twice; every suite's and
//! the report's `tests`, `failures` + `errors` and `skipped` attributes equal what their
//! test cases say; and when the runner printed its `Summary … N tests run: P passed, …`
//! line on stderr (nextest always does), there is exactly one such line (a report holds one
//! run) and its run and passed counts are the report's.
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use quick_junit::{Report, TestCaseStatus};

use super::libtest::{strip_ansi, Parsed};
use super::schema::{Counts, TestOutcome};

/// Why a lane's JUnit report was not understood (nothing is recorded then).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum JunitError {
    /// The lane wrote no report at the path given with `--junit`.
    #[error("the lane wrote no JUnit report at {0}")]
    Missing(PathBuf),
    /// The report exists but could not be read.
    #[error("cannot read the JUnit report {path}: {message}")]
    Read {
        /// The report.
        path: PathBuf,
        /// The I/O error's message.
        message: String,
    },
    /// The report does not deserialize as JUnit XML; the parser's message.
    #[error("the JUnit report is not JUnit XML: {0}")]
    Malformed(String),
    /// A test ID (`<binary ID> <test name>`) is listed twice.
    #[error("test ID {0:?} appears twice in the JUnit report")]
    DuplicateTestId(String),
    /// A suite's (or the report's) count attributes differ from its test cases.
    #[error("JUnit {scope}: its attributes count {stated} but its test cases are {listed}")]
    AttributeMismatch {
        /// `report`, or `suite "<name>"`.
        scope: String,
        /// The counts its attributes state.
        stated: String,
        /// The counts its test cases give.
        listed: String,
    },
    /// Stderr holds more than one run summary; the number found.
    #[error("the runner printed {0} run summaries, but a JUnit report holds only one run")]
    SeveralRuns(usize),
    /// A `Summary … tests run:` line does not parse.
    #[error("unreadable runner summary line {0:?}")]
    BadSummary(String),
    /// The printed summary's run and passed counts are not the report's.
    #[error("the runner printed {printed_run} tests run, {printed_passed} passed, but the JUnit report lists {report_run} run, {report_passed} passed")]
    SummaryMismatch {
        /// Tests run, as printed.
        printed_run: u64,
        /// Tests passed, as printed.
        printed_passed: u64,
        /// Test cases in the report.
        report_run: u64,
        /// Passed test cases in the report.
        report_passed: u64,
    },
}

/// Reads the report at `path` and checks it against the runner's stderr.
pub fn read(path: &Path, stderr: &str) -> Result<Parsed, JunitError> {
    let xml = match std::fs::read_to_string(path) {
        Ok(xml) => xml,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(JunitError::Missing(path.to_owned()))
        }
        Err(e) => {
            return Err(JunitError::Read {
                path: path.to_owned(),
                message: e.to_string(),
            })
        }
    };
    parse(&xml, stderr)
}

/// Parses a report and checks it against the runner's stderr.
pub fn parse(xml: &str, stderr: &str) -> Result<Parsed, JunitError> {
    let report =
        Report::deserialize_from_str(xml).map_err(|e| JunitError::Malformed(e.to_string()))?;
    let mut parsed = Parsed::default();
    let mut seen = BTreeSet::new();
    let mut all = Tally::default();
    for suite in &report.test_suites {
        let mut tally = Tally::default();
        for case in &suite.test_cases {
            let id = format!("{} {}", suite.name.as_str(), case.name.as_str());
            if !seen.insert(id.clone()) {
                return Err(JunitError::DuplicateTestId(id));
            }
            let outcome = tally.add(&case.status);
            parsed.tests.push((id, outcome));
        }
        let stated = Tally {
            tests: suite.tests,
            not_passed: suite.failures + suite.errors,
            skipped: suite.skipped,
        };
        stated.agrees(&tally, || format!("suite {:?}", suite.name.as_str()))?;
        all = all.plus(&tally);
    }
    let stated = Tally {
        tests: report.tests,
        not_passed: report.failures + report.errors,
        skipped: report.skipped,
    };
    stated.agrees(&all, || "report".to_owned())?;
    let mut counts = Counts::default();
    for (_, outcome) in &parsed.tests {
        counts.add(*outcome);
    }
    let summaries = summaries(stderr)?;
    if summaries.len() > 1 {
        return Err(JunitError::SeveralRuns(summaries.len()));
    }
    if let Some(printed) = summaries.first() {
        let ran = counts.passed + counts.failed;
        if printed.run != ran || printed.passed != counts.passed {
            return Err(JunitError::SummaryMismatch {
                printed_run: printed.run,
                printed_passed: printed.passed,
                report_run: ran,
                report_passed: counts.passed,
            });
        }
    }
    parsed.summary = counts;
    Ok(parsed)
}

/// A suite's or the report's counts, as its attributes state them or its cases show them.
#[derive(Default, Debug, PartialEq, Eq)]
struct Tally {
    tests: usize,
    not_passed: usize,
    skipped: usize,
}

impl Tally {
    fn add(&mut self, status: &TestCaseStatus) -> TestOutcome {
        self.tests += 1;
        match status {
            TestCaseStatus::Success { .. } => TestOutcome::Passed,
            TestCaseStatus::NonSuccess { .. } => {
                self.not_passed += 1;
                TestOutcome::Failed
            }
            TestCaseStatus::Skipped { .. } => {
                self.skipped += 1;
                TestOutcome::Ignored
            }
        }
    }

    fn plus(&self, other: &Tally) -> Tally {
        Tally {
            tests: self.tests + other.tests,
            not_passed: self.not_passed + other.not_passed,
            skipped: self.skipped + other.skipped,
        }
    }

    fn agrees(&self, listed: &Tally, scope: impl Fn() -> String) -> Result<(), JunitError> {
        if self == listed {
            return Ok(());
        }
        Err(JunitError::AttributeMismatch {
            scope: scope(),
            stated: self.describe(),
            listed: listed.describe(),
        })
    }

    fn describe(&self) -> String {
        format!(
            "{} tests, {} failures+errors, {} skipped",
            self.tests, self.not_passed, self.skipped
        )
    }
}

/// What a `Summary [   1.234s] 5 tests run: 4 passed, 1 failed, 2 skipped` line says.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    /// `N tests run`.
    pub run: u64,
    /// `P passed`.
    pub passed: u64,
}

/// Every run summary nextest printed on stderr.
pub fn summaries(stderr: &str) -> Result<Vec<Summary>, JunitError> {
    let mut out = Vec::new();
    for line in stderr.lines() {
        let line = strip_ansi(line);
        let Some(rest) = line.trim().strip_prefix("Summary [") else {
            continue;
        };
        let bad = || JunitError::BadSummary(line.trim().to_owned());
        let (_, counts) = rest.split_once("] ").ok_or_else(bad)?;
        let (run, parts) = counts.split_once(" run:").ok_or_else(bad)?;
        // `5 tests` or, when cancelled, `3/5 tests`.
        let run = run.split_whitespace().next().ok_or_else(bad)?;
        let run = run.split('/').next().unwrap_or(run);
        let run = run.parse::<u64>().map_err(|_| bad())?;
        let mut passed = None;
        for part in parts.split(',') {
            let mut words = part.split_whitespace();
            let (Some(number), Some("passed")) = (words.next(), words.next()) else {
                continue;
            };
            passed = Some(number.parse::<u64>().map_err(|_| bad())?);
        }
        out.push(Summary {
            run,
            passed: passed.ok_or_else(bad)?,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="3" skipped="0" failures="1" errors="0">
    <testsuite name="demo" tests="2" skipped="0" errors="0" failures="0">
        <testcase name="m::a" classname="demo"/>
        <testcase name="m::b" classname="demo"/>
    </testsuite>
    <testsuite name="demo::it" tests="1" skipped="0" errors="0" failures="1">
        <testcase name="bad" classname="demo::it"><failure message="boom">boom</failure></testcase>
    </testsuite>
</testsuites>
"#;
    const STDERR: &str = "────────────\n     Summary [   0.132s] 3 tests run: 2 passed, 1 failed, 4 skipped\nerror: test run failed\n";

    #[test]
    fn report_gives_ids_and_outcomes() {
        let parsed = parse(REPORT, STDERR).expect("parse");
        assert_eq!(
            parsed.tests,
            vec![
                ("demo m::a".to_owned(), TestOutcome::Passed),
                ("demo m::b".to_owned(), TestOutcome::Passed),
                ("demo::it bad".to_owned(), TestOutcome::Failed),
            ]
        );
        assert_eq!(parsed.summary.total(), 3);
        // Without a printed summary the report's own consistency still holds.
        assert_eq!(parse(REPORT, "").expect("parse").tests.len(), 3);
    }

    #[test]
    fn cancelled_and_flaky_summaries_parse() {
        let text = "\u{1b}[32m     Summary\u{1b}[0m [   1.000s] 3/6 tests run: 2 passed (1 flaky), 1 failed, 3 skipped\n";
        assert_eq!(
            summaries(text).expect("summary"),
            vec![Summary { run: 3, passed: 2 }]
        );
        assert!(matches!(
            summaries("     Summary [ 1s] lots of tests\n"),
            Err(JunitError::BadSummary(_))
        ));
    }

    #[test]
    fn a_test_listed_twice_is_refused() {
        let doubled = REPORT.replace("m::b", "m::a");
        assert_eq!(
            parse(&doubled, STDERR).err(),
            Some(JunitError::DuplicateTestId("demo m::a".to_owned()))
        );
    }

    #[test]
    fn attributes_must_match_the_cases() {
        let suite = REPORT.replace(r#"name="demo" tests="2""#, r#"name="demo" tests="3""#);
        assert!(matches!(
            parse(&suite, STDERR),
            Err(JunitError::AttributeMismatch { scope, .. }) if scope == "suite \"demo\""
        ));
        let report = REPORT.replace(r#"failures="1" errors="0">"#, r#"failures="0" errors="0">"#);
        assert!(matches!(
            parse(&report, STDERR),
            Err(JunitError::AttributeMismatch { scope, .. }) if scope == "report"
        ));
    }

    #[test]
    fn a_forged_consistent_report_must_match_the_printed_summary() {
        // Internally consistent (attributes match the cases), but the failed test was
        // rewritten as a pass: the runner's own summary says otherwise.
        let forged = REPORT
            .replace(
                r#"<testcase name="bad" classname="demo::it"><failure message="boom">boom</failure></testcase>"#,
                r#"<testcase name="bad" classname="demo::it"/>"#,
            )
            .replace(r#"failures="1""#, r#"failures="0""#);
        assert!(parse(&forged, "").is_ok(), "consistent on its own");
        assert_eq!(
            parse(&forged, STDERR).err(),
            Some(JunitError::SummaryMismatch {
                printed_run: 3,
                printed_passed: 2,
                report_run: 3,
                report_passed: 3,
            })
        );
    }

    #[test]
    fn two_runs_for_one_report_are_refused() {
        let twice = format!("{STDERR}{STDERR}");
        assert_eq!(
            parse(REPORT, &twice).err(),
            Some(JunitError::SeveralRuns(2))
        );
    }

    #[test]
    fn malformed_and_missing_reports_are_refused() {
        assert!(matches!(
            parse("<testsuites><testsuite>", ""),
            Err(JunitError::Malformed(_))
        ));
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("junit.xml");
        assert_eq!(
            read(&path, "").err(),
            Some(JunitError::Missing(path.clone()))
        );
        std::fs::create_dir(&path).expect("mkdir");
        assert!(matches!(read(&path, ""), Err(JunitError::Read { .. })));
    }
}
