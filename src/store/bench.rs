//! Store benchmarks (being written).
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
}

pub fn run(_args: BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
