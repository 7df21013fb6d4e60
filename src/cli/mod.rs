//! The binary's command-line layer: clap types and `anyhow` live here and nowhere in the
//! library. Each module parses its arguments, calls the library and prints.
pub mod crash_test;
pub mod dataset;
#[cfg(feature = "torch")]
pub mod demo;
#[cfg(feature = "torch")]
pub mod invariants;
pub mod objstore;
pub mod progress;
pub mod resume_test;
pub mod store;
pub mod train;
pub mod verify_bundle;

/// Prints `value` as pretty JSON on stdout.
fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// A command's result on stdout: `value` as JSON with `--json`, else the one line for
/// people that `line` writes.
fn print_report<T: serde::Serialize>(
    json: bool,
    value: &T,
    line: impl FnOnce() -> String,
) -> anyhow::Result<()> {
    if json {
        return print_json(value);
    }
    println!("{}", line());
    Ok(())
}
