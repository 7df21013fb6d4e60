//! Test-lane receipts: record a lane, merge lanes (carrying forward unchanged shards),
//! plan a carry-forward, verify against a policy, sign.
//!
//! A receipt is an in-toto Statement with the test-result predicate and a closed ShardLift
//! extension block ([`schema`]), written as canonical JSON. Its signature is a detached
//! SSHSIG (`FILE.sig`, namespace [`schema::SIGNATURE_NAMESPACE`]) over the file's bytes,
//! checkable with `ssh-keygen -Y verify -f allowed_signers -I PRINCIPAL -n
//! shardlift-receipt-v1 -s FILE.sig < FILE`.
use std::path::{Path, PathBuf};

use shardlift::durable;

pub mod junit;
pub mod libtest;
pub mod manifest;
pub mod merge;
pub mod record;
pub mod schema;
pub mod verify;

/// Why a receipt or signature file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum IoError {
    /// Reading a file failed.
    #[error("cannot read {path}: {message}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error's message.
        message: String,
    },
    /// Writing a file through the durable writer failed.
    #[error(transparent)]
    Durable(#[from] durable::DurableError),
}

/// Why a receipt's detached signature was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    /// There is no `FILE.sig`; the path is the signature path looked for.
    #[error("unsigned: {0} does not exist")]
    Unsigned(PathBuf),
    /// The signature file could not be read.
    #[error(transparent)]
    Io(#[from] IoError),
    /// The signature did not verify against the allowed signers.
    #[error(transparent)]
    Rejected(#[from] crate::sshsig::SshSigError),
}

/// Reads the whole of `path`.
pub fn read_file(path: &Path) -> Result<Vec<u8>, IoError> {
    std::fs::read(path).map_err(|e| IoError::Read {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

/// Writes `bytes` to `path` through the durable writer (temp, fsync, rename, directory
/// fsync), creating missing parent directories durably first.
pub fn write_durably(path: &Path, bytes: &[u8]) -> Result<(), IoError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        durable::ensure_dir_all(parent)?;
    }
    durable::write_file(path, bytes, durable::WriteOptions::REPLACEABLE)?;
    Ok(())
}

/// The detached signature path: `FILE.sig`.
pub fn signature_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sig");
    PathBuf::from(name)
}

/// Why a receipt could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Signing failed (key unreadable, encrypted or unsupported).
    #[error(transparent)]
    Sign(#[from] crate::sshsig::SshSigError),
    /// Writing `FILE.sig` failed.
    #[error(transparent)]
    Io(#[from] IoError),
}

/// Signs `bytes` (the content of `path`) and writes `path.sig`.
pub fn write_signature(path: &Path, key: &Path, bytes: &[u8]) -> Result<PathBuf, SignError> {
    let armored = crate::sshsig::sign(key, schema::SIGNATURE_NAMESPACE, bytes)?;
    let sig = signature_path(path);
    write_durably(&sig, armored.as_bytes())?;
    Ok(sig)
}

/// Checks `path.sig` over `bytes`; returns the signer's principal.
pub fn verify_signature(
    path: &Path,
    bytes: &[u8],
    allowed_signers: &Path,
) -> Result<String, SignatureError> {
    let sig = signature_path(path);
    if !sig.exists() {
        return Err(SignatureError::Unsigned(sig));
    }
    let armored = String::from_utf8(read_file(&sig)?)
        .map_err(|_| crate::sshsig::SshSigError::MalformedSignature("not UTF-8".to_owned()))?;
    Ok(crate::sshsig::verify(
        allowed_signers,
        schema::SIGNATURE_NAMESPACE,
        bytes,
        &armored,
    )?)
}
