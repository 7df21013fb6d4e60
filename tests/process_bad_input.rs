//! Errors a person can act on: for each kind of bad input, the command exits with the
//! documented status (1: the command ran and refused; 2: the command line is wrong),
//! names the input, says what is wrong and, where there is something to do, what — and
//! leaves what it was given as it was.
mod common;

use std::path::Path;
use std::process::Command;

/// One bad input and what the person must read about it.
struct Case {
    name: &'static str,
    args: &'static [&'static str],
    /// Environment variables set (all `AWS_*` are cleared first).
    env: &'static [(&'static str, &'static str)],
    status: i32,
    /// Every one of these must appear on stderr.
    says: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "a missing store",
        args: &["store", "recover", "--store", "missing"],
        env: &[],
        status: 1,
        says: &[
            "store directory missing",
            "does not exist",
            "check the path",
        ],
    },
    Case {
        name: "a symlinked store",
        args: &["store", "recover", "--store", "link-to-store"],
        env: &[],
        status: 1,
        says: &[
            "store directory link-to-store",
            "symbolic link",
            "pass the directory itself",
        ],
    },
    Case {
        name: "a symlinked store to publish into",
        args: &["store", "publish-synthetic", "--store", "link-to-store"],
        env: &[],
        status: 1,
        says: &["store directory link-to-store", "symbolic link"],
    },
    Case {
        name: "a file where the store directory should be",
        args: &["store", "recover", "--store", "a-file"],
        env: &[],
        status: 1,
        says: &["store directory a-file", "is a file, not a store directory"],
    },
    Case {
        name: "a file where a store to publish into should be",
        args: &["store", "publish-synthetic", "--store", "a-file"],
        env: &[],
        status: 1,
        says: &["store directory a-file", "is a file"],
    },
    Case {
        name: "a generation the store does not have",
        args: &["store", "verify", "--store", "store", "--generation", "7"],
        env: &[],
        status: 1,
        says: &["generation 7", "no commit record", "store/commits/"],
    },
    Case {
        name: "an s3 URL without endpoint or credentials",
        args: &["store", "recover", "--store", "s3://bucket/prefix"],
        env: &[],
        status: 1,
        says: &[
            "s3://bucket/prefix",
            "AWS_ENDPOINT_URL",
            "AWS_ACCESS_KEY_ID",
            "nothing was sent",
        ],
    },
    Case {
        name: "an s3 URL with credentials but no endpoint",
        args: &["store", "recover", "--store", "s3://bucket/prefix"],
        env: &[
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ],
        status: 1,
        says: &["AWS_ENDPOINT_URL", "nothing was sent"],
    },
    Case {
        name: "an S3 endpoint nobody listens on",
        args: &["store", "recover", "--store", "s3://bucket/prefix"],
        env: &[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
            ("AWS_REGION", "garage"),
            ("AWS_ALLOW_HTTP", "true"),
        ],
        status: 1,
        says: &["s3://bucket/prefix", "127.0.0.1:1", "Connection refused"],
    },
    Case {
        name: "a malformed s3 URL",
        args: &["store", "recover", "--store", "s3://"],
        env: &[],
        // `--store` is parsed by the command line: a wrong location is a wrong command line.
        status: 2,
        says: &["s3://", "not an s3://bucket[/prefix] location"],
    },
    Case {
        name: "an export over an existing path",
        args: &[
            "store",
            "export",
            "--store",
            "store",
            "--generation",
            "0",
            "--out",
            "a-file",
        ],
        env: &[],
        status: 1,
        says: &["a-file already exists", "never overwrites"],
    },
    Case {
        name: "an import from a directory that is not an export",
        args: &[
            "store",
            "import",
            "--store",
            "store",
            "--from",
            "missing",
            "--workers",
            "3",
        ],
        env: &[],
        status: 1,
        says: &["missing/metadata.json is missing"],
    },
    Case {
        name: "a missing bundle",
        args: &["verify-bundle", "--bundle-directory", "missing"],
        env: &[],
        status: 1,
        says: &["bundle missing rejected", "No such file or directory"],
    },
    Case {
        name: "a crash-test output path that is a file",
        args: &[
            "crash-test",
            "--out",
            "a-file",
            "--check",
            "true",
            "--",
            "/bin/true",
        ],
        env: &[],
        status: 1,
        says: &["a-file", "is a file, not a directory", "choose a new path"],
    },
    Case {
        name: "a crash-test writer that does not exist",
        args: &[
            "crash-test",
            "--out",
            "ct",
            "--check",
            "true",
            "--",
            "/nonexistent/writer",
        ],
        env: &[],
        status: 1,
        says: &["writer", "ct/writer.stderr"],
    },
    Case {
        name: "a dataset source directory without the files",
        args: &[
            "dataset",
            "fetch",
            "--cache-directory",
            "cache",
            "--source-directory",
            "missing",
        ],
        env: &[],
        status: 1,
        says: &[
            "missing",
            "apt-get install dataset-fashion-mnist",
            "--source-directory",
        ],
    },
    Case {
        name: "a worker count out of range",
        args: &[
            "store",
            "reshard",
            "--store",
            "store",
            "--generation",
            "0",
            "--workers",
            "0",
        ],
        env: &[],
        status: 2,
        says: &["--workers"],
    },
    Case {
        name: "an unknown command",
        args: &["publish"],
        env: &[],
        status: 2,
        says: &["unrecognized subcommand 'publish'"],
    },
];

/// A scratch directory with a store of one generation, a link to it and a plain file.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(common::shardlift_exe())
        .args(["store", "publish-synthetic", "--store", "store", "--json"])
        .current_dir(dir.path())
        .output()
        .expect("publish");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::os::unix::fs::symlink("store", dir.path().join("link-to-store")).expect("symlink");
    std::fs::write(dir.path().join("a-file"), b"not a directory\n").expect("a-file");
    dir
}

/// Every file under `dir` with its bytes, to show a refused command changed nothing.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let bytes = std::fs::read(e.path()).expect("read");
            (e.path().display().to_string(), bytes)
        })
        .collect();
    files.sort();
    files
}

#[test]
fn each_bad_input_names_the_input_says_what_is_wrong_and_changes_nothing() {
    let mut failures = Vec::new();
    for case in CASES {
        let dir = scratch();
        let store_before = snapshot(&dir.path().join("store"));
        let mut command = Command::new(common::shardlift_exe());
        command.args(case.args).current_dir(dir.path());
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("AWS_") {
                command.env_remove(name);
            }
        }
        command.envs(case.env.iter().copied());
        let output = command.output().expect("run shardlift");
        let stderr = String::from_utf8_lossy(&output.stderr);
        if output.status.code() != Some(case.status) {
            failures.push(format!(
                "{}: status {:?}, want {}: {stderr}",
                case.name,
                output.status.code(),
                case.status
            ));
        }
        for text in case.says {
            if !stderr.contains(text) {
                failures.push(format!("{}: stderr lacks {text:?}: {stderr}", case.name));
            }
        }
        if stderr.contains("panicked") {
            failures.push(format!("{}: panicked: {stderr}", case.name));
        }
        if snapshot(&dir.path().join("store")) != store_before {
            failures.push(format!("{}: the store changed", case.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
