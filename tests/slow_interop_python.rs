//! Slow lane: the safetensors export read by real PyTorch (the hash-locked torch 2.13.0
//! and safetensors 0.8.0 of ci/python-torch), bit for bit:
//! - Python loads an export into `nn.Sequential` and computes the probe logits; they
//!   equal the bytes ShardLift's engine computes from the same generation;
//! - Python takes its own AdamW step and writes the state with `safetensors.torch`;
//!   ShardLift imports it and computes the same probe logits Python did;
//! - a flipped bit in an exported tensor is refused by `import` (digest) and shows in
//!   Python's logits (the cross-check).
#![cfg(feature = "torch")]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use shardlift::core::step::{SplitView, LOGIT_PROBE_IMAGES};
use shardlift::engine::evaluate;

const IMAGE_BYTES: usize = 784;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/torch_probe.py")
}

fn run_python(python: &Path, args: &[&Path]) {
    let output = Command::new(python)
        .arg(script())
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python");
    assert!(
        output.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
#[ignore = "slow lane: installs the hash-locked Python torch and safetensors (ci/python-torch)"]
fn pytorch_reads_and_writes_exports_bit_for_bit() {
    let python = common::python_torch();
    let data = shardlift::dataset::ensure_and_load(&common::cache_directory(), None).expect("data");
    let dir = tempfile::tempdir().expect("tempdir");
    let images = dir.path().join("probe-images.u8");
    let labels = dir.path().join("probe-labels.u8");
    std::fs::write(
        &images,
        &data.test.images[..LOGIT_PROBE_IMAGES * IMAGE_BYTES],
    )
    .expect("w");
    std::fs::write(&labels, &data.test.labels[..LOGIT_PROBE_IMAGES]).expect("w");

    // A trained generation (two real steps), exported.
    let store = dir.path().join("store");
    let state = common::publish_two_trained_steps(&data, 2, &store);
    let export = dir.path().join("export");
    shardlift::interop::export(&store, 0, &export).expect("export");
    let test = SplitView::from(&data.test);
    let ours = evaluate(&state.flat_parameters(), test)
        .expect("eval")
        .logit_probe;

    // 1. PyTorch's logits from the export equal ShardLift's recorded bytes.
    let theirs = dir.path().join("theirs.bin");
    run_python(&python, &[Path::new("probe"), &export, &images, &theirs]);
    assert_eq!(std::fs::read(&theirs).expect("read"), ours);

    // 2. PyTorch's own AdamW step, written with safetensors.torch, imported by ShardLift.
    let written = dir.path().join("written");
    run_python(
        &python,
        &[Path::new("train"), &export, &images, &labels, &written],
    );
    let imported = shardlift::interop::import(&store, &written, 3).expect("import");
    assert_eq!(imported.commit.committed.generation, 1);
    let (back, _) = shardlift::store::load_generation(&store, 1).expect("load");
    assert_eq!(back.step(), state.step() + 1);
    assert_ne!(back.logical_state_root(), state.logical_state_root());
    let ours_after = evaluate(&back.flat_parameters(), test)
        .expect("eval")
        .logit_probe;
    assert_eq!(
        ours_after,
        std::fs::read(written.join("probe.bin")).expect("probe")
    );

    // 3. A flipped bit in an exported tensor: import refuses it, Python's logits move.
    let flipped = dir.path().join("flipped");
    std::fs::create_dir(&flipped).expect("mkdir");
    for file in [
        "model.safetensors",
        "optimizer.safetensors",
        "metadata.json",
    ] {
        std::fs::copy(export.join(file), flipped.join(file)).expect("copy");
    }
    let mut model = std::fs::read(flipped.join("model.safetensors")).expect("read");
    // The data section ends the file: this is the high byte of the last tensor's last
    // value, so its exponent changes.
    let last = model.len() - 1;
    model[last] ^= 0x01;
    std::fs::write(flipped.join("model.safetensors"), &model).expect("write");
    let error = shardlift::interop::import(&store, &flipped, 3).expect_err("flipped");
    assert_eq!(error.kind(), "digest-mismatch");
    let moved = dir.path().join("moved.bin");
    run_python(&python, &[Path::new("probe"), &flipped, &images, &moved]);
    assert_ne!(std::fs::read(&moved).expect("read"), ours);
}
