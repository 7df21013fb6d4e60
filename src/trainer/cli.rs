//! `shardlift train`, `bench`, and the hidden worker (being written).
#[derive(clap::Args, Debug)]
pub struct TrainArgs {}
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {}
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {}

pub fn run_train(_args: TrainArgs) -> anyhow::Result<()> {
    anyhow::bail!("train is not implemented yet")
}
pub fn run_bench(command: BenchCommand) -> anyhow::Result<()> {
    match command {}
}
pub fn run_worker(_args: WorkerArgs) -> anyhow::Result<()> {
    anyhow::bail!("worker is not implemented yet")
}
