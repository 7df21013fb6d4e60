//! `shardlift store ...`, `crash-matrix` and the hidden store child (being written).
#[derive(clap::Subcommand, Debug)]
pub enum StoreCommand {}

#[derive(clap::Args, Debug)]
pub struct CrashMatrixArgs {}

#[derive(clap::Args, Debug)]
pub struct StoreChildArgs {}

pub fn run(command: StoreCommand) -> anyhow::Result<()> {
    match command {}
}

pub fn run_crash_matrix(_args: CrashMatrixArgs) -> anyhow::Result<()> {
    anyhow::bail!("crash-matrix is not implemented yet")
}

pub fn run_child(_args: StoreChildArgs) -> anyhow::Result<()> {
    anyhow::bail!("store-child is not implemented yet")
}
