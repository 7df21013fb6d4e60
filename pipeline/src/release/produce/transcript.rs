//! Transcripts of the child commands: their command line, result, stderr and stdout,
//! with host-specific strings replaced by fixed placeholders.
use super::child::ChildRun;

/// Replaces host-specific strings in a transcript with fixed placeholders.
pub(super) struct Normaliser {
    replacements: Vec<(String, &'static str)>,
}

impl Normaliser {
    pub(super) fn new(mut replacements: Vec<(String, &'static str)>) -> Self {
        replacements.retain(|(from, _)| from.len() > 1);
        // Longest first, so a path is replaced before any of its prefixes.
        replacements.sort_by_key(|r| std::cmp::Reverse(r.0.len()));
        Normaliser { replacements }
    }

    pub(super) fn apply(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (from, to) in &self.replacements {
            text = text.replace(from.as_str(), to);
        }
        elide_number(&text, "\"wall_time_ms\":")
    }
}

/// Replaces the number after each `key` with `"<elided>"` (wall time is host context).
fn elide_number(text: &str, key: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(index) = rest.find(key) {
        let (before, after) = rest.split_at(index + key.len());
        out.push_str(before);
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits > 0 {
            out.push_str("\"<elided>\"");
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

pub(super) fn transcript(run: &ChildRun, normaliser: &Normaliser) -> String {
    format!(
        "$ {}\nresult: {}\n--- stderr ---\n{}--- stdout ---\n{}",
        normaliser.apply(&run.command_line),
        run.outcome,
        ensure_newline(&normaliser.apply(&run.stderr)),
        ensure_newline(&normaliser.apply(&run.stdout)),
    )
}

fn ensure_newline(text: &str) -> String {
    if text.is_empty() || text.ends_with('\n') {
        text.to_owned()
    } else {
        format!("{text}\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normaliser_replaces_paths_and_elides_wall_time() {
        let n = Normaliser::new(vec![
            ("/tmp/s/runs".into(), "<runs>"),
            ("/tmp/s".into(), "<scratch>"),
        ]);
        assert_eq!(
            n.apply(r#"{"bundle_directory":"/tmp/s/runs/a/bundle","wall_time_ms":11984} /tmp/s/x"#),
            r#"{"bundle_directory":"<runs>/a/bundle","wall_time_ms":"<elided>"} <scratch>/x"#
        );
    }
}
