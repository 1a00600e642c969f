//! `seckill bench`: thin wrapper printing the report of [`crate::bench::run`].
//!
//! Exit status: 0 when every invariant held (or verification was skipped), 2 when the
//! verifier found violations, 1 when the bench itself could not run.

use std::io::Write;
use std::process::ExitCode;

use crate::bench::{self, BenchOpts};

pub async fn run(opts: BenchOpts) -> anyhow::Result<ExitCode> {
    let report = bench::run(&opts).await?;
    let mut out = std::io::stdout().lock();
    if opts.json {
        report.write_json(&mut out)?;
    } else {
        report.write_text(&mut out)?;
    }
    out.flush()?;
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
