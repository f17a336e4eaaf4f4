//! `specdec rec quality` (to be written).

#[derive(clap::Args, Debug)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    anyhow::bail!("`specdec rec quality` is not built yet")
}
