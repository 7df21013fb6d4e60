//! `shardlift dataset ...` (being written).
#[derive(clap::Subcommand, Debug)]
pub enum DatasetCommand {}

pub fn run(command: DatasetCommand) -> anyhow::Result<()> {
    match command {}
}
