//! Bounded no-panic check of the record decoders on seeded random and mutated inputs
//! (runs without nightly; the cargo-fuzz targets live in fuzz/).
use std::path::Path;

use shardlift::core::rng::SplitMix64;
use shardlift::core::topology::Topology;
use shardlift::lab::handoff::{decode_handoff, encode_handoff};
use shardlift::store::codec::{self, CommitRecord, LatestRecord, ManifestRecord};
use shardlift::store::layout::synthetic_state;
use shardlift::store::{self, NoHooks};

fn seeds() -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("s");
    let summary = store::publish(
        &root,
        &synthetic_state(4, 1, 60_000),
        Topology::new(4).expect("t"),
        &mut NoHooks,
    )
    .expect("p");
    let commit = std::fs::read(root.join(codec::commit_rel_path(0))).expect("c");
    let manifest =
        std::fs::read(root.join(codec::object_rel_path(&summary.committed.manifest_digest)))
            .expect("m");
    let latest = std::fs::read(root.join("refs/LATEST")).expect("l");
    vec![commit, manifest, latest]
}

fn mutate(rng: &mut SplitMix64, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        match rng.below(5) {
            0 if !out.is_empty() => {
                let i = rng.below(out.len() as u64) as usize;
                out[i] ^= 1 << rng.below(8);
            }
            1 if !out.is_empty() => {
                let i = rng.below(out.len() as u64) as usize;
                out.truncate(i);
            }
            2 => {
                let i = rng.below(out.len() as u64 + 1) as usize;
                let alphabet = b"{}[]\",:0123456789-e.\\u";
                let b = alphabet[rng.below(alphabet.len() as u64) as usize];
                out.insert(i, b);
            }
            3 if !out.is_empty() => {
                let i = rng.below(out.len() as u64) as usize;
                out.remove(i);
            }
            _ => {
                let len = rng.below(64) as usize;
                out = (0..len).map(|_| rng.next_u64() as u8).collect();
            }
        }
    }
    out
}

fn decode_all(input: &[u8]) {
    let path = Path::new("fuzz");
    let _ = codec::decode::<CommitRecord>(path, input);
    let _ = codec::decode::<ManifestRecord>(path, input);
    let _ = codec::decode::<LatestRecord>(path, input);
}

fn run(iterations: u64) {
    let seeds = seeds();
    let mut rng = SplitMix64::keyed(7, "store-fuzz", 0);
    for i in 0..iterations {
        let seed = &seeds[(i % seeds.len() as u64) as usize];
        decode_all(&mutate(&mut rng, seed));
    }
    let handoff =
        encode_handoff(&synthetic_state(4, 1, 60_000), Topology::new(2).expect("t")).expect("h");
    for _ in 0..iterations / 20 {
        let mut bytes = handoff.clone();
        let i = rng.below(bytes.len() as u64) as usize;
        bytes[i] ^= 1 << rng.below(8);
        if rng.below(4) == 0 {
            bytes.truncate(i);
        }
        assert!(decode_handoff(Path::new("h"), &bytes).is_err() || bytes == handoff);
    }
}

#[test]
fn decoders_never_panic_bounded() {
    run(3_000);
}

#[test]
#[ignore]
fn decoders_never_panic_heavy() {
    run(300_000);
}
