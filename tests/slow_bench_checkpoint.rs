//! Slow lane: `shardlift bench checkpoint` with its PyTorch peers (DCP, torch.save,
//! safetensors) in the hash-locked Python torch of `ci/python-torch`, on a small state:
//! every figure measured, every ratio computed, the peers' versions reported, and the
//! reshard's bytes written far below a DCP user's.
mod common;

use std::process::Command;

use serde_json::Value;

#[test]
#[ignore = "slow lane: installs the hash-locked Python torch and safetensors (ci/python-torch)"]
fn the_python_peers_save_load_and_reshard_and_every_ratio_has_a_value() {
    let torchrun = common::torchrun();
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(common::shardlift_exe())
        .args([
            "bench",
            "checkpoint",
            "--state-bytes",
            "16777216",
            "--repetitions",
            "1",
        ])
        .arg("--dir")
        .arg(dir.path())
        .arg("--torchrun")
        .arg(&torchrun)
        .arg("--json")
        .output()
        .expect("run shardlift");
    assert!(output.status.success(), "{output:?}");
    let report: Value = serde_json::from_slice(&output.stdout).expect("the report");
    assert!(
        report["peers"]["torch"]
            .as_str()
            .is_some_and(|v| v.starts_with("2.13.0")),
        "{}",
        report["peers"]
    );
    assert_eq!(report["peers"]["safetensors"], "0.8.0");
    let environment = report["peers"]["python_environment"].as_str();
    assert!(
        environment.is_some_and(|e| e.starts_with("python-torch-")),
        "{environment:?}"
    );
    let venv = torchrun
        .parent()
        .and_then(|bin| bin.parent())
        .expect("a venv");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        !text.contains(&*venv.to_string_lossy()),
        "a host path in the report"
    );
    assert!(
        !text.contains(&*dir.path().to_string_lossy()),
        "a host path in the report"
    );
    for format in ["dcp", "torch", "safetensors"] {
        for figure in [format!("{format}_save"), format!("{format}_load_cold")] {
            let seconds = report["figures"][&figure]["median_s"].as_f64();
            assert!(seconds.is_some_and(|s| s > 0.0), "{figure}: {report}");
        }
        let written = report["figures"][format!("{format}_save")]["bytes_written"].as_u64();
        let state = report["state_bytes"].as_u64().expect("state_bytes");
        assert!(
            written.is_some_and(|w| w >= state),
            "{format} wrote {written:?}"
        );
    }
    for (name, ratio) in report["ratios"].as_object().expect("ratios") {
        assert!(ratio["value"].as_f64().is_some(), "{name}: {ratio}");
    }
    let bytes_ratio = report["ratios"]["reshard_bytes_written"]["value"]
        .as_f64()
        .expect("reshard_bytes_written");
    assert!(
        bytes_ratio < 0.05,
        "a reshard writes placement only: {bytes_ratio}"
    );
    assert!(
        std::fs::read_dir(dir.path())
            .expect("read")
            .next()
            .is_none(),
        "the scratch is removed"
    );
}
