//! Fashion-MNIST: pinned acquisition, a verified cache and strict IDX parsing.
//!
//! # Invariants
//!
//! * **Never load unverified bytes.** Every payload is checked against its pinned size
//!   and SHA-256 ([`pins::FASHION_MNIST`]) and parsed strictly as IDX ([`idx`]) when it is
//!   acquired, and checked again, from the very bytes that are returned, every time it is
//!   loaded ([`load`]). Downloads are also checked against the canonical upstream `.gz`
//!   pin before they are decompressed, and decompression is capped at the pinned size.
//! * **The cache is untouched on failure.** [`fetch`] reads and verifies what is cached,
//!   then acquires and verifies every missing payload in memory, and only then installs
//!   them, each through the durable writer (a fresh temporary file, mode 0600, fsynced,
//!   renamed over its final name, then a directory fsync). Any error at any point removes every temporary file, every
//!   file and every directory this call created: the cache is left exactly as it was. A
//!   cached file that fails verification is reported ([`DatasetError::CachedFileCorrupt`])
//!   and never deleted silently.
//! * **The cache directory is private.** It must be a directory owned by the effective uid
//!   and not writable by group or others, checked before anything is read or written;
//!   missing directories are created with mode 0700.
//!
//! Layout: `<cache directory>/fashion-mnist-v1/<name>` holds the decompressed IDX payload
//! of each resource (`train-images-idx3-ubyte`, `train-labels-idx1-ubyte`,
//! `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`).
//!
//! Sources (see [`fetch`]): the upstream download (base URL overridable with
//! `SHARDLIFT_DATASET_BASE_URL`), then Debian's `dataset-fashion-mnist` package under
//! `/usr/share/datasets/fashion-mnist`; or only `--source-directory DIR` when given.
use std::path::Path;

mod cache;
pub mod defaults;
mod error;
mod fetch;
pub mod idx;
pub mod pins;
mod verify;

pub use error::{DatasetError, HOW_TO_GET_THE_DATA};
pub use fetch::{
    default_base_url, fetch, fetch_with_pins, FetchOptions, FetchReport, ResourceReport,
    SourceKind, BASE_URL_VARIABLE, DEBIAN_DIRECTORY, UPSTREAM_FOLDER, UPSTREAM_REPOSITORY,
};
pub use idx::{IMAGE_BYTES, IMAGE_COLUMNS, IMAGE_ROWS};
pub use pins::{ContentPin, PinTable, Resource, ResourcePin, CACHE_SUBDIRECTORY, FASHION_MNIST};

use cache::Cache;

/// One split: `count` images of [`IMAGE_BYTES`] bytes (row-major 28×28, one byte per
/// pixel) and their labels in `0..10`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Split {
    /// `count * 784` bytes, image `i` at `i * 784 .. (i + 1) * 784`.
    pub images: Vec<u8>,
    /// `count` labels.
    pub labels: Vec<u8>,
    /// The number of images, equal to the number of labels.
    pub count: usize,
}

impl Split {
    /// The pixels of image `i`.
    ///
    /// # Panics
    ///
    /// When `i >= self.count` (like slice indexing); see [`Split::get_image`].
    pub fn image(&self, i: usize) -> &[u8] {
        &self.images[i * IMAGE_BYTES..(i + 1) * IMAGE_BYTES]
    }

    /// The pixels of image `i`, or `None` when out of range.
    pub fn get_image(&self, i: usize) -> Option<&[u8]> {
        let start = i.checked_mul(IMAGE_BYTES)?;
        self.images.get(start..start.checked_add(IMAGE_BYTES)?)
    }
}

/// The verified dataset. Its payloads are exactly the pinned ones, so the pins (see
/// [`pins::FASHION_MNIST`]) identify it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FashionMnist {
    /// The training split, from `train-*` (60 000 images under [`FASHION_MNIST`]).
    pub train: Split,
    /// The test split, from `t10k-*` (10 000 images under [`FASHION_MNIST`]).
    pub test: Split,
}

/// Checks the cache directory's owner and mode (whatever part of it exists) without
/// writing anything: the check commands run before they do any work.
pub fn check_cache_directory(cache_directory: &Path) -> Result<(), DatasetError> {
    Cache::open_checked(cache_directory, FASHION_MNIST.dataset).map(|_| ())
}

/// Loads the dataset from the cache, re-verifying every payload against the pins.
///
/// Missing files give [`DatasetError::CachedFileMissing`] (run [`fetch`] or use
/// [`ensure_and_load`]); a file that fails verification gives
/// [`DatasetError::CachedFileCorrupt`]. Nothing is written.
pub fn load(cache_directory: &Path) -> Result<FashionMnist, DatasetError> {
    load_with_pins(cache_directory, &FASHION_MNIST)
}

/// [`load`] against another pin table.
pub fn load_with_pins(
    cache_directory: &Path,
    pins: &PinTable,
) -> Result<FashionMnist, DatasetError> {
    let cache = Cache::open_checked(cache_directory, pins.dataset)?;
    let read = |resource: Resource| -> Result<Vec<u8>, DatasetError> {
        let pin = pins.get(resource);
        cache
            .read_verified(pin)?
            .ok_or_else(|| DatasetError::CachedFileMissing {
                name: pin.name.to_owned(),
                path: cache.path_of(pin),
            })
    };
    let train = split(
        "train",
        pins,
        read(Resource::TrainImages)?,
        read(Resource::TrainLabels)?,
    )?;
    let test = split(
        "test",
        pins,
        read(Resource::TestImages)?,
        read(Resource::TestLabels)?,
    )?;
    Ok(FashionMnist { train, test })
}

/// Loads the dataset, first acquiring whatever the cache lacks (as [`fetch`] with its
/// defaults, or only from `source_directory` when given).
pub fn ensure_and_load(
    cache_directory: &Path,
    source_directory: Option<&Path>,
) -> Result<FashionMnist, DatasetError> {
    let mut options = FetchOptions::new(cache_directory);
    options.source_directory = source_directory.map(Path::to_path_buf);
    ensure_and_load_with(&options, &FASHION_MNIST)
}

/// [`ensure_and_load`] with explicit options and pins.
pub fn ensure_and_load_with(
    options: &FetchOptions,
    pins: &PinTable,
) -> Result<FashionMnist, DatasetError> {
    match load_with_pins(&options.cache_directory, pins) {
        Err(DatasetError::CachedFileMissing { .. }) => {
            fetch_with_pins(options, pins)?;
            load_with_pins(&options.cache_directory, pins)
        }
        other => other,
    }
}

/// Builds a split from verified payloads (parsed strictly once more, without copying
/// the pixels).
fn split(
    which: &'static str,
    pins: &PinTable,
    mut images: Vec<u8>,
    mut labels: Vec<u8>,
) -> Result<Split, DatasetError> {
    let (images_name, labels_name) = match which {
        "train" => (
            pins.get(Resource::TrainImages).name,
            pins.get(Resource::TrainLabels).name,
        ),
        _ => (
            pins.get(Resource::TestImages).name,
            pins.get(Resource::TestLabels).name,
        ),
    };
    let count = idx::parse_images(images_name, &images)?.count;
    let label_count = idx::parse_labels(labels_name, &labels)?.len();
    if count != label_count {
        return Err(DatasetError::CountMismatch {
            split: which,
            images: count,
            labels: label_count,
        });
    }
    let images_header = images.len() - count * IMAGE_BYTES;
    images.drain(..images_header);
    let labels_header = labels.len() - count;
    labels.drain(..labels_header);
    Ok(Split {
        images,
        labels,
        count,
    })
}

impl<'a> From<&'a Split> for crate::core::step::SplitView<'a> {
    fn from(split: &'a Split) -> Self {
        crate::core::step::SplitView {
            images: &split.images,
            labels: &split.labels,
            count: split.count,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_strips_headers_and_indexes_images() {
        let pixels: Vec<u8> = (0..2 * IMAGE_BYTES)
            .map(|i| (i / IMAGE_BYTES) as u8)
            .collect();
        let images = idx::encode_images(&pixels).expect("images");
        let labels = idx::encode_labels(&[3, 7]).expect("labels");
        let split = split("train", &FASHION_MNIST, images, labels).expect("split");
        assert_eq!(split.count, 2);
        assert_eq!(split.labels, vec![3, 7]);
        assert_eq!(split.images, pixels);
        assert!(split.image(1).iter().all(|&p| p == 1));
        assert_eq!(split.get_image(2), None);
        assert_eq!(split.get_image(usize::MAX), None);
    }

    #[test]
    fn split_rejects_count_mismatch() {
        let images = idx::encode_images(&[0; IMAGE_BYTES]).expect("images");
        let labels = idx::encode_labels(&[3, 7]).expect("labels");
        assert!(matches!(
            split("test", &FASHION_MNIST, images, labels),
            Err(DatasetError::CountMismatch {
                split: "test",
                images: 1,
                labels: 2
            })
        ));
    }
}
