//! Path-free, host-free text: the check both `release-evidence` (before emitting) and
//! `verify-release` (on every file) apply.

/// Finds an absolute-path-looking token: a `/` that starts a token (at the start of the
/// text or after whitespace, a quote, `=`, `(`, `[`, `,` or `:`) and is followed by a
/// path character. URLs (`scheme://host/...`) and relative paths (`bundles/x`) pass.
/// Returns an excerpt around the first hit.
pub fn absolute_path_excerpt(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    for (index, &byte) in bytes.iter().enumerate() {
        if byte != b'/' {
            continue;
        }
        let starts_token = index == 0
            || matches!(
                bytes[index - 1],
                b' ' | b'\t' | b'\n' | b'\r' | b'"' | b'\'' | b'=' | b'(' | b'[' | b',' | b':'
            );
        let next_is_path = bytes
            .get(index + 1)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~'));
        if starts_token && next_is_path {
            return Some(excerpt(text, index));
        }
    }
    None
}

/// Up to 40 bytes either side of `index`, cut on character boundaries.
pub fn excerpt(text: &str, index: usize) -> String {
    let mut start = index.saturating_sub(40);
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let mut end = (index + 40).min(text.len());
    while !text.is_char_boundary(end) {
        end += 1;
    }
    text[start..end].to_owned()
}

/// The first of `needles` (non-empty) found in `text`, with an excerpt.
pub fn find_any<'a>(text: &str, needles: &'a [String]) -> Option<(&'a str, String)> {
    needles.iter().find_map(|needle| {
        if needle.is_empty() {
            return None;
        }
        text.find(needle.as_str())
            .map(|index| (needle.as_str(), excerpt(text, index)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_are_found_and_relative_ones_and_urls_pass() {
        for leak in [
            "/tmp/x",
            "bundle installed at /tmp/run/bundle",
            r#"{"bundle_directory":"/work/x"}"#,
            "path=/root/.cache",
            "x (/home/u)",
        ] {
            assert!(absolute_path_excerpt(leak).is_some(), "{leak}");
        }
        for fine in [
            "bundles/commit-after-rename/audit.json",
            "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion",
            "pkg:pypi/torch@2.13.0",
            "W4 -> W3, 1/2",
            "a / b",
            "urn:shardlift:release-evidence:v1",
        ] {
            assert_eq!(absolute_path_excerpt(fine), None, "{fine}");
        }
    }

    #[test]
    fn excerpts_respect_char_boundaries() {
        let text = format!("{}/tmp{}", "é".repeat(30), "ü".repeat(30));
        let index = text.find('/').expect("slash");
        assert!(excerpt(&text, index).contains("/tmp"));
    }
}
