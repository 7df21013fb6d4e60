//! `shardlift dataset ...`: fetch and verify the pinned Fashion-MNIST resources.
use std::path::PathBuf;

use anyhow::Context as _;

use shardlift::dataset::{fetch, FetchOptions};

/// Fetch and check the pinned Fashion-MNIST resources.
#[derive(clap::Subcommand, Debug)]
pub enum DatasetCommand {
    /// Make sure the cache holds the four pinned Fashion-MNIST payloads, verified.
    ///
    /// Already-cached files are re-verified and kept (no network). Missing ones come
    /// from --source-directory when given; otherwise from the upstream download
    /// (override the base URL with SHARDLIFT_DATASET_BASE_URL), then from Debian's
    /// `dataset-fashion-mnist` package in /usr/share/datasets/fashion-mnist. Every
    /// payload is checked against its pinned size and SHA-256 and parsed as IDX before
    /// it is installed; downloads are also checked against the upstream .gz pin. On any
    /// error the cache is left exactly as it was. Progress goes to stderr.
    Fetch {
        /// The cache directory (created with mode 0700 if missing; must be owned by you
        /// and not group- or world-writable). Payloads go to DIR/fashion-mnist-v1/.
        #[arg(long, value_name = "DIR")]
        cache_directory: PathBuf,
        /// Take the files only from DIR: `<name>.gz` or uncompressed `<name>` for
        /// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
        /// t10k-labels-idx1-ubyte. No download is attempted.
        #[arg(long, value_name = "DIR")]
        source_directory: Option<PathBuf>,
        /// Print the report (per resource: name, payload SHA-256, bytes, source) as JSON
        /// on stdout.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(command: DatasetCommand) -> anyhow::Result<()> {
    match command {
        DatasetCommand::Fetch {
            cache_directory,
            source_directory,
            json,
        } => {
            let mut options = FetchOptions::new(cache_directory);
            options.source_directory = source_directory;
            let report = fetch(&options).context("dataset fetch failed")?;
            if json {
                let text = serde_json::to_string_pretty(&report)
                    .context("cannot encode the fetch report")?;
                outln!("{text}");
            } else {
                for resource in &report.resources {
                    outln!(
                        "{}  {}  {} bytes  {}",
                        resource.payload_sha256,
                        resource.name,
                        resource.bytes,
                        resource.source.as_str()
                    );
                }
            }
            Ok(())
        }
    }
}
