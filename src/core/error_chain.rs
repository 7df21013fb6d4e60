//! One line for an error and its causes, for messages that cross a process boundary or
//! reach a person (a worker's `Failure`, an S3 request's failure).

/// Most causes followed; a longer chain is cut there (no error here nests deeper).
pub const MAX_SOURCES: usize = 16;

/// The error and each of its sources, joined by ": ". A source whose text the line
/// already contains is skipped: many errors repeat their source in their own message,
/// and some (object_store's, reqwest's) keep the decisive cause, such as a TLS
/// certificate's rejection, only in a source.
pub fn error_chain_text(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    for _ in 0..MAX_SOURCES {
        let Some(cause) = source else { break };
        let cause_text = cause.to_string();
        if !cause_text.is_empty() && !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Link {
        text: &'static str,
        #[source]
        source: Option<Box<Link>>,
    }

    fn chain(texts: &[&'static str]) -> Link {
        texts
            .iter()
            .rev()
            .fold(None, |source, text| {
                Some(Link {
                    text,
                    source: source.map(Box::new),
                })
            })
            .expect("at least one link")
    }

    #[test]
    fn every_cause_is_joined_once_in_order() {
        let error = chain(&[
            "error sending request",
            "client error (Connect)",
            "invalid peer certificate: UnknownIssuer",
        ]);
        assert_eq!(
            error_chain_text(&error),
            "error sending request: client error (Connect): invalid peer certificate: UnknownIssuer"
        );
    }

    #[test]
    fn a_cause_the_line_already_says_is_not_repeated() {
        let error = chain(&[
            "optimizer: step must be at least 1",
            "step must be at least 1",
            "",
        ]);
        assert_eq!(
            error_chain_text(&error),
            "optimizer: step must be at least 1"
        );
    }

    #[test]
    fn a_chain_longer_than_the_cap_is_cut_there() {
        let texts: Vec<&'static str> = (0..40)
            .map(|i| &*Box::leak(format!("cause {i:02}").into_boxed_str()))
            .collect();
        let text = error_chain_text(&chain(&texts));
        assert!(text.ends_with(&format!("cause {MAX_SOURCES:02}")), "{text}");
        assert!(
            !text.contains(&format!("cause {:02}", MAX_SOURCES + 1)),
            "{text}"
        );
    }
}
