//! Test-lane receipts (being written).

#[derive(clap::Subcommand, Debug)]
pub enum ReceiptCommand {}

pub fn run(command: ReceiptCommand) -> anyhow::Result<()> {
    match command {}
}
