//! The hidden `shardlift store-child`: the publisher and recovery children the crash
//! harness spawns, kills and reads (`lab::harness`).
use std::path::PathBuf;

use anyhow::Context;
use shardlift::lab::harness::PublisherPause;

use shardlift::store::location::Location;

#[derive(clap::Args, Debug)]
pub struct StoreChildArgs {
    #[command(subcommand)]
    pub command: StoreChildCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum StoreChildCommand {
    /// Publish the handoff's state, stopping where `--pause-at` says until acknowledged.
    Publish {
        /// A store directory or an `s3://bucket/prefix` location.
        #[arg(long)]
        store: Location,
        #[arg(long)]
        handoff: PathBuf,
        /// barriers (after every named step), operations (before every file-system
        /// operation) or nowhere (say ready, then run free).
        #[arg(long, default_value = "barriers")]
        pause_at: String,
    },
    /// Recover and print the report as JSON.
    Recover {
        /// A store directory or an `s3://bucket/prefix` location.
        #[arg(long)]
        store: Location,
    },
}

pub fn run_child(args: StoreChildArgs) -> anyhow::Result<()> {
    match args.command {
        StoreChildCommand::Publish {
            store,
            handoff,
            pause_at,
        } => {
            let pause = PublisherPause::from_arg(&pause_at).with_context(|| {
                format!("--pause-at {pause_at:?}: expected barriers, operations or nowhere")
            })?;
            match store {
                Location::S3(location) => {
                    super::objstore::child_publish(&location, &handoff, pause)
                }
                Location::Dir(dir) => {
                    shardlift::lab::harness::child_publish(&dir, &handoff, pause)?;
                    Ok(())
                }
            }
        }
        StoreChildCommand::Recover { store } => match store {
            Location::S3(location) => super::objstore::child_recover(&location),
            Location::Dir(dir) => {
                shardlift::lab::harness::child_recover(&dir)?;
                Ok(())
            }
        },
    }
}
