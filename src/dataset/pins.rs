//! The pinned Fashion-MNIST resources: one table, two pins per resource.
//!
//! Every resource has two pins:
//!
//! * the canonical upstream `.gz` (byte size and SHA-256 of the compressed file), checked
//!   on every download;
//! * the decompressed IDX payload (byte size and SHA-256), checked on every acquisition
//!   from any source and again every time the payload is loaded.
//!
//! Debian's `dataset-fashion-mnist` package rewrote the gzip headers of its copies, so
//! its `.gz` files hash differently from the upstream ones; their payloads are the same
//! bytes and are checked against the payload pins.
//!
//! The values are those listed in the project's `PINS.md`. The hex digests are decoded at
//! compile time: a malformed digest in this file is a build error, never a runtime one.
use serde::Serialize;

use crate::core::digest::Digest;

/// The four Fashion-MNIST resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Resource {
    /// `train-images-idx3-ubyte`: the 60 000 training images.
    TrainImages,
    /// `train-labels-idx1-ubyte`: their labels.
    TrainLabels,
    /// `t10k-images-idx3-ubyte`: the 10 000 test images.
    TestImages,
    /// `t10k-labels-idx1-ubyte`: their labels.
    TestLabels,
}

/// What an IDX file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum IdxKind {
    /// `u8` images, dimensions `(n, 28, 28)`, magic `0x00000803`.
    Images,
    /// `u8` labels in `0..10`, dimension `(n)`, magic `0x00000801`.
    Labels,
}

impl Resource {
    /// All four, in the order they are fetched and reported.
    pub const ALL: [Resource; 4] = [
        Resource::TrainImages,
        Resource::TrainLabels,
        Resource::TestImages,
        Resource::TestLabels,
    ];

    /// The upstream file name of the decompressed payload (the `.gz` adds `.gz`).
    pub const fn file_name(self) -> &'static str {
        match self {
            Resource::TrainImages => "train-images-idx3-ubyte",
            Resource::TrainLabels => "train-labels-idx1-ubyte",
            Resource::TestImages => "t10k-images-idx3-ubyte",
            Resource::TestLabels => "t10k-labels-idx1-ubyte",
        }
    }

    /// The upstream file name of the compressed resource.
    pub fn gzip_file_name(self) -> String {
        format!("{}.gz", self.file_name())
    }

    /// Whether the payload holds images or labels.
    pub const fn kind(self) -> IdxKind {
        match self {
            Resource::TrainImages | Resource::TestImages => IdxKind::Images,
            Resource::TrainLabels | Resource::TestLabels => IdxKind::Labels,
        }
    }
}

/// The exact size and SHA-256 of one byte string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ContentPin {
    /// The exact size, in bytes.
    pub bytes: u64,
    /// The SHA-256 of those bytes.
    pub sha256: Digest,
}

/// Both pins of one resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct ResourcePin {
    /// The resource pinned.
    pub resource: Resource,
    /// The file name of the decompressed payload, e.g. `train-images-idx3-ubyte`.
    pub name: &'static str,
    /// The canonical upstream `.gz`.
    pub gzip: ContentPin,
    /// The decompressed IDX payload.
    pub payload: ContentPin,
}

/// A table of pins, one entry per resource in [`Resource::ALL`] order.
///
/// The production table is [`FASHION_MNIST`]; tests build their own to exercise the
/// download path with small synthetic payloads.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PinTable {
    /// The dataset's name and cache layout version (the cache subdirectory).
    pub dataset: &'static str,
    /// The pins, in [`Resource::ALL`] order (as [`PinTable::get`] indexes them).
    pub resources: [ResourcePin; 4],
}

impl PinTable {
    /// The pin of `resource`.
    pub fn get(&self, resource: Resource) -> &ResourcePin {
        let index = match resource {
            Resource::TrainImages => 0,
            Resource::TrainLabels => 1,
            Resource::TestImages => 2,
            Resource::TestLabels => 3,
        };
        &self.resources[index]
    }

    /// A table with the same layout as [`FASHION_MNIST`] but other content pins, given
    /// in [`Resource::ALL`] order as `(gzip, payload)`.
    pub fn with_pins(pins: [(ContentPin, ContentPin); 4]) -> PinTable {
        let mut table = FASHION_MNIST;
        for (entry, (gzip, payload)) in table.resources.iter_mut().zip(pins) {
            entry.gzip = gzip;
            entry.payload = payload;
        }
        table
    }
}

/// The cache subdirectory (and layout version) of the Fashion-MNIST payloads.
pub const CACHE_SUBDIRECTORY: &str = "fashion-mnist-v1";

/// The pinned Fashion-MNIST resources (values from `PINS.md`).
pub const FASHION_MNIST: PinTable = PinTable {
    dataset: CACHE_SUBDIRECTORY,
    resources: [
        pin(
            Resource::TrainImages,
            26_421_880,
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            47_040_016,
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
        ),
        pin(
            Resource::TrainLabels,
            29_515,
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            60_008,
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
        ),
        pin(
            Resource::TestImages,
            4_422_102,
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            7_840_016,
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
        ),
        pin(
            Resource::TestLabels,
            5_148,
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
            10_008,
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
        ),
    ],
};

const fn pin(
    resource: Resource,
    gzip_bytes: u64,
    gzip_sha256: &str,
    payload_bytes: u64,
    payload_sha256: &str,
) -> ResourcePin {
    ResourcePin {
        resource,
        name: resource.file_name(),
        gzip: ContentPin {
            bytes: gzip_bytes,
            sha256: const_digest(gzip_sha256),
        },
        payload: ContentPin {
            bytes: payload_bytes,
            sha256: const_digest(payload_sha256),
        },
    }
}

/// Decodes 64 lowercase hex digits at compile time (a bad literal fails the build).
const fn const_digest(text: &str) -> Digest {
    let bytes = text.as_bytes();
    assert!(bytes.len() == 64, "a pinned SHA-256 is 64 hex digits");
    let mut out = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        out[i] = (nibble(bytes[2 * i]) << 4) | nibble(bytes[2 * i + 1]);
        i += 1;
    }
    Digest(out)
}

const fn nibble(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => panic!("a pinned SHA-256 is lowercase hex"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_the_published_pins() {
        let table = &FASHION_MNIST;
        for (entry, resource) in table.resources.iter().zip(Resource::ALL) {
            assert_eq!(entry.resource, resource);
            assert_eq!(table.get(resource), entry);
            assert_eq!(entry.name, resource.file_name());
        }
        let images = table.get(Resource::TrainImages);
        assert_eq!(
            images.gzip.sha256.to_hex(),
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"
        );
        assert_eq!(images.payload.bytes, 16 + 60_000 * 784);
        assert_eq!(
            table.get(Resource::TestLabels).payload.sha256.to_hex(),
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"
        );
        assert_eq!(table.get(Resource::TrainLabels).payload.bytes, 8 + 60_000);
        assert_eq!(
            table.get(Resource::TestImages).payload.bytes,
            16 + 10_000 * 784
        );
        assert_eq!(table.get(Resource::TestLabels).gzip.bytes, 5_148);
    }

    #[test]
    fn const_digest_agrees_with_runtime_parser() {
        let text = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(Some(const_digest(text)), Digest::from_hex(text).ok());
    }

    #[test]
    fn with_pins_keeps_names_and_order() {
        let zero = ContentPin {
            bytes: 1,
            sha256: Digest([0; 32]),
        };
        let table = PinTable::with_pins([(zero, zero); 4]);
        for (entry, resource) in table.resources.iter().zip(Resource::ALL) {
            assert_eq!(entry.resource, resource);
            assert_eq!(entry.gzip, zero);
            assert_eq!(entry.payload, zero);
        }
    }
}
