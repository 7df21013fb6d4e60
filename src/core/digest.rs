//! SHA-256 content digests and their lowercase-hex text form.
use std::fmt;

use sha2::{Digest as _, Sha256};

/// A SHA-256 digest. Its text form is exactly 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest(pub [u8; 32]);

/// Why a string is not a digest.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DigestParseError {
    /// The text is not 64 characters long (its length).
    #[error("a SHA-256 digest is 64 hex digits, got {0} characters")]
    WrongLength(usize),
    /// The text holds a character outside `[0-9a-f]`.
    #[error("a SHA-256 digest is lowercase hex, got a character outside [0-9a-f]")]
    NotLowercaseHex,
}

impl Digest {
    /// Digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest(Sha256::digest(bytes).into())
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        self.hex_str(&mut [0u8; 64]).to_owned()
    }

    /// Writes the 64 lowercase hex digits into `buffer` and returns them as text (no
    /// allocation: a manifest serialises tens of thousands of digests).
    fn hex_str<'a>(&self, buffer: &'a mut [u8; 64]) -> &'a str {
        for (pair, byte) in buffer.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX_DIGITS[usize::from(byte >> 4)];
            pair[1] = HEX_DIGITS[usize::from(byte & 0x0f)];
        }
        // Every byte written above is an ASCII digit or letter.
        std::str::from_utf8(buffer).unwrap_or_default()
    }

    /// Parses exactly 64 lowercase hex digits (the only form this project writes).
    pub fn from_hex(text: &str) -> Result<Self, DigestParseError> {
        if text.len() != 64 {
            return Err(DigestParseError::WrongLength(text.len()));
        }
        let mut out = [0u8; 32];
        for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
            match (hex_value(pair[0]), hex_value(pair[1])) {
                (Some(high), Some(low)) => *byte = (high << 4) | low,
                _ => return Err(DigestParseError::NotLowercaseHex),
            }
        }
        Ok(Digest(out))
    }
}

/// The lowercase hex digits, by value.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// The value of one lowercase hex digit (`None` for anything else, uppercase included).
fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex_str(&mut [0u8; 64]))
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.hex_str(&mut [0u8; 64]))
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        Digest::from_hex(&text).map_err(serde::de::Error::custom)
    }
}

/// Incremental SHA-256 with domain-separated, length-framed fields.
///
/// Every field is written as its length (u64 LE) then its bytes, so no two different
/// field sequences hash alike.
pub struct FramedHasher(Sha256);

impl FramedHasher {
    /// Starts a hash whose first field is the domain tag.
    pub fn new(domain: &str) -> Self {
        let mut hasher = FramedHasher(Sha256::new());
        hasher.field(domain.as_bytes());
        hasher
    }

    /// Adds one length-framed field.
    pub fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update((bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    /// Adds a u64 as an 8-byte field.
    pub fn u64(&mut self, value: u64) -> &mut Self {
        self.field(&value.to_le_bytes())
    }

    /// The digest of the domain and every field, in order.
    pub fn finish(self) -> Digest {
        Digest(self.0.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip_and_rejections() {
        let digest = Digest::of(b"abc");
        assert_eq!(
            digest.to_hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(Digest::from_hex(&digest.to_hex()), Ok(digest));
        assert_eq!(
            Digest::from_hex("ab"),
            Err(DigestParseError::WrongLength(2))
        );
        let upper = digest.to_hex().to_uppercase();
        assert_eq!(
            Digest::from_hex(&upper),
            Err(DigestParseError::NotLowercaseHex)
        );
    }

    #[test]
    fn hex_agrees_with_the_hex_crate_and_refuses_every_other_digit() {
        for seed in 0u8..=255 {
            let digest = Digest::of(&[seed]);
            let text = digest.to_hex();
            assert_eq!(text, hex::encode(digest.0));
            assert_eq!(digest.to_string(), text);
            assert_eq!(
                serde_json::to_string(&digest).expect("json"),
                format!("\"{text}\"")
            );
            assert_eq!(Digest::from_hex(&text), Ok(digest));
        }
        let valid = Digest::of(b"x").to_hex();
        for byte in 0u8..=127 {
            if byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte) {
                continue;
            }
            for at in [0, 33, 63] {
                let mut bytes = valid.clone().into_bytes();
                bytes[at] = byte;
                let text = String::from_utf8(bytes).expect("ascii");
                assert_eq!(
                    Digest::from_hex(&text),
                    Err(DigestParseError::NotLowercaseHex),
                    "{byte} at {at}"
                );
            }
        }
        // 64 bytes that are not 64 characters: a two-byte character is refused too.
        let wide = format!("é{}", &valid[2..]);
        assert_eq!(wide.len(), 64);
        assert_eq!(
            Digest::from_hex(&wide),
            Err(DigestParseError::NotLowercaseHex)
        );
    }

    #[test]
    fn framing_separates_fields() {
        let mut a = FramedHasher::new("t");
        a.field(b"ab").field(b"c");
        let mut b = FramedHasher::new("t");
        b.field(b"a").field(b"bc");
        assert_ne!(a.finish(), b.finish());
    }
}
