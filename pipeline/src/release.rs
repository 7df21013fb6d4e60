//! Release evidence (being written).

/// Produce release evidence for a clean checkout (not implemented yet).
#[derive(clap::Args, Debug)]
pub struct ReleaseEvidenceArgs {}

/// Re-check a release-evidence directory (not implemented yet).
#[derive(clap::Args, Debug)]
pub struct VerifyReleaseArgs {}

pub fn run_release_evidence(_args: ReleaseEvidenceArgs) -> anyhow::Result<()> {
    anyhow::bail!("release-evidence is not implemented yet")
}

pub fn run_verify_release(_args: VerifyReleaseArgs) -> anyhow::Result<()> {
    anyhow::bail!("verify-release is not implemented yet")
}
