//! `shardlift invariants ...` and the hidden elastic worker (being written).
#[derive(clap::Subcommand, Debug)]
pub enum InvariantsCommand {}

#[derive(clap::Args, Debug)]
pub struct ElasticWorkerArgs {}

pub fn run(command: InvariantsCommand) -> anyhow::Result<()> {
    match command {}
}

pub fn run_elastic_worker(_args: ElasticWorkerArgs) -> anyhow::Result<()> {
    anyhow::bail!("elastic-worker is not implemented yet")
}
