//! SSHSIG interoperability with OpenSSH's `ssh-keygen -Y sign|verify`, both directions,
//! and the distinct rejections (tampered, wrong namespace, wrong key, namespace option).
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use pipeline::sshsig::{self, SshSigError};

const NAMESPACE: &str = "shardlift-receipt-v1";

fn keygen(dir: &Path, name: &str) -> PathBuf {
    let key = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("run ssh-keygen");
    assert!(status.success());
    key
}

fn public_line(key: &Path) -> String {
    let text = std::fs::read_to_string(key.with_extension("pub")).expect("read .pub");
    text.trim().to_owned()
}

fn allowed_signers(dir: &Path, lines: &[String]) -> PathBuf {
    let path = dir.join("allowed_signers");
    std::fs::write(&path, lines.join("\n") + "\n").expect("write allowed_signers");
    path
}

fn keygen_verify(
    allowed: &Path,
    principal: &str,
    namespace: &str,
    sig: &Path,
    message: &[u8],
) -> bool {
    let mut child = Command::new("ssh-keygen")
        .args(["-Y", "verify", "-f"])
        .arg(allowed)
        .args(["-I", principal, "-n", namespace, "-s"])
        .arg(sig)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn ssh-keygen");
    use std::io::Write;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(message)
        .expect("write message");
    child.wait().expect("wait ssh-keygen").success()
}

#[test]
fn our_signature_verifies_with_ssh_keygen_and_with_us() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = keygen(dir.path(), "ci");
    let allowed = allowed_signers(
        dir.path(),
        &[format!(
            "ci@shardlift namespaces=\"{NAMESPACE}\" {}",
            public_line(&key)
        )],
    );
    let message = b"receipt bytes\n";
    let armored = sshsig::sign(&key, NAMESPACE, message).expect("sign");
    assert!(armored.starts_with("-----BEGIN SSH SIGNATURE-----\n"));
    let sig = dir.path().join("msg.sig");
    std::fs::write(&sig, &armored).expect("write sig");
    assert!(keygen_verify(
        &allowed,
        "ci@shardlift",
        NAMESPACE,
        &sig,
        message
    ));
    assert!(!keygen_verify(
        &allowed,
        "ci@shardlift",
        "other",
        &sig,
        message
    ));
    assert!(!keygen_verify(
        &allowed,
        "ci@shardlift",
        NAMESPACE,
        &sig,
        b"tampered\n"
    ));
    assert_eq!(
        sshsig::verify(&allowed, NAMESPACE, message, &armored).expect("verify"),
        "ci@shardlift"
    );
}

#[test]
fn ssh_keygen_signature_verifies_with_us() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = keygen(dir.path(), "dev");
    let allowed = allowed_signers(
        dir.path(),
        &[format!("dev@shardlift {}", public_line(&key))],
    );
    let message_path = dir.path().join("msg");
    let message = b"signed by openssh";
    std::fs::write(&message_path, message).expect("write msg");
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-f"])
        .arg(&key)
        .args(["-n", NAMESPACE])
        .arg(&message_path)
        .status()
        .expect("run ssh-keygen -Y sign");
    assert!(status.success());
    let armored = std::fs::read_to_string(dir.path().join("msg.sig")).expect("read sig");
    assert_eq!(
        sshsig::verify(&allowed, NAMESPACE, message, &armored).expect("verify"),
        "dev@shardlift"
    );
}

#[test]
fn rejections_are_distinct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = keygen(dir.path(), "ci");
    let other = keygen(dir.path(), "other");
    let message = b"receipt";
    let armored = sshsig::sign(&key, NAMESPACE, message).expect("sign");

    let allowed = allowed_signers(dir.path(), &[format!("ci {}", public_line(&key))]);
    assert!(matches!(
        sshsig::verify(&allowed, NAMESPACE, b"receipT", &armored),
        Err(SshSigError::BadSignature)
    ));
    let wrong_ns = sshsig::sign(&key, "file", message).expect("sign");
    assert!(matches!(
        sshsig::verify(&allowed, NAMESPACE, message, &wrong_ns),
        Err(SshSigError::WrongNamespace { .. })
    ));
    let by_other = sshsig::sign(&other, NAMESPACE, message).expect("sign");
    assert!(matches!(
        sshsig::verify(&allowed, NAMESPACE, message, &by_other),
        Err(SshSigError::UnknownSigner { .. })
    ));
    assert!(matches!(
        sshsig::verify(&allowed, NAMESPACE, message, "garbage"),
        Err(SshSigError::MalformedSignature(_))
    ));

    let restricted = allowed_signers(
        dir.path(),
        &[format!("ci namespaces=\"git,file\" {}", public_line(&key))],
    );
    assert!(matches!(
        sshsig::verify(&restricted, NAMESPACE, message, &armored),
        Err(SshSigError::NamespaceNotAllowed { .. })
    ));
    let expired = allowed_signers(
        dir.path(),
        &[format!(
            "ci valid-before=\"20000101\" {}",
            public_line(&key)
        )],
    );
    assert!(matches!(
        sshsig::verify(&expired, NAMESPACE, message, &armored),
        Err(SshSigError::OutsideValidity { .. })
    ));
    let ca_only = allowed_signers(
        dir.path(),
        &[format!("ci cert-authority {}", public_line(&key))],
    );
    assert!(matches!(
        sshsig::verify(&ca_only, NAMESPACE, message, &armored),
        Err(SshSigError::UnknownSigner { .. })
    ));
    let broken = allowed_signers(dir.path(), &["ci not-a-key".to_owned()]);
    assert!(matches!(
        sshsig::verify(&broken, NAMESPACE, message, &armored),
        Err(SshSigError::MalformedAllowedSigners { line: 1, .. })
    ));
}
