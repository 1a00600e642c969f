//! `seckill chaos`: runs a fault campaign and prints its figures; exit status 2 on any
//! violation.

use std::process::ExitCode;

use crate::chaos::ChaosOpts;

pub async fn run(opts: ChaosOpts) -> anyhow::Result<ExitCode> {
    let totals = crate::chaos::run(&opts).await?;
    crate::chaos::print_totals(&totals, opts.json);
    Ok(if totals.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
