//! `visuals render` and `visuals check`: the clap arguments and the printing around
//! [`pipeline::visuals`].
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use pipeline::visuals;

/// Pictures of the committed release evidence: render them, or check them.
#[derive(clap::Subcommand, Debug)]
pub enum VisualsCommand {
    /// Draw the ten SVG views, the transcript PNG, the workflow GIF and manifest.json
    /// from one release-evidence directory (and RFC 0001), and the checkpoint bench's
    /// view from the committed evidence/bench/checkpoint-<commit>.json, into --out.
    Render(RenderArgs),
    /// Render again in memory and compare with the committed visuals byte for byte,
    /// verify the manifest and audit the rasters; fails naming the first stale or
    /// tampered file.
    Check(CheckArgs),
}

#[derive(clap::Args, Debug)]
pub struct Common {
    /// The repository root (RFC 0001 and evidence/ are found under it).
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub root: PathBuf,
    /// The release-evidence directory (default: the single evidence/release-* under
    /// --root; for check, with several, the one manifest.json names).
    #[arg(long, value_name = "DIR")]
    pub evidence: Option<PathBuf>,
}

impl Common {
    fn evidence_dir(&self) -> anyhow::Result<PathBuf> {
        match &self.evidence {
            Some(dir) => Ok(dir.clone()),
            None => Ok(visuals::evidence::default_evidence_dir(&self.root)?),
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct RenderArgs {
    #[command(flatten)]
    pub common: Common,
    /// Where to write the pictures and manifest.json.
    #[arg(long, value_name = "DIR", default_value = "docs/visuals")]
    pub out: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub common: Common,
    /// The committed visuals to check.
    #[arg(long, value_name = "DIR", default_value = "docs/visuals")]
    pub visuals: PathBuf,
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}

pub fn run(command: VisualsCommand) -> anyhow::Result<()> {
    match command {
        VisualsCommand::Render(args) => {
            let evidence = args.common.evidence_dir()?;
            let rendered = visuals::render(&args.common.root, &evidence)
                .with_context(|| format!("rendering from {}", shown(&evidence)))?;
            visuals::write(&rendered, &args.out)?;
            println!(
                "{}",
                serde_json::json!({
                    "status": "rendered",
                    "evidence": rendered.manifest.evidence,
                    "files": rendered.files.len(),
                })
            );
        }
        VisualsCommand::Check(args) => {
            let evidence = match &args.common.evidence {
                Some(dir) => dir.clone(),
                None => visuals::evidence_for_check(&args.common.root, &args.visuals)?,
            };
            let checked = visuals::check(&args.common.root, &evidence, &args.visuals)
                .with_context(|| format!("checking {}", shown(&args.visuals)))?;
            println!("{}", serde_json::to_string(&checked)?);
        }
    }
    Ok(())
}
