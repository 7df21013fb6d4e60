//! The committed kernel mutant tables (`evidence/crash-test/kernel-matrix-*.json`, one
//! `crash-matrix --file-system NAME --json` report per file system) hold together: the
//! pinned kernel, the correct writer with no failing state, a row for every writer
//! mutant of this build in registry order, each caught by the model, and each kernel
//! verdict the one its runs give (caught: some run broke the mutant's expected
//! invariant; masked: runs, none broke it; not-run: no run). The ext4 table is also
//! re-run and compared in the slow lane; the xfs and btrfs tables are checked here only.
use std::path::PathBuf;

use serde_json::Value;
use shardlift::lab::kernel::matrix::writer_mutants;
use shardlift::lab::kernel::pin::{KERNEL_PACKAGE_SHA256, KERNEL_RELEASE};

const FILE_SYSTEMS: [&str; 3] = ["ext4", "xfs", "btrfs"];

fn committed(file_system: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!(
        "evidence/crash-test/kernel-matrix-{file_system}.json"
    ));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The verdict a row's runs give.
fn verdict_of(row: &Value) -> Result<&'static str, String> {
    let runs = row["runs"].as_array().ok_or("a row without runs")?;
    let expected = row["expected_invariant"]
        .as_str()
        .ok_or("a row without its expected invariant")?;
    if runs.is_empty() {
        return Ok("not-run");
    }
    let caught = runs.iter().any(|run| {
        run["invariants_violated"]
            .get(expected)
            .and_then(Value::as_u64)
            .is_some_and(|states| states > 0)
    });
    Ok(if caught { "caught" } else { "masked" })
}

/// Why the table for `file_system` does not hold together, if it does not.
fn check_table(table: &Value, file_system: &str) -> Result<(), String> {
    if table["schema"] != "shardlift-crash-matrix-kernel-report" || table["version"] != 1 {
        return Err(format!(
            "schema {} version {}",
            table["schema"], table["version"]
        ));
    }
    if table["file_system"] != file_system {
        return Err(format!("file system {}", table["file_system"]));
    }
    if table["kernel"]["release"] != KERNEL_RELEASE
        || table["kernel"]["package_sha256"] != KERNEL_PACKAGE_SHA256
    {
        return Err(format!("kernel {}", table["kernel"]));
    }
    let correct = table["correct"].as_array().ok_or("no correct runs")?;
    if correct.is_empty() {
        return Err("the correct writer did not run".to_owned());
    }
    let failing: u64 = correct
        .iter()
        .map(|run| run["failing_states"].as_u64().unwrap_or(u64::MAX))
        .fold(0, u64::saturating_add);
    if failing != 0 || table["correct_failing_states"] != 0 {
        return Err(format!(
            "the correct writer failed {failing} states (reported {})",
            table["correct_failing_states"]
        ));
    }
    if table["model_survivors"] != serde_json::json!([]) {
        return Err(format!("model survivors {}", table["model_survivors"]));
    }
    let rows = table["mutants"].as_array().ok_or("no mutant rows")?;
    let names: Vec<&str> = rows.iter().filter_map(|r| r["name"].as_str()).collect();
    let registry: Vec<&str> = writer_mutants().iter().map(|m| m.name).collect();
    if names != registry {
        return Err(format!(
            "rows {names:?} are not this build's writer mutants {registry:?}"
        ));
    }
    for row in rows {
        let name = row["name"].as_str().unwrap_or("");
        if row["model_caught"] != true {
            return Err(format!("{name}: the model did not catch it"));
        }
        let derived = verdict_of(row).map_err(|e| format!("{name}: {e}"))?;
        if row["kernel"] != derived {
            return Err(format!(
                "{name}: the row says {} but its runs say {derived}",
                row["kernel"]
            ));
        }
    }
    Ok(())
}

#[test]
fn every_committed_kernel_table_holds_together() {
    for file_system in FILE_SYSTEMS {
        let table = committed(file_system);
        check_table(&table, file_system).unwrap_or_else(|e| panic!("{file_system}: {e}"));
        let rows = table["mutants"].as_array().expect("rows");
        let caught = rows.iter().filter(|r| r["kernel"] == "caught").count();
        assert!(caught >= 1, "{file_system}: the kernel caught no mutant");
    }
}

/// Each forged table is internally consistent (valid JSON, its counts and totals agreeing
/// with the field changed) and wrong in one way the check must see.
#[test]
fn forged_tables_are_refused() {
    let table = committed("ext4");
    check_table(&table, "ext4").expect("the committed table");
    type Forgery = (&'static str, fn(&mut Value));
    let forgeries: [Forgery; 6] = [
        ("another file system", |t| t["file_system"] = "xfs".into()),
        ("another kernel", |t| {
            t["kernel"]["release"] = "6.1.0-1-amd64".into()
        }),
        ("a correct run that failed, and its total", |t| {
            t["correct"][0]["failing_states"] = 1.into();
            t["correct_failing_states"] = 1.into();
        }),
        ("a mutant left out", |t| {
            if let Some(rows) = t["mutants"].as_array_mut() {
                rows.pop();
            }
        }),
        ("a masked row called caught", |t| {
            if let Some(row) = t["mutants"]
                .as_array_mut()
                .and_then(|rows| rows.iter_mut().find(|r| r["kernel"] == "masked"))
            {
                row["kernel"] = "caught".into();
            }
        }),
        ("a caught row whose runs broke nothing", |t| {
            if let Some(row) = t["mutants"]
                .as_array_mut()
                .and_then(|rows| rows.iter_mut().find(|r| r["kernel"] == "caught"))
            {
                if let Some(runs) = row["runs"].as_array_mut() {
                    for run in runs {
                        run["invariants_violated"] = serde_json::json!({});
                        run["violations"] = serde_json::json!([]);
                        run["failing_states"] = 0.into();
                    }
                }
            }
        }),
    ];
    for (what, forge) in forgeries {
        let mut forged = table.clone();
        forge(&mut forged);
        assert_ne!(forged, table, "{what}: the forgery changed nothing");
        assert!(check_table(&forged, "ext4").is_err(), "{what}: not refused");
    }
}
