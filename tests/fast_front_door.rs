//! The README is a front door: short, every reference page reachable from it, every
//! relative link resolving; and no work-history vocabulary (issue numbers, numbered work
//! periods, "wave N") in the README, the docs, the code's comments or the manifests —
//! history belongs in CHANGELOG.md.
use std::path::{Path, PathBuf};

const README_MAX_LINES: usize = 250;

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The relative link targets of markdown `[text](target)` and `![alt](target)`, without
/// their `#fragment`.
fn relative_links(markdown: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut rest = markdown;
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        let target = target.split('#').next().unwrap_or_default();
        if !target.is_empty() && !target.contains("://") && !target.contains(' ') {
            links.push(target.to_string());
        }
    }
    links
}

#[test]
fn the_readme_is_short() {
    let readme = read(&repository().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines; the front door keeps to {README_MAX_LINES} — move \
         reference material to a page under docs/ and link it"
    );
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let mut pages = vec![
        repository().join("README.md"),
        repository().join("CONTRIBUTING.md"),
    ];
    pages.extend(markdown_files(&repository().join("docs")));
    for page in pages {
        let base = page.parent().expect("a page has a directory");
        for link in relative_links(&read(&page)) {
            assert!(
                base.join(&link).exists(),
                "{} links to {link}, which does not exist",
                page.display()
            );
        }
    }
}

#[test]
fn every_reference_page_is_reachable_from_the_readme() {
    let readme = read(&repository().join("README.md"));
    let linked: Vec<PathBuf> = relative_links(&readme)
        .iter()
        .map(|link| repository().join(link))
        .collect();
    // One step further: pages linked from a page the README links.
    let mut reachable = linked.clone();
    for page in linked
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
    {
        if let (Some(base), Ok(text)) = (page.parent(), std::fs::read_to_string(page)) {
            reachable.extend(relative_links(&text).iter().map(|l| base.join(l)));
        }
    }
    let reachable: Vec<PathBuf> = reachable
        .iter()
        .filter_map(|p| p.canonicalize().ok())
        .collect();
    for page in markdown_files(&repository().join("docs")) {
        let page = page.canonicalize().expect("canonical path");
        assert!(
            reachable.contains(&page),
            "{} is not reachable from README.md",
            page.display()
        );
    }
}

fn markdown_files(dir: &Path) -> Vec<PathBuf> {
    files_under(dir, &["md"])
}

fn files_under(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|entry| entry.file_type().is_file())
        .map(|entry| entry.into_path())
        .filter(|path| {
            path.extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| extensions.contains(&e))
        })
        .collect()
}

/// The first history phrase in `line`, if any: "wave N", "session N", "issue N",
/// "work period", or an issue reference such as "(#15)" or "#16's".
fn history_phrase(line: &str) -> Option<String> {
    let lower = line.to_lowercase();
    for word in ["wave", "session", "sessions", "issue", "issues"] {
        let mut from = 0;
        while let Some(at) = lower[from..].find(word) {
            let start = from + at;
            let end = start + word.len();
            from = end;
            let starts_word = start == 0 || !lower.as_bytes()[start - 1].is_ascii_alphanumeric();
            let after = lower[end..].trim_start_matches([' ', '-', '#']);
            let spaced = lower[end..].len() != after.len() || word == "wave";
            if starts_word && spaced && after.starts_with(|c: char| c.is_ascii_digit()) {
                return Some(line[start..].chars().take(24).collect());
            }
        }
    }
    if lower.contains("work period") {
        return Some("work period".into());
    }
    let bytes = line.as_bytes();
    for (i, _) in line.match_indices('#') {
        // "(#15)", "#16's": an issue cited in prose. "#0 create a" (an operation's index
        // in a trace), "PKCS#8" and "(#1f2328)" are spared.
        let digits = line[i + 1..].bytes().take_while(u8::is_ascii_digit).count();
        let rest = &line[i + 1 + digits..];
        let opened = i > 0 && bytes[i - 1] == b'(';
        let glued = i > 0 && bytes[i - 1].is_ascii_alphanumeric();
        let number_ends = !rest.starts_with(|c: char| c.is_ascii_alphanumeric());
        let cited = rest.starts_with(')') || rest.starts_with("'s");
        if (1..=3).contains(&digits) && !glued && number_ends && (opened || cited) {
            return Some(line[i..].chars().take(24).collect());
        }
    }
    None
}

#[test]
fn no_history_vocabulary_outside_the_changelog() {
    let root = repository();
    let mut files = vec![
        root.join("README.md"),
        root.join("CONTRIBUTING.md"),
        root.join("SECURITY.md"),
        root.join("Cargo.toml"),
        root.join("pipeline/Cargo.toml"),
        root.join("flake.nix"),
    ];
    files.extend(markdown_files(&root.join("docs")));
    files.extend(files_under(&root.join("src"), &["rs"]));
    files.extend(files_under(&root.join("pipeline/src"), &["rs"]));
    files.extend(files_under(&root.join("tests"), &["rs", "py"]));
    files.extend(
        std::fs::read_dir(root.join("ci"))
            .expect("ci/")
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .filter(|path| path.is_file() && path.extension().is_none()),
    );
    let this_test = root.join("tests/fast_front_door.rs");
    let mut found = Vec::new();
    for file in files.into_iter().filter(|f| *f != this_test) {
        for (number, line) in read(&file).lines().enumerate() {
            if let Some(phrase) = history_phrase(line) {
                found.push(format!("{}:{}: {phrase}", file.display(), number + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "history vocabulary (keep it in CHANGELOG.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_history_check_catches_each_phrase_and_spares_ordinary_text() {
    for caught in [
        "as #16's ratio says",
        "documented (#15); a new room",
        "the wave-1 machines",
        "in wave 3",
        "session 17, the same machine",
        "Session 6 (framed IPC)",
        "see issue 36",
        "see issue #36",
        "merged in (#12)",
        "in the next work period",
    ] {
        assert!(history_phrase(caught).is_some(), "missed: {caught}");
    }
    for spared in [
        "five coordinator sessions (genesis W4)",
        "#[derive(Debug)]",
        "PKCS#8 key",
        "a session's outcome",
        "color #ffffff",
        "PKCS#8), both valid",
        "(#1f2328) drawn",
        "#4 fsync b entered before #3, #5 create marker.",
        "#0 create a, #1 create b (other thread)",
        "(entered before #1: #1 to #1 completed)",
        "issues a request",
        "`#![forbid(unsafe_code)]`",
    ] {
        assert_eq!(history_phrase(spared), None, "flagged: {spared}");
    }
}
