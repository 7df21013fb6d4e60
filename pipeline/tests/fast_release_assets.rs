//! `pipeline release-assets` on the release fixture's throwaway repository (with committed
//! evidence added): two runs give byte-identical assets, stock `sha256sum -c --strict`
//! and `ssh-keygen -Y verify` accept them, the source tarball lists `git archive`'s
//! entries in its order, and each bad input is refused with its own error.
mod release_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use release_support::{git, keygen, pipeline, toy_repository, PRINCIPAL};

struct Setup {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    commit: String,
    binaries: [PathBuf; 2],
}

/// The fixture repository plus `evidence/run-1/` (a nested file, an executable, a
/// symlink) committed, and two stand-in release binaries.
fn setup() -> Setup {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().to_owned();
    let repo = toy_repository(&root);
    let evidence = repo.join("evidence/run-1");
    std::fs::create_dir_all(evidence.join("bundles")).expect("mkdir");
    std::fs::write(evidence.join("SHA256SUMS"), "sums\n").expect("write");
    std::fs::write(evidence.join("bundles/audit.json"), "{}\n").expect("write");
    let script = repo.join("ci/run.sh");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").expect("write");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::os::unix::fs::symlink("run.sh", repo.join("ci/link.sh")).expect("symlink");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "evidence"]);
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin).expect("mkdir");
    let binaries = [bin.join("shardlift"), bin.join("pipeline")];
    for (i, path) in binaries.iter().enumerate() {
        std::fs::write(path, format!("\x7fELF stand-in {i}\n")).expect("write");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    Setup {
        _tmp: tmp,
        root,
        repo,
        commit,
        binaries,
    }
}

fn assets(setup: &Setup, out: &Path, extra: &[&str]) -> Output {
    pipeline()
        .arg("release-assets")
        .arg("--repository")
        .arg(&setup.repo)
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .expect("run pipeline")
}

fn full_args(setup: &Setup) -> Vec<String> {
    vec![
        "--evidence".into(),
        "evidence/run-1".into(),
        "--binaries".into(),
        setup.binaries[0].to_string_lossy().into_owned(),
        setup.binaries[1].to_string_lossy().into_owned(),
    ]
}

fn success(output: &Output) {
    assert!(
        output.status.success(),
        "release-assets failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn refused(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "not refused: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn two_runs_give_identical_assets_that_stock_tools_check() {
    let setup = setup();
    let (key, public) = keygen(&setup.root, "release");
    let allowed = setup.root.join("allowed_signers");
    std::fs::write(&allowed, format!("{PRINCIPAL} {public}\n")).expect("write");
    let mut args = full_args(&setup);
    args.push("--sign-key".into());
    args.push(key.to_string_lossy().into_owned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let first = setup.root.join("first");
    let second = setup.root.join("second");
    success(&assets(&setup, &first, &args));
    // An existing empty directory is accepted.
    std::fs::create_dir(&second).expect("mkdir");
    success(&assets(&setup, &second, &args));

    let short = &setup.commit[..12];
    let arch = std::env::consts::ARCH;
    let mut expected = vec![
        "SHA256SUMS".to_owned(),
        "SHA256SUMS.sig".to_owned(),
        format!("shardlift-{short}-{arch}-linux.tar.gz"),
        format!("shardlift-{short}-evidence-run-1.tar.gz"),
        format!("shardlift-{short}-source.tar.gz"),
    ];
    expected.sort();
    assert_eq!(listing(&first), expected);
    assert_eq!(listing(&second), expected);
    for name in &expected {
        if name == "SHA256SUMS.sig" {
            continue; // SSHSIG signatures need not be deterministic; both must verify.
        }
        assert_eq!(
            std::fs::read(first.join(name)).expect("read"),
            std::fs::read(second.join(name)).expect("read"),
            "{name} differs between two runs"
        );
    }

    // Stock sha256sum checks every asset.
    let check = Command::new("sha256sum")
        .args(["-c", "--strict", "SHA256SUMS"])
        .current_dir(&first)
        .output()
        .expect("run sha256sum");
    assert!(check.status.success(), "sha256sum: {check:?}");
    assert_eq!(String::from_utf8_lossy(&check.stdout).lines().count(), 3);

    // Stock ssh-keygen verifies the signature over SHA256SUMS.
    for dir in [&first, &second] {
        let sums = std::fs::File::open(dir.join("SHA256SUMS")).expect("open");
        let verify = Command::new("ssh-keygen")
            .args(["-Y", "verify", "-f"])
            .arg(&allowed)
            .args(["-I", PRINCIPAL, "-n", "shardlift-release-assets-v1", "-s"])
            .arg(dir.join("SHA256SUMS.sig"))
            .stdin(sums)
            .output()
            .expect("run ssh-keygen");
        assert!(verify.status.success(), "ssh-keygen -Y verify: {verify:?}");
    }

    // The source tarball lists what `git archive` lists, in its order, with fixed metadata.
    let source = first.join(format!("shardlift-{short}-source.tar.gz"));
    let ours = tar_listing(&source);
    let prefix = format!("--prefix=shardlift-{short}/");
    let archive = Command::new("git")
        .arg("-C")
        .arg(&setup.repo)
        .args(["archive", "--format=tar", &prefix, &setup.commit])
        .output()
        .expect("git archive");
    assert!(archive.status.success());
    let theirs = setup.root.join("git-archive.tar");
    std::fs::write(&theirs, &archive.stdout).expect("write");
    assert_eq!(ours, tar_listing(&theirs));
    assert!(ours.iter().any(|l| l.ends_with("/ci/link.sh")));
    let verbose = Command::new("tar")
        .args(["--numeric-owner", "-tvzf"])
        .arg(&source)
        .output()
        .expect("tar");
    let verbose = String::from_utf8_lossy(&verbose.stdout).into_owned();
    assert!(verbose.lines().all(|l| l.contains(" 0/0 ")), "{verbose}");
    assert!(verbose
        .lines()
        .any(|l| l.starts_with("-rwxr-xr-x") && l.contains("/ci/run.sh")));
    assert!(verbose
        .lines()
        .any(|l| l.starts_with("lrwxrwxrwx") && l.contains("/ci/link.sh -> run.sh")));
    // gzip without a name or a timestamp.
    let bytes = std::fs::read(&source).expect("read");
    assert_eq!(&bytes[3..8], &[0, 0, 0, 0, 0]);

    let evidence = tar_listing(&first.join(format!("shardlift-{short}-evidence-run-1.tar.gz")));
    assert_eq!(
        evidence,
        vec![
            "evidence/",
            "evidence/run-1/",
            "evidence/run-1/SHA256SUMS",
            "evidence/run-1/bundles/",
            "evidence/run-1/bundles/audit.json",
        ]
    );
    let archive = Command::new("git")
        .arg("-C")
        .arg(&setup.repo)
        .args(["archive", "--format=tar", &setup.commit, "evidence/run-1"])
        .output()
        .expect("git archive");
    assert!(archive.status.success());
    std::fs::write(&theirs, &archive.stdout).expect("write");
    assert_eq!(evidence, tar_listing(&theirs), "git archive's order");
    let binaries = tar_listing(&first.join(format!("shardlift-{short}-{arch}-linux.tar.gz")));
    assert_eq!(
        binaries,
        vec![
            format!("shardlift-{short}/"),
            format!("shardlift-{short}/bin/"),
            format!("shardlift-{short}/bin/pipeline"),
            format!("shardlift-{short}/bin/shardlift"),
        ]
    );
}

fn tar_listing(path: &Path) -> Vec<String> {
    let output = Command::new("tar")
        .arg("-tf")
        .arg(path)
        .output()
        .expect("run tar");
    assert!(output.status.success(), "tar -tf: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_source_tarball_alone_needs_no_evidence_or_binaries() {
    let setup = setup();
    let out = setup.root.join("out");
    success(&assets(&setup, &out, &[]));
    let short = &setup.commit[..12];
    assert_eq!(
        listing(&out),
        vec![
            "SHA256SUMS".to_owned(),
            format!("shardlift-{short}-source.tar.gz")
        ]
    );
    // An explicit --commit of HEAD gives the same bytes.
    let again = setup.root.join("again");
    success(&assets(&setup, &again, &["--commit", &setup.commit]));
    assert_eq!(
        std::fs::read(out.join("SHA256SUMS")).expect("read"),
        std::fs::read(again.join("SHA256SUMS")).expect("read")
    );
}

#[test]
fn bad_inputs_are_refused_each_with_its_own_error() {
    let setup = setup();
    let out = setup.root.join("out");
    refused(
        &assets(&setup, &out, &["--evidence", "evidence/nope"]),
        "evidence/nope is not a directory in the tree of commit",
    );
    refused(
        &assets(&setup, &out, &["--evidence", "docs"]),
        "--evidence must name a directory evidence/<dir>",
    );
    refused(
        &assets(
            &setup,
            &out,
            &["--commit", "0123456789abcdef0123456789abcdef01234567"],
        ),
        "commit 0123456789abcdef0123456789abcdef01234567 is not in the repository",
    );
    refused(
        &assets(&setup, &out, &["--commit", "not-hex"]),
        "\"not-hex\" is not a valid commit id",
    );
    let other = setup.root.join("bin/cargo");
    std::fs::write(&other, "x").expect("write");
    refused(
        &assets(
            &setup,
            &out,
            &[
                "--binaries",
                &setup.binaries[0].to_string_lossy(),
                &other.to_string_lossy(),
            ],
        ),
        "--binaries must name exactly the files `pipeline` and `shardlift`",
    );
    let gone = setup.root.join("gone");
    std::fs::create_dir_all(&gone).expect("mkdir");
    refused(
        &assets(
            &setup,
            &out,
            &[
                "--binaries",
                &gone.join("shardlift").to_string_lossy(),
                &gone.join("pipeline").to_string_lossy(),
            ],
        ),
        "cannot read",
    );
    assert!(!out.exists(), "a refusal writes nothing");

    std::fs::create_dir_all(&out).expect("mkdir");
    std::fs::write(out.join("left-over"), "x").expect("write");
    refused(&assets(&setup, &out, &[]), "exists and is not empty");

    std::fs::write(setup.repo.join("src/lib.rs"), "pub fn changed() {}\n").expect("write");
    refused(
        &assets(&setup, &setup.root.join("dirty"), &[]),
        "the checkout is not clean (1 changed or untracked files, first src/lib.rs)",
    );
}

#[test]
fn an_unusable_signing_key_is_refused_before_anything_is_written() {
    let setup = setup();
    let out = setup.root.join("out");
    let key = setup.root.join("no-such-key");
    refused(
        &assets(&setup, &out, &["--sign-key", &key.to_string_lossy()]),
        "no-such-key",
    );
    assert!(!out.exists());
}

#[test]
fn a_tree_entry_with_a_non_utf8_name_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    let setup = setup();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff.txt");
    std::fs::write(setup.repo.join("docs").join(name), "x").expect("write");
    git(&setup.repo, &["add", "-A"]);
    git(&setup.repo, &["commit", "-q", "-m", "a non-UTF-8 name"]);
    let out = setup.root.join("out");
    refused(
        &assets(&setup, &out, &[]),
        "a tree entry has a non-UTF-8 name",
    );
    assert!(!out.exists());
}
