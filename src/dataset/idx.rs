//! Strict parsing of the IDX files Fashion-MNIST ships.
//!
//! Only the two shapes the dataset uses are accepted:
//!
//! * images: magic `0x00000803` (unsigned bytes, 3 dimensions), dimensions `(n, 28, 28)`;
//! * labels: magic `0x00000801` (unsigned bytes, 1 dimension), dimension `(n)`, every
//!   label in `0..10`.
//!
//! The header is big-endian. The file length must be exactly the header plus the product
//! of the dimensions (computed with checked arithmetic), and `n` is capped at
//! [`MAX_COUNT`]. Parsing never copies: it returns views into the given bytes.
use crate::dataset::error::DatasetError;
use crate::dataset::pins::IdxKind;

/// Magic number of an IDX file of unsigned bytes with three dimensions.
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic number of an IDX file of unsigned bytes with one dimension.
pub const LABELS_MAGIC: u32 = 0x0000_0801;
/// Rows of one image.
pub const IMAGE_ROWS: usize = 28;
/// Columns of one image.
pub const IMAGE_COLUMNS: usize = 28;
/// Bytes of one image (row-major, one byte per pixel).
pub const IMAGE_BYTES: usize = IMAGE_ROWS * IMAGE_COLUMNS;
/// Number of label classes; every label is below it.
pub const CLASSES: u8 = 10;
/// The largest item count accepted in one file (Fashion-MNIST has 60 000 at most).
pub const MAX_COUNT: u32 = 1_000_000;

/// A parsed image file: `count` images of [`IMAGE_BYTES`] bytes each, row-major.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Images<'a> {
    /// The number of images, `n` of the header.
    pub count: usize,
    /// The `count * IMAGE_BYTES` bytes after the header, image `i` at
    /// `i * IMAGE_BYTES .. (i + 1) * IMAGE_BYTES`.
    pub pixels: &'a [u8],
}

/// Parses an image file strictly; `name` is only used in error messages.
pub fn parse_images<'a>(name: &str, bytes: &'a [u8]) -> Result<Images<'a>, DatasetError> {
    let (dimensions, body) = header(name, bytes, IdxKind::Images)?;
    let [count, rows, columns] = dimensions[..] else {
        return Err(dimensions_error(name, &dimensions, "expected 3 dimensions"));
    };
    if rows as usize != IMAGE_ROWS || columns as usize != IMAGE_COLUMNS {
        return Err(dimensions_error(
            name,
            &dimensions,
            "images must be 28 rows by 28 columns",
        ));
    }
    check_count(name, &dimensions, count)?;
    check_length(name, bytes, &dimensions)?;
    Ok(Images {
        count: count as usize,
        pixels: body,
    })
}

/// Parses a label file strictly (every label in `0..10`); returns the labels.
pub fn parse_labels<'a>(name: &str, bytes: &'a [u8]) -> Result<&'a [u8], DatasetError> {
    let (dimensions, body) = header(name, bytes, IdxKind::Labels)?;
    let [count] = dimensions[..] else {
        return Err(dimensions_error(name, &dimensions, "expected 1 dimension"));
    };
    check_count(name, &dimensions, count)?;
    check_length(name, bytes, &dimensions)?;
    if let Some((index, &value)) = body.iter().enumerate().find(|(_, &value)| value >= CLASSES) {
        return Err(DatasetError::LabelOutOfRange {
            name: name.to_owned(),
            index,
            value,
        });
    }
    Ok(body)
}

/// Parses `bytes` as `kind` strictly and returns the item count.
pub fn validate(name: &str, kind: IdxKind, bytes: &[u8]) -> Result<usize, DatasetError> {
    match kind {
        IdxKind::Images => parse_images(name, bytes).map(|images| images.count),
        IdxKind::Labels => parse_labels(name, bytes).map(<[u8]>::len),
    }
}

/// Encodes images as an IDX file (the inverse of [`parse_images`]).
///
/// `pixels.len()` must be a multiple of [`IMAGE_BYTES`]; returns `None` otherwise or when
/// the count does not fit the format's cap.
pub fn encode_images(pixels: &[u8]) -> Option<Vec<u8>> {
    if !pixels.len().is_multiple_of(IMAGE_BYTES) {
        return None;
    }
    let count = u32::try_from(pixels.len() / IMAGE_BYTES)
        .ok()
        .filter(|&c| c <= MAX_COUNT)?;
    let mut out = Vec::with_capacity(16 + pixels.len());
    out.extend_from_slice(&IMAGES_MAGIC.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&(IMAGE_ROWS as u32).to_be_bytes());
    out.extend_from_slice(&(IMAGE_COLUMNS as u32).to_be_bytes());
    out.extend_from_slice(pixels);
    Some(out)
}

/// Encodes labels as an IDX file (the inverse of [`parse_labels`]); `None` when a label
/// is out of range or the count does not fit the format's cap.
pub fn encode_labels(labels: &[u8]) -> Option<Vec<u8>> {
    if labels.iter().any(|&label| label >= CLASSES) {
        return None;
    }
    let count = u32::try_from(labels.len())
        .ok()
        .filter(|&c| c <= MAX_COUNT)?;
    let mut out = Vec::with_capacity(8 + labels.len());
    out.extend_from_slice(&LABELS_MAGIC.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(labels);
    Some(out)
}

/// Reads the magic and the dimensions; returns them and the bytes after the header.
fn header<'a>(
    name: &str,
    bytes: &'a [u8],
    kind: IdxKind,
) -> Result<(Vec<u32>, &'a [u8]), DatasetError> {
    let (expected_magic, kind_name) = match kind {
        IdxKind::Images => (IMAGES_MAGIC, "images"),
        IdxKind::Labels => (LABELS_MAGIC, "labels"),
    };
    // The low byte of the magic is the number of dimensions.
    let dimension_count = (expected_magic & 0xff) as usize;
    let header_length = 4 + 4 * dimension_count;
    let Some(magic) = read_u32(bytes, 0) else {
        return Err(length_error(name, header_length as u64, bytes));
    };
    if magic != expected_magic {
        return Err(DatasetError::IdxMagic {
            name: name.to_owned(),
            kind: kind_name,
            expected: expected_magic,
            actual: magic,
        });
    }
    let (Some(head), Some(body)) = (bytes.get(..header_length), bytes.get(header_length..)) else {
        return Err(length_error(name, header_length as u64, bytes));
    };
    let dimensions = (0..dimension_count)
        .map(|i| read_u32(head, 4 + 4 * i))
        .collect::<Option<Vec<u32>>>()
        .ok_or_else(|| length_error(name, header_length as u64, bytes))?;
    Ok((dimensions, body))
}

fn check_count(name: &str, dimensions: &[u32], count: u32) -> Result<(), DatasetError> {
    if count > MAX_COUNT {
        return Err(dimensions_error(
            name,
            dimensions,
            &format!("the item count exceeds the cap of {MAX_COUNT}"),
        ));
    }
    Ok(())
}

/// The file must be exactly the header plus the product of the dimensions.
fn check_length(name: &str, bytes: &[u8], dimensions: &[u32]) -> Result<(), DatasetError> {
    let header_length = 4 + 4 * dimensions.len() as u64;
    let expected = dimensions
        .iter()
        .try_fold(1u64, |product, &d| product.checked_mul(u64::from(d)))
        .and_then(|body| body.checked_add(header_length))
        .ok_or_else(|| dimensions_error(name, dimensions, "the data size overflows"))?;
    if bytes.len() as u64 != expected {
        return Err(length_error(name, expected, bytes));
    }
    Ok(())
}

fn read_u32(bytes: &[u8], offset: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(offset..offset.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(word))
}

fn length_error(name: &str, expected: u64, bytes: &[u8]) -> DatasetError {
    DatasetError::IdxLength {
        name: name.to_owned(),
        expected,
        actual: bytes.len() as u64,
    }
}

fn dimensions_error(name: &str, dimensions: &[u32], detail: &str) -> DatasetError {
    DatasetError::IdxDimensions {
        name: name.to_owned(),
        dimensions: dimensions.to_vec(),
        detail: detail.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn images(count: usize) -> Vec<u8> {
        let pixels: Vec<u8> = (0..count * IMAGE_BYTES).map(|i| (i % 251) as u8).collect();
        encode_images(&pixels).unwrap_or_default()
    }

    #[test]
    fn round_trips() {
        let bytes = images(3);
        let parsed = parse_images("x", &bytes).map_err(|e| e.to_string());
        assert_eq!(parsed.map(|i| (i.count, i.pixels.len())), Ok((3, 3 * 784)));
        let labels = encode_labels(&[0, 9, 3]).unwrap_or_default();
        assert_eq!(
            parse_labels("y", &labels).map_err(|e| e.to_string()),
            Ok(&[0u8, 9, 3][..])
        );
        assert_eq!(validate("y", IdxKind::Labels, &labels).ok(), Some(3));
        assert_eq!(validate("x", IdxKind::Images, &bytes).ok(), Some(3));
        assert!(parse_labels("e", &encode_labels(&[]).unwrap_or_default()).is_ok());
        assert_eq!(encode_labels(&[10]), None);
        assert_eq!(encode_images(&[0; 5]), None);
    }

    #[test]
    fn rejects_wrong_magic() {
        let mut bytes = images(1);
        bytes[3] = 0x01;
        assert!(matches!(
            parse_images("x", &bytes),
            Err(DatasetError::IdxMagic {
                actual: 0x0801,
                expected: 0x0803,
                ..
            })
        ));
        let labels = encode_labels(&[1]).unwrap_or_default();
        assert!(matches!(
            parse_images("x", &labels),
            Err(DatasetError::IdxMagic { .. })
        ));
        assert!(matches!(
            parse_labels("x", &images(1)),
            Err(DatasetError::IdxMagic { .. })
        ));
        // Signed-byte or float element types are not accepted either.
        let mut float = encode_labels(&[1]).unwrap_or_default();
        float[2] = 0x0d;
        assert!(matches!(
            parse_labels("x", &float),
            Err(DatasetError::IdxMagic { .. })
        ));
    }

    #[test]
    fn rejects_wrong_dimensions() {
        let mut bytes = images(1);
        bytes[11] = 27; // rows
        assert!(matches!(
            parse_images("x", &bytes),
            Err(DatasetError::IdxDimensions { .. })
        ));
        let mut huge = Vec::new();
        huge.extend_from_slice(&LABELS_MAGIC.to_be_bytes());
        huge.extend_from_slice(&(MAX_COUNT + 1).to_be_bytes());
        assert!(matches!(
            parse_labels("x", &huge),
            Err(DatasetError::IdxDimensions { .. })
        ));
        let mut header = Vec::new();
        header.extend_from_slice(&IMAGES_MAGIC.to_be_bytes());
        header.extend_from_slice(&u32::MAX.to_be_bytes());
        header.extend_from_slice(&28u32.to_be_bytes());
        header.extend_from_slice(&28u32.to_be_bytes());
        assert!(matches!(
            parse_images("x", &header),
            Err(DatasetError::IdxDimensions { .. })
        ));
    }

    #[test]
    fn rejects_wrong_length() {
        let bytes = images(2);
        for cut in [0, 2, 4, 15, 16, bytes.len() - 1] {
            assert!(
                matches!(
                    parse_images("x", &bytes[..cut]),
                    Err(DatasetError::IdxLength { .. })
                ),
                "cut at {cut}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(matches!(
            parse_images("x", &long),
            Err(DatasetError::IdxLength { expected, actual, .. })
                if expected + 1 == actual
        ));
        let mut labels = encode_labels(&[1, 2]).unwrap_or_default();
        labels.pop();
        assert!(matches!(
            parse_labels("x", &labels),
            Err(DatasetError::IdxLength { .. })
        ));
    }

    #[test]
    fn rejects_label_out_of_range() {
        let mut labels = encode_labels(&[0, 1, 2, 3]).unwrap_or_default();
        labels[8 + 2] = 10;
        assert!(matches!(
            parse_labels("x", &labels),
            Err(DatasetError::LabelOutOfRange {
                index: 2,
                value: 10,
                ..
            })
        ));
    }
}
