//! SSH signatures in OpenSSH's SSHSIG format (`ssh-keygen -Y sign|verify`).
//!
//! Signing uses a local OpenSSH private key (unencrypted; Ed25519 is what this build
//! supports) and SHA-512, as `ssh-keygen -Y sign` does. Verification checks the signature
//! against an OpenSSH `allowed_signers` file (see `ssh-keygen(1)`, "ALLOWED SIGNERS"), so
//! `ssh-keygen -Y verify -f allowed_signers -I principal -n namespace -s sig` accepts the
//! same signatures and this module accepts those made by `ssh-keygen -Y sign`.
//!
//! Verification order, each failure with its own error: the armor parses; some
//! `allowed_signers` line holds the signing key ([`SshSigError::UnknownSigner`]); the
//! signature is valid over the message ([`SshSigError::BadSignature`]); it was made for the
//! requested namespace ([`SshSigError::WrongNamespace`]); the line's `namespaces="…"`
//! option, if any, admits the namespace ([`SshSigError::NamespaceNotAllowed`]); the line's
//! `valid-after`/`valid-before` window, if any, contains the present time
//! ([`SshSigError::OutsideValidity`]). Lines marked `cert-authority` name certificate
//! authorities; they never match a plain-key signature.
use std::path::{Path, PathBuf};

use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};

/// Why a signature could not be made or was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SshSigError {
    /// A private key or `allowed_signers` file could not be read.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error's message.
        message: String,
    },
    /// The private key file does not parse as an OpenSSH private key.
    #[error("{path} is not an OpenSSH private key: {message}")]
    PrivateKey {
        /// The key file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// The private key is passphrase-protected.
    #[error("{path} is encrypted; signing needs an unencrypted key (ssh-keygen -N '')")]
    EncryptedKey {
        /// The key file.
        path: PathBuf,
    },
    /// The namespace given to sign or verify is empty (SSHSIG requires one).
    #[error("the namespace must not be empty")]
    EmptyNamespace,
    /// Signing or armoring failed (e.g. a key algorithm this build does not support).
    #[error("cannot sign: {0}")]
    Sign(String),
    /// The signature text is not a PEM-armored SSHSIG blob.
    #[error("not an armored SSH signature: {0}")]
    MalformedSignature(String),
    /// A line of the `allowed_signers` file does not parse.
    #[error("{path}:{line}: not a valid allowed_signers line: {reason}")]
    MalformedAllowedSigners {
        /// The `allowed_signers` file.
        path: PathBuf,
        /// The line number, 1-based.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// No plain-key line of the `allowed_signers` file holds the signing key.
    #[error("the signing key {fingerprint} is not listed in {path}")]
    UnknownSigner {
        /// The `allowed_signers` file.
        path: PathBuf,
        /// The signing key's SHA-256 fingerprint (`SHA256:…`).
        fingerprint: String,
    },
    /// The signature is not valid over the message under the listed key.
    #[error("the signature does not match the message (tampered message or signature)")]
    BadSignature,
    /// The signature is genuine but was made for another namespace.
    #[error("the signature was made for namespace {found:?}, not {expected:?}")]
    WrongNamespace {
        /// The namespace requested.
        expected: String,
        /// The namespace the signature names.
        found: String,
    },
    /// The matching line's `namespaces="…"` option does not admit the namespace.
    #[error(
        "{path}:{line}: the signer {principal} is not allowed to sign in namespace {namespace:?}"
    )]
    NamespaceNotAllowed {
        /// The `allowed_signers` file.
        path: PathBuf,
        /// The matching line, 1-based.
        line: usize,
        /// The line's principals field.
        principal: String,
        /// The namespace requested.
        namespace: String,
    },
    /// The present time is outside the matching line's `valid-after`/`valid-before` window.
    #[error("{path}:{line}: the key of {principal} is not valid at this time ({window})")]
    OutsideValidity {
        /// The `allowed_signers` file.
        path: PathBuf,
        /// The matching line, 1-based.
        line: usize,
        /// The line's principals field.
        principal: String,
        /// The window, in Unix seconds, as text.
        window: String,
    },
}

/// Signs `message` with the OpenSSH private key at `private_key_path` in `namespace`;
/// returns the armored signature (`-----BEGIN SSH SIGNATURE-----`, LF line endings,
/// ending in a newline, as `ssh-keygen -Y sign` writes it).
pub fn sign(
    private_key_path: &Path,
    namespace: &str,
    message: &[u8],
) -> Result<String, SshSigError> {
    if namespace.is_empty() {
        return Err(SshSigError::EmptyNamespace);
    }
    let text = std::fs::read_to_string(private_key_path).map_err(|e| SshSigError::Read {
        path: private_key_path.to_owned(),
        message: e.to_string(),
    })?;
    let key = PrivateKey::from_openssh(&text).map_err(|e| SshSigError::PrivateKey {
        path: private_key_path.to_owned(),
        message: e.to_string(),
    })?;
    if key.is_encrypted() {
        return Err(SshSigError::EncryptedKey {
            path: private_key_path.to_owned(),
        });
    }
    let signature = key
        .sign(namespace, HashAlg::Sha512, message)
        .map_err(|e| SshSigError::Sign(e.to_string()))?;
    let mut armored = signature
        .to_pem(LineEnding::LF)
        .map_err(|e| SshSigError::Sign(e.to_string()))?;
    if !armored.ends_with('\n') {
        armored.push('\n');
    }
    Ok(armored)
}

/// Verifies the armored signature `armored` over `message` in `namespace` against the
/// OpenSSH `allowed_signers` file; returns the principals field of the matching line
/// (for the usual one-principal line, that principal).
pub fn verify(
    allowed_signers: &Path,
    namespace: &str,
    message: &[u8],
    armored: &str,
) -> Result<String, SshSigError> {
    if namespace.is_empty() {
        return Err(SshSigError::EmptyNamespace);
    }
    let signature = SshSig::from_pem(armored.trim())
        .map_err(|e| SshSigError::MalformedSignature(e.to_string()))?;
    let text = std::fs::read_to_string(allowed_signers).map_err(|e| SshSigError::Read {
        path: allowed_signers.to_owned(),
        message: e.to_string(),
    })?;
    let entries = parse_allowed_signers(allowed_signers, &text)?;
    let entry = entries
        .iter()
        .find(|entry| !entry.cert_authority && entry.key.key_data() == signature.public_key())
        .ok_or_else(|| SshSigError::UnknownSigner {
            path: allowed_signers.to_owned(),
            fingerprint: PublicKey::from(signature.public_key().clone())
                .fingerprint(HashAlg::Sha256)
                .to_string(),
        })?;
    // The cryptographic check runs under the namespace the signature names, so a genuine
    // signature made for another purpose is reported as exactly that.
    entry
        .key
        .verify(signature.namespace(), message, &signature)
        .map_err(|_| SshSigError::BadSignature)?;
    if signature.namespace() != namespace {
        return Err(SshSigError::WrongNamespace {
            expected: namespace.to_owned(),
            found: signature.namespace().to_owned(),
        });
    }
    if let Some(allowed) = &entry.namespaces {
        if !allowed
            .iter()
            .any(|pattern| pattern_match(pattern, namespace))
        {
            return Err(SshSigError::NamespaceNotAllowed {
                path: allowed_signers.to_owned(),
                line: entry.line,
                principal: entry.principals.clone(),
                namespace: namespace.to_owned(),
            });
        }
    }
    let now = time::OffsetDateTime::now_utc().unix_timestamp();
    let too_early = entry.valid_after.is_some_and(|after| now < after);
    let too_late = entry.valid_before.is_some_and(|before| now > before);
    if too_early || too_late {
        return Err(SshSigError::OutsideValidity {
            path: allowed_signers.to_owned(),
            line: entry.line,
            principal: entry.principals.clone(),
            window: format!(
                "valid-after {:?}, valid-before {:?} (Unix seconds)",
                entry.valid_after, entry.valid_before
            ),
        });
    }
    Ok(entry.principals.clone())
}

/// One line of an `allowed_signers` file.
struct AllowedSigner {
    line: usize,
    principals: String,
    cert_authority: bool,
    namespaces: Option<Vec<String>>,
    valid_after: Option<i64>,
    valid_before: Option<i64>,
    key: PublicKey,
}

fn parse_allowed_signers(path: &Path, text: &str) -> Result<Vec<AllowedSigner>, SshSigError> {
    let mut entries = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let malformed = |reason: String| SshSigError::MalformedAllowedSigners {
            path: path.to_owned(),
            line,
            reason,
        };
        let (principals, rest) = split_field(trimmed);
        let principals = principals.trim_matches('"').to_owned();
        if principals.is_empty() || rest.is_empty() {
            return Err(malformed("expected principals, [options,] key".into()));
        }
        // The options field is optional: when `rest` already parses as a key, there is none.
        let (options, key) = match PublicKey::from_openssh(rest) {
            Ok(key) => ("", key),
            Err(_) => {
                let (options, key) = split_field(rest);
                let key = PublicKey::from_openssh(key)
                    .map_err(|e| malformed(format!("not an OpenSSH public key: {e}")))?;
                (options, key)
            }
        };
        let mut entry = AllowedSigner {
            line,
            principals,
            cert_authority: false,
            namespaces: None,
            valid_after: None,
            valid_before: None,
            key,
        };
        for option in split_options(options).into_iter().filter(|o| !o.is_empty()) {
            let (name, value) = match option.split_once('=') {
                Some((name, value)) => (name, Some(value.trim_matches('"'))),
                None => (option, None),
            };
            match (name.to_ascii_lowercase().as_str(), value) {
                ("cert-authority", None) => entry.cert_authority = true,
                ("namespaces", Some(list)) => {
                    entry.namespaces = Some(list.split(',').map(str::to_owned).collect())
                }
                ("valid-after", Some(stamp)) => {
                    entry.valid_after = Some(parse_validity(stamp).map_err(&malformed)?)
                }
                ("valid-before", Some(stamp)) => {
                    entry.valid_before = Some(parse_validity(stamp).map_err(&malformed)?)
                }
                _ => return Err(malformed(format!("unknown option {option:?}"))),
            }
        }
        entries.push(entry);
    }
    Ok(entries)
}

/// Splits off the first whitespace-separated field, honouring double quotes.
fn split_field(text: &str) -> (&str, &str) {
    let mut quoted = false;
    for (at, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&text[..at], text[at..].trim_start()),
            _ => {}
        }
    }
    (text, "")
}

/// Splits a comma-separated option list, honouring double quotes.
fn split_options(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quoted = false;
    let mut start = 0;
    for (at, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                out.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

/// `YYYYMMDD[HHMM[SS]][Z]`, read as UTC (ssh-keygen reads a stamp without `Z` as local
/// time; the machines this runs on keep UTC). Returns Unix seconds.
fn parse_validity(stamp: &str) -> Result<i64, String> {
    let digits = stamp.strip_suffix('Z').unwrap_or(stamp);
    let bad = || format!("bad validity time {stamp:?} (want YYYYMMDD[HHMM[SS]][Z])");
    if !digits.bytes().all(|b| b.is_ascii_digit()) || ![8, 12, 14].contains(&digits.len()) {
        return Err(bad());
    }
    let number = |range: std::ops::Range<usize>| -> Result<u32, String> {
        digits
            .get(range)
            .unwrap_or("0")
            .parse::<u32>()
            .map_err(|_| bad())
    };
    let year = i32::try_from(number(0..4)?).map_err(|_| bad())?;
    let month = time::Month::try_from(u8::try_from(number(4..6)?).map_err(|_| bad())?)
        .map_err(|_| bad())?;
    let day = u8::try_from(number(6..8)?).map_err(|_| bad())?;
    let (hour, minute, second) = if digits.len() >= 12 {
        (
            number(8..10)?,
            number(10..12)?,
            if digits.len() == 14 {
                number(12..14)?
            } else {
                0
            },
        )
    } else {
        (0, 0, 0)
    };
    let date = time::Date::from_calendar_date(year, month, day).map_err(|_| bad())?;
    let clock = time::Time::from_hms(
        u8::try_from(hour).map_err(|_| bad())?,
        u8::try_from(minute).map_err(|_| bad())?,
        u8::try_from(second).map_err(|_| bad())?,
    )
    .map_err(|_| bad())?;
    Ok(time::PrimitiveDateTime::new(date, clock)
        .assume_utc()
        .unix_timestamp())
}

/// OpenSSH pattern matching: `*` any run, `?` any one character.
fn pattern_match(pattern: &str, text: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && (pattern[p] == '?' || pattern[p] == text[t]) {
            p += 1;
            t += 1;
        } else if p < pattern.len() && pattern[p] == '*' {
            star = Some((p, t));
            p += 1;
        } else if let Some((star_p, star_t)) = star {
            p = star_p + 1;
            t = star_t + 1;
            star = Some((star_p, star_t + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        assert!(pattern_match("shardlift-*", "shardlift-receipt-v1"));
        assert!(pattern_match("a?c", "abc"));
        assert!(!pattern_match("a?c", "abbc"));
        assert!(pattern_match("*", ""));
        assert!(!pattern_match("file", "git"));
    }

    #[test]
    fn option_and_field_splitting() {
        assert_eq!(
            split_field(r#"a@b namespaces="x,y" ssh-ed25519 AAAA c"#),
            ("a@b", r#"namespaces="x,y" ssh-ed25519 AAAA c"#)
        );
        assert_eq!(
            split_options(r#"cert-authority,namespaces="x,y""#),
            vec!["cert-authority", r#"namespaces="x,y""#]
        );
        assert_eq!(parse_validity("19700102"), Ok(86_400));
        assert_eq!(parse_validity("197001010001Z"), Ok(60));
        assert!(parse_validity("1970").is_err());
        assert!(parse_validity("19701301").is_err());
    }
}
