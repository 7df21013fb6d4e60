//! Checks bytes against the pins: gzip files, decompression with a cap, payloads.
use std::io::{self, Read};

use crate::core::digest::Digest;
use crate::dataset::error::DatasetError;
use crate::dataset::idx;
use crate::dataset::pins::ResourcePin;

/// Checks a downloaded `.gz` against the canonical upstream pin (size and SHA-256).
pub(crate) fn verify_gzip(pin: &ResourcePin, url: &str, gzip: &[u8]) -> Result<(), DatasetError> {
    let actual = Digest::of(gzip);
    if gzip.len() as u64 != pin.gzip.bytes || actual != pin.gzip.sha256 {
        return Err(DatasetError::GzipDigestMismatch {
            name: pin.name.to_owned(),
            url: url.to_owned(),
            expected: pin.gzip.sha256,
            actual,
            actual_bytes: gzip.len() as u64,
        });
    }
    Ok(())
}

/// Decompresses one complete gzip member, refusing more than the pinned payload size,
/// a truncated or corrupt stream, and bytes after the end of the member.
pub(crate) fn gunzip(
    pin: &ResourcePin,
    origin: &str,
    gzip: &[u8],
) -> Result<Vec<u8>, DatasetError> {
    let limit = pin.payload.bytes;
    let mut decoder = flate2::bufread::GzDecoder::new(gzip);
    let mut payload = Vec::new();
    let read = (&mut decoder)
        .take(limit.saturating_add(1))
        .read_to_end(&mut payload);
    if payload.len() as u64 > limit {
        return Err(DatasetError::DecompressedTooLarge {
            name: pin.name.to_owned(),
            origin: origin.to_owned(),
            limit,
        });
    }
    match read {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(DatasetError::TruncatedGzip {
                name: pin.name.to_owned(),
                origin: origin.to_owned(),
            })
        }
        Err(error) => {
            return Err(DatasetError::GzipCorrupt {
                name: pin.name.to_owned(),
                origin: origin.to_owned(),
                detail: error.to_string(),
            })
        }
    }
    if !decoder.into_inner().is_empty() {
        return Err(DatasetError::GzipTrailingData {
            name: pin.name.to_owned(),
            origin: origin.to_owned(),
        });
    }
    Ok(payload)
}

/// Parses the payload strictly as the resource's IDX kind, then checks its size and
/// SHA-256 against the payload pin.
pub(crate) fn verify_payload(
    pin: &ResourcePin,
    origin: &str,
    payload: &[u8],
) -> Result<(), DatasetError> {
    idx::validate(pin.name, pin.resource.kind(), payload)?;
    if payload.len() as u64 != pin.payload.bytes {
        return Err(DatasetError::PayloadSizeMismatch {
            name: pin.name.to_owned(),
            origin: origin.to_owned(),
            expected: pin.payload.bytes,
            actual: payload.len() as u64,
        });
    }
    let actual = Digest::of(payload);
    if actual != pin.payload.sha256 {
        return Err(DatasetError::PayloadDigestMismatch {
            name: pin.name.to_owned(),
            origin: origin.to_owned(),
            expected: pin.payload.sha256,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::dataset::pins::{ContentPin, Resource, FASHION_MNIST};

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(bytes).expect("gzip");
        encoder.finish().expect("gzip")
    }

    fn labels_pin(payload: &[u8], compressed: &[u8]) -> ResourcePin {
        let mut pin = *FASHION_MNIST.get(Resource::TestLabels);
        pin.payload = ContentPin {
            bytes: payload.len() as u64,
            sha256: Digest::of(payload),
        };
        pin.gzip = ContentPin {
            bytes: compressed.len() as u64,
            sha256: Digest::of(compressed),
        };
        pin
    }

    #[test]
    fn gunzip_accepts_exact_and_rejects_the_rest() {
        let payload = idx::encode_labels(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 0]).expect("labels");
        let compressed = gzip(&payload);
        let pin = labels_pin(&payload, &compressed);
        assert_eq!(gunzip(&pin, "t", &compressed).ok(), Some(payload.clone()));
        assert!(verify_gzip(&pin, "u", &compressed).is_ok());
        assert!(verify_payload(&pin, "t", &payload).is_ok());

        for cut in [0, 5, 12, compressed.len() - 9, compressed.len() - 1] {
            assert!(
                matches!(
                    gunzip(&pin, "t", &compressed[..cut]),
                    Err(DatasetError::TruncatedGzip { .. })
                ),
                "cut at {cut}: {:?}",
                gunzip(&pin, "t", &compressed[..cut])
            );
        }
        let mut trailing = compressed.clone();
        trailing.extend_from_slice(&compressed);
        assert!(matches!(
            gunzip(&pin, "t", &trailing),
            Err(DatasetError::GzipTrailingData { .. })
        ));
        let mut bad_crc = compressed.clone();
        let crc_at = bad_crc.len() - 8;
        bad_crc[crc_at] ^= 1;
        assert!(matches!(
            gunzip(&pin, "t", &bad_crc),
            Err(DatasetError::GzipCorrupt { .. })
        ));
        let mut small = pin;
        small.payload.bytes -= 1;
        assert!(matches!(
            gunzip(&small, "t", &compressed),
            Err(DatasetError::DecompressedTooLarge { .. })
        ));
        assert!(matches!(
            verify_payload(&small, "t", &payload),
            Err(DatasetError::PayloadSizeMismatch { .. })
        ));
        let mut other = payload.clone();
        other[8] = 0;
        assert!(matches!(
            verify_payload(&pin, "t", &other),
            Err(DatasetError::PayloadDigestMismatch { .. })
        ));
        assert!(matches!(
            verify_gzip(&pin, "u", &trailing),
            Err(DatasetError::GzipDigestMismatch { .. })
        ));
    }
}
