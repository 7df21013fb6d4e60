//! The torch-free install README documents — `cargo install --locked --path .
//! --no-default-features` — gives a `shardlift` that links no libtorch, runs the store
//! and crash-test commands, and says in one line (exit 2) that the torch commands need a
//! build with the engine.
//!
//! The install here adds `--debug` and builds in `target/fast`, the fast lane's torch-free
//! build tree, so that CI links the binary from what that lane compiled instead of
//! compiling every dependency a third time; the features and the lock are the README's.
//! When this test itself runs from `target/fast` (that tree is then locked by the cargo
//! running it), the install builds in `target/install` instead.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repository() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The build tree the nested `cargo install` may use without waiting for our own lock.
fn install_target_directory() -> PathBuf {
    let fast = repository().join("target/fast");
    let running_from_fast = std::env::current_exe()
        .map(|exe| exe.starts_with(&fast))
        .unwrap_or(false);
    if running_from_fast {
        repository().join("target/install")
    } else {
        fast
    }
}

/// Installs the torch-free binary into `root` and returns its path.
fn install_torch_free(root: &Path) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "install",
            "--locked",
            "--no-default-features",
            "--debug",
            "--path",
        ])
        .arg(repository())
        .arg("--root")
        .arg(root)
        .env("CARGO_TARGET_DIR", install_target_directory())
        .output()
        .expect("run cargo install");
    assert!(
        output.status.success(),
        "cargo install failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    root.join("bin/shardlift")
}

fn run(binary: &Path, args: &[&str], cwd: &Path) -> Output {
    Command::new(binary)
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run the installed shardlift")
}

#[test]
fn the_torch_free_install_runs_store_and_crash_test_commands_and_refuses_torch_ones() {
    let root = tempfile::tempdir().expect("tempdir");
    let binary = install_torch_free(root.path());

    // No libtorch among the libraries the dynamic linker resolves.
    let ldd = Command::new("ldd").arg(&binary).output().expect("run ldd");
    let libraries = String::from_utf8_lossy(&ldd.stdout);
    assert!(ldd.status.success(), "ldd: {libraries}");
    assert!(
        !libraries.contains("libtorch"),
        "links libtorch: {libraries}"
    );

    let work = tempfile::tempdir().expect("tempdir");
    for args in [
        &["store", "publish-synthetic", "--store", "store", "--json"][..],
        &[
            "store",
            "reshard",
            "--store",
            "store",
            "--generation",
            "0",
            "--workers",
            "3",
            "--json",
        ],
        &["store", "recover", "--store", "store", "--json"],
        &[
            "store",
            "verify",
            "--store",
            "store",
            "--generation",
            "1",
            "--json",
        ],
        &[
            "crash-test",
            "--out",
            "ct",
            "--check",
            "test ! -e state || test -s state",
            "--json",
            "--",
            "/bin/sh",
            "-c",
            "echo 1 > tmp && sync tmp && mv tmp state && sync .",
        ],
    ] {
        let output = run(&binary, args, work.path());
        assert!(
            output.status.success(),
            "shardlift {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("a JSON report on stdout");
        assert!(report.is_object(), "{report}");
    }

    for command in ["killer-demo", "bench", "invariants"] {
        let output = run(&binary, &[command, "--json"], work.path());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{command}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{command}: one line: {stderr}");
        assert!(
            stderr.contains("needs the torch engine") && stderr.contains("cargo install"),
            "{command}: {stderr}"
        );
    }
}
