//! `SHA256SUMS` in GNU coreutils format: one `<64 lowercase hex><two spaces><path>` line
//! per file, LF-terminated, sorted by path, so `sha256sum -c --strict SHA256SUMS` checks it.
use shardlift::core::digest::Digest;

use super::error::ReleaseError;

/// Renders `entries` (path, digest) as `SHA256SUMS` text, sorted by path.
pub fn render(entries: &[(String, Digest)]) -> String {
    let mut sorted: Vec<&(String, Digest)> = entries.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut text = String::new();
    for (path, digest) in sorted {
        text.push_str(&digest.to_hex());
        text.push_str("  ");
        text.push_str(path);
        text.push('\n');
    }
    text
}

/// Whether `path` is a relative, normalised path this project writes: `/`-separated
/// components of `[A-Za-z0-9._-]`, none of them `.` or `..`.
pub fn is_plain_relative_path(path: &str) -> bool {
    !path.is_empty()
        && path.split('/').all(|component| {
            !component.is_empty()
                && component != "."
                && component != ".."
                && component
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        })
}

/// Parses `SHA256SUMS` strictly: the exact form [`render`] writes (text mode, sorted,
/// unique, plain relative paths, final newline).
pub fn parse(text: &str) -> Result<Vec<(String, Digest)>, ReleaseError> {
    let malformed = |line: usize, reason: &str| ReleaseError::MalformedSums {
        line,
        reason: reason.to_owned(),
    };
    if text.is_empty() {
        return Err(malformed(1, "the file is empty"));
    }
    if !text.ends_with('\n') {
        return Err(malformed(
            text.lines().count(),
            "the last line has no newline",
        ));
    }
    let mut entries: Vec<(String, Digest)> = Vec::new();
    for (index, line) in text.split_terminator('\n').enumerate() {
        let number = index + 1;
        let (hex, path) = line
            .split_once("  ")
            .ok_or_else(|| malformed(number, "not `<sha256>  <path>`"))?;
        let digest =
            Digest::from_hex(hex).map_err(|e| malformed(number, &format!("bad digest: {e}")))?;
        if !is_plain_relative_path(path) {
            return Err(malformed(
                number,
                &format!("{path:?} is not a plain relative path"),
            ));
        }
        if let Some((previous, _)) = entries.last() {
            if previous.as_str() >= path {
                return Err(malformed(number, "paths are not sorted and unique"));
            }
        }
        entries.push((path.to_owned(), digest));
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_then_parse_round_trips() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        let text = render(&[("z/b.txt".into(), b), ("a.json".into(), a)]);
        assert_eq!(
            text,
            format!("{}  a.json\n{}  z/b.txt\n", a.to_hex(), b.to_hex())
        );
        assert_eq!(
            parse(&text).expect("parse"),
            vec![("a.json".into(), a), ("z/b.txt".into(), b)]
        );
    }

    #[test]
    fn parse_refuses_every_deviation() {
        let a = Digest::of(b"a").to_hex();
        for bad in [
            String::new(),
            format!("{a}  a.json"),
            format!("{a} *a.json\n"),
            format!("{a}  /etc/passwd\n"),
            format!("{a}  ../a.json\n"),
            format!("{a}  b\n{a}  a\n"),
            format!("{a}  a\n{a}  a\n"),
            format!("{}  a\n", a.to_uppercase()),
            "nothex  a\n".to_owned(),
        ] {
            assert!(
                matches!(parse(&bad), Err(ReleaseError::MalformedSums { .. })),
                "{bad:?}"
            );
        }
    }
}
