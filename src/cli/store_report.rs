//! What `shardlift store` prints of a recovery, a reshard and a verified generation, the
//! same on either backend.
use shardlift::core::logical::LogicalState;
use shardlift::core::topology::Topology;
use shardlift::store::recovery::RecoveryReport;
use shardlift::store::ObjectCheck;

use super::print_report;

/// With `--expect-root`: fails unless recovery selected a generation with one of those roots.
pub fn check_expected_root(report: &RecoveryReport, expect_root: &[String]) -> anyhow::Result<()> {
    if expect_root.is_empty() {
        return Ok(());
    }
    let selected = report
        .selected
        .as_ref()
        .map(|s| s.logical_state_root.to_string());
    match selected {
        Some(root) if expect_root.iter().any(|e| e.eq_ignore_ascii_case(&root)) => Ok(()),
        Some(root) => {
            anyhow::bail!("the selected generation's root {root} is not an expected one")
        }
        None => anyhow::bail!("no valid generation (expected one with a given root)"),
    }
}

/// The human-readable recovery report: the selection, then every rejected record.
pub fn print_recovery(report: &RecoveryReport) -> anyhow::Result<()> {
    match &report.selected {
        Some(s) => outln!(
            "selected generation {} (step {}, {} workers, root {})",
            s.generation,
            s.step,
            s.workers,
            s.logical_state_root
        ),
        None => outln!("no valid generation"),
    }
    outln!("LATEST: {:?}", report.latest.status);
    for r in &report.rejected {
        outln!("rejected {}: {}", r.file, r.reason);
    }
    Ok(())
}

/// A reshard's commit summary with the check its source passed (`source_objects`), on
/// either backend.
pub fn print_reshard_report<T: serde::Serialize>(
    json: bool,
    summary: &T,
    objects: ObjectCheck,
    line: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    let mut report = serde_json::to_value(summary)?;
    if let Some(fields) = report.as_object_mut() {
        fields.insert("source_objects".into(), objects.name().into());
    }
    print_report(json, &report, line)
}

/// What `store verify --json` prints of a generation that verified, on either backend.
pub fn verified_report(
    generation: u64,
    state: &LogicalState,
    topology: Topology,
) -> serde_json::Value {
    serde_json::json!({
        "generation": generation,
        "step": state.step(),
        "cursor": state.cursor(),
        "workers": topology.workers(),
        "chunks": state.chunks().len(),
        "logical_state_root": state.logical_state_root(),
    })
}
