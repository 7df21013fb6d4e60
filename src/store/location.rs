//! Where a store lives: a directory, or a prefix in an S3 bucket. Parsed once, from
//! `--store`, and carried as it is.
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A store's location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A store directory on a local file system.
    Dir(PathBuf),
    /// A store under a prefix of an S3 bucket (RFC 0001 §9).
    S3(S3Location),
}

/// A location that is not a usable `s3://bucket[/prefix]`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{url:?} is not an s3://bucket[/prefix] location: {reason}")]
pub struct LocationError {
    /// The location as given.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

impl FromStr for Location {
    type Err = LocationError;

    /// `s3://…` is an object-store location (which must parse); anything else a directory.
    fn from_str(text: &str) -> Result<Self, LocationError> {
        if text.starts_with(S3_SCHEME) {
            S3Location::parse(text).map(Location::S3)
        } else {
            Ok(Location::Dir(PathBuf::from(text)))
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Dir(dir) => write!(f, "{}", dir.display()),
            Location::S3(s3) => f.write_str(&s3.url()),
        }
    }
}

/// The scheme an object-store location starts with.
const S3_SCHEME: &str = "s3://";

/// `s3://bucket[/prefix]`: where a store lives in a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Location {
    /// The bucket name.
    pub bucket: String,
    /// The key prefix without leading or trailing `/` (empty: the bucket's root).
    pub prefix: String,
}

impl S3Location {
    /// Parses `s3://bucket[/prefix]`. The prefix's segments must be non-empty and made of
    /// ASCII letters, digits and `-_.` (no `.`/`..` segments).
    pub fn parse(url: &str) -> Result<Self, LocationError> {
        let bad = |reason: &str| LocationError {
            url: url.to_owned(),
            reason: reason.to_owned(),
        };
        let rest = url
            .strip_prefix(S3_SCHEME)
            .ok_or_else(|| bad("it does not start with s3://"))?;
        let rest = rest.trim_end_matches('/');
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok {
            return Err(bad(
                "the bucket name must be 3-63 characters of a-z, 0-9, '-' and '.'",
            ));
        }
        if !prefix.is_empty() {
            for segment in prefix.split('/') {
                let ok = !segment.is_empty()
                    && segment != "."
                    && segment != ".."
                    && segment
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
                if !ok {
                    return Err(bad(
                        "prefix segments must be non-empty ASCII letters, digits, '-', '_' or '.'",
                    ));
                }
            }
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// The location as a URL.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The bucket key of `rel` (a key relative to the store).
    pub fn key(&self, rel: &str) -> String {
        if self.prefix.is_empty() {
            rel.to_owned()
        } else {
            format!("{}/{rel}", self.prefix)
        }
    }

    /// The full URL of `rel`, used to name keys in errors and reports.
    pub fn key_url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.url())
    }
}

impl FromStr for S3Location {
    type Err = LocationError;

    fn from_str(text: &str) -> Result<Self, LocationError> {
        S3Location::parse(text)
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.url())
    }
}
