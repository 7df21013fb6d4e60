//! The binary's command-line layer: clap types and `anyhow` live here and nowhere in the
//! library. Each module parses its arguments, calls the library and prints.
//!
//! Everything a command prints on stdout goes through [`outln!`]: a reader that closed
//! the pipe (`shardlift … --json | head -c1`) ends the command quietly with status
//! [`EXIT_CLOSED_STDOUT`], the status a shell reports for a writer killed by SIGPIPE,
//! instead of a panic and a backtrace.

/// The exit status when stdout's reader is gone: 128 + SIGPIPE, what `sh` reports for a
/// writer that the signal ended (`yes | head -c1` under `set -o pipefail`).
pub const EXIT_CLOSED_STDOUT: i32 = 141;

/// Writes one line to stdout, like `println!`, but ends the process quietly with
/// [`EXIT_CLOSED_STDOUT`] when stdout's reader has gone away, and with status 1 and a
/// one-line message on any other write error.
macro_rules! outln {
    () => {
        $crate::cli::write_stdout_line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::cli::write_stdout_line(format_args!($($arg)*))
    };
}

/// The body of [`outln!`]: one line, flushed before returning so that a closed pipe is
/// seen here and not at exit.
pub fn write_stdout_line(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let written = stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
        .and_then(|()| stdout.flush());
    if let Err(error) = written {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(EXIT_CLOSED_STDOUT);
        }
        // stderr may be gone too; a failed message must not panic either.
        let _ = writeln!(
            std::io::stderr(),
            "shardlift: error: writing stdout: {error}"
        );
        std::process::exit(1);
    }
}
pub mod bench_checkpoint;
pub mod crash_matrix;
pub mod crash_matrix_kernel;
pub mod crash_test;
pub mod dataset;
#[cfg(feature = "torch")]
pub mod demo;
#[cfg(feature = "torch")]
pub mod invariants;
pub mod objstore;
pub mod opened_store;
pub mod progress;
pub mod resume_test;
pub mod store;
pub mod store_child;
pub mod store_report;
pub mod train;
pub mod verify_bundle;

/// Prints `value` as pretty JSON on stdout.
fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
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
    outln!("{}", line());
    Ok(())
}

/// The arguments of a command that a build without the torch engine lacks: taken whole
/// and ignored, so that the command still says why it cannot run.
#[cfg(not(feature = "torch"))]
#[derive(clap::Args, Debug)]
#[command(disable_help_flag = true)]
pub struct NeedsTorchArgs {
    /// Whatever followed the command's name.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    ignored: Vec<String>,
}

/// Says in one line that `command` needs the torch engine and how to get a build with
/// it, then exits with status 2 (the command cannot run in this build at all).
#[cfg(not(feature = "torch"))]
pub fn needs_torch(command: &str) -> anyhow::Result<()> {
    eprintln!(
        "shardlift: error: `{command}` needs the torch engine, and this shardlift was built \
         without it (--no-default-features); build one with it: `ci/setup demo && cargo \
         install --locked --path .` in a ShardLift checkout (libtorch 2.13.0, see README)"
    );
    std::process::exit(2);
}
