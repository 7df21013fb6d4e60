//! `store export` / `store import`: a generation as PyTorch-loadable safetensors and
//! back, bit for bit; every malformed export refused with its own error and the store
//! left unchanged. Forged inputs are internally consistent: their digests in
//! metadata.json are recomputed, so only the check under test can catch them.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use shardlift::core::digest::Digest;
use shardlift::core::logical::f32_le_bytes;
use shardlift::interop::{
    export, import, read_export, ExportMetadata, InteropError, METADATA_FILE, MODEL_FILE,
    OPTIMIZER_FILE,
};
use shardlift::lab::powerloss::tree_digest;
use shardlift::store::layout::synthetic_state;

const SHARDLIFT: &str = env!("CARGO_BIN_EXE_shardlift");

/// A store with one synthetic generation and its export.
fn exported(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let store = dir.join("store");
    let state = synthetic_state(7, 4, 8192);
    shardlift::store::publish(
        &store,
        &state,
        shardlift::core::topology::Topology::new(4).unwrap(),
        &mut shardlift::store::barrier::NoHooks,
    )
    .unwrap();
    let out = dir.join("export");
    export(&store, 0, &out).unwrap();
    (store, out)
}

fn metadata(out: &Path) -> ExportMetadata {
    serde_json::from_slice(&std::fs::read(out.join(METADATA_FILE)).unwrap()).unwrap()
}

/// Replaces `file` with `bytes` and recomputes its digest in metadata.json.
fn forge(out: &Path, file: &str, bytes: &[u8]) {
    make_writable(out);
    std::fs::write(out.join(file), bytes).unwrap();
    let mut meta = metadata(out);
    meta.files.insert(file.to_owned(), Digest::of(bytes));
    std::fs::write(out.join(METADATA_FILE), serde_json::to_vec(&meta).unwrap()).unwrap();
}

fn make_writable(out: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}

/// A safetensors file with the given tensors (name, dtype, shape, bytes).
fn tensors(list: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)>) -> Vec<u8> {
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = list
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            (
                name.clone(),
                safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            )
        })
        .collect();
    safetensors::serialize(views, None).unwrap()
}

/// The model file's tensors as (name, dtype, shape, bytes).
fn model_tensors(out: &Path) -> Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    let bytes = std::fs::read(out.join(MODEL_FILE)).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let mut list: Vec<_> = file
        .tensors()
        .into_iter()
        .map(|(name, view)| {
            (
                name,
                view.dtype(),
                view.shape().to_vec(),
                view.data().to_vec(),
            )
        })
        .collect();
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list
}

#[test]
fn export_then_import_reproduces_the_root_and_the_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let (store, out) = exported(dir.path());
    let (state, _) = shardlift::store::load_generation(&store, 0).unwrap();
    let meta = metadata(&out);
    assert_eq!(meta.logical_state_root, Some(state.logical_state_root()));
    assert_eq!(meta.step, 4);
    assert_eq!(meta.generation, Some(0));
    // The model file holds exactly the stored parameter bytes, under nn.Linear shapes.
    let flat = f32_le_bytes(&state.flat_parameters());
    let by_name: BTreeMap<String, (Vec<usize>, Vec<u8>)> = model_tensors(&out)
        .into_iter()
        .map(|(name, _, shape, bytes)| (name, (shape, bytes)))
        .collect();
    let mut offset = 0;
    for (name, shape) in [
        ("fc1.weight", vec![128, 784]),
        ("fc1.bias", vec![128]),
        ("fc2.weight", vec![10, 128]),
        ("fc2.bias", vec![10]),
    ] {
        let (found_shape, bytes) = &by_name[name];
        assert_eq!(found_shape, &shape, "{name}");
        assert_eq!(bytes[..], flat[offset..offset + bytes.len()], "{name}");
        offset += bytes.len();
    }
    assert_eq!(offset, flat.len());

    let summary = import(&dir.path().join("imported"), &out, 3).unwrap();
    assert_eq!(summary.imported_root, state.logical_state_root());
    let (back, topology) =
        shardlift::store::load_generation(&dir.path().join("imported"), 0).unwrap();
    assert_eq!(back.logical_state_root(), state.logical_state_root());
    assert_eq!(back.ledger_digest(), state.ledger_digest());
    assert_eq!(topology.workers(), 3);
}

#[test]
fn export_refuses_an_existing_target_and_a_missing_generation_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, out) = exported(dir.path());
    let error = export(&store, 0, &out).unwrap_err();
    assert_eq!(error.kind(), "output-exists");
    let missing = dir.path().join("missing");
    let error = export(&store, 9, &missing).unwrap_err();
    assert!(!missing.exists());
    assert_ne!(error.kind(), "output-exists");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".export-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn export_refuses_a_target_that_names_no_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = exported(dir.path());
    let before = tree_digest(&store).unwrap();
    for target in [dir.path().join("not-there").join(".."), PathBuf::from("/")] {
        let error = export(&store, 0, &target).unwrap_err();
        assert_eq!(error.kind(), "output-has-no-name", "{target:?}: {error}");
    }
    assert_eq!(tree_digest(&store).unwrap(), before);
    assert!(!dir.path().join("not-there").exists());
}

/// Runs `damage` on a fresh export, imports it into a store holding one generation, and
/// returns the error; the store must be unchanged.
fn refused(damage: impl FnOnce(&Path), workers: u32) -> InteropError {
    let dir = tempfile::tempdir().unwrap();
    let (store, out) = exported(dir.path());
    damage(&out);
    let before = tree_digest(&store).unwrap();
    let error = import(&store, &out, workers).unwrap_err();
    assert_eq!(
        tree_digest(&store).unwrap(),
        before,
        "{error}: the store changed"
    );
    error
}

#[test]
fn every_malformed_export_is_refused_with_its_own_error() {
    let f32s = |n: usize| vec![0u8; n * 4];
    /// (expected error kind, damage to the export, workers to import onto)
    type Case = (&'static str, Box<dyn FnOnce(&Path)>, u32);
    let cases: Vec<Case> = vec![
        (
            "missing-file",
            Box::new(|out: &Path| std::fs::remove_file(out.join(OPTIMIZER_FILE)).unwrap()),
            4,
        ),
        (
            "too-large",
            Box::new(|out: &Path| {
                make_writable(out);
                std::fs::write(out.join(METADATA_FILE), vec![b' '; 70_000]).unwrap()
            }),
            4,
        ),
        (
            "bad-metadata",
            Box::new(|out: &Path| {
                make_writable(out);
                let mut value: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(out.join(METADATA_FILE)).unwrap())
                        .unwrap();
                value["schema"] = "something-else".into();
                std::fs::write(out.join(METADATA_FILE), value.to_string()).unwrap();
            }),
            4,
        ),
        (
            "digest-mismatch",
            Box::new(|out: &Path| {
                make_writable(out);
                let mut bytes = std::fs::read(out.join(MODEL_FILE)).unwrap();
                let last = bytes.len() - 1;
                bytes[last] ^= 1;
                std::fs::write(out.join(MODEL_FILE), bytes).unwrap();
            }),
            4,
        ),
        (
            "bad-safetensors",
            Box::new(|out: &Path| {
                forge(
                    out,
                    MODEL_FILE,
                    b"\xff\xff\xff\xff\xff\xff\xff\x7fnot a header",
                )
            }),
            4,
        ),
        (
            "wrong-dtype",
            Box::new(move |out: &Path| {
                let mut list = model_tensors(out);
                list[0].1 = safetensors::Dtype::I32;
                forge(out, MODEL_FILE, &tensors(list));
            }),
            4,
        ),
        (
            "wrong-shape",
            Box::new(move |out: &Path| {
                let mut list = model_tensors(out);
                let weight = list.iter_mut().find(|t| t.0 == "fc1.weight").unwrap();
                weight.2 = vec![784, 128];
                forge(out, MODEL_FILE, &tensors(list));
            }),
            4,
        ),
        (
            "missing-tensor",
            Box::new(move |out: &Path| {
                let list = model_tensors(out)
                    .into_iter()
                    .filter(|t| t.0 != "fc2.bias")
                    .collect();
                forge(out, MODEL_FILE, &tensors(list));
            }),
            4,
        ),
        (
            "extra-tensor",
            Box::new(move |out: &Path| {
                let mut list = model_tensors(out);
                list.push((
                    "fc3.weight".into(),
                    safetensors::Dtype::F32,
                    vec![2],
                    f32s(2),
                ));
                forge(out, MODEL_FILE, &tensors(list));
            }),
            4,
        ),
        (
            "root-mismatch",
            Box::new(move |out: &Path| {
                // One parameter changed, the file's digest recomputed, the root left.
                let mut list = model_tensors(out);
                let bias = list.iter_mut().find(|t| t.0 == "fc2.bias").unwrap();
                bias.3[0] ^= 1;
                forge(out, MODEL_FILE, &tensors(list));
            }),
            4,
        ),
        (
            "bad-state",
            Box::new(|out: &Path| {
                make_writable(out);
                let mut meta = metadata(out);
                meta.hyperparameters.micro_batch_size = 0;
                meta.logical_state_root = None;
                std::fs::write(out.join(METADATA_FILE), serde_json::to_vec(&meta).unwrap())
                    .unwrap();
            }),
            4,
        ),
        ("topology", Box::new(|_: &Path| {}), 0),
    ];
    let mut kinds = Vec::new();
    for (kind, damage, workers) in cases {
        let error = refused(damage, workers);
        assert_eq!(error.kind(), kind, "{error}");
        kinds.push(kind);
    }
    assert_eq!(kinds.len(), 12);
}

#[test]
fn a_state_written_outside_shardlift_without_a_root_imports() {
    let dir = tempfile::tempdir().unwrap();
    let (_, out) = exported(dir.path());
    make_writable(&out);
    let mut meta = metadata(&out);
    let root = meta.logical_state_root.take().unwrap();
    meta.generation = None;
    meta.commit_digest = None;
    std::fs::write(out.join(METADATA_FILE), serde_json::to_vec(&meta).unwrap()).unwrap();
    let (state, _) = read_export(&out).unwrap();
    assert_eq!(state.logical_state_root(), root);
}

#[test]
fn the_cli_exits_one_naming_the_check_and_two_on_a_bad_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (store, out) = exported(dir.path());
    make_writable(&out);
    let mut bytes = std::fs::read(out.join(OPTIMIZER_FILE)).unwrap();
    bytes[100] ^= 0x10;
    std::fs::write(out.join(OPTIMIZER_FILE), bytes).unwrap();
    let output = std::process::Command::new(SHARDLIFT)
        .args(["store", "import", "--workers", "4", "--store"])
        .arg(&store)
        .arg("--from")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("optimizer.safetensors: SHA-256"),
        "{stderr}"
    );
    let output = std::process::Command::new(SHARDLIFT)
        .args(["store", "export", "--store"])
        .arg(&store)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
}
