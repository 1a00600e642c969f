//! `seckill bench`: thin wrapper printing the report of [`crate::bench::run`] (and writing
//! its HTML page with `--html FILE`).
//!
//! Exit status: 0 when every invariant held (or verification was skipped), 2 when the
//! verifier found violations, 1 when the bench itself could not run.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use crate::bench::{self, BenchOpts};

pub async fn run(opts: BenchOpts) -> anyhow::Result<ExitCode> {
    if opts.scenario == bench::ScenarioName::Opening {
        let report = bench::opening::run(&opts).await?;
        let mut out = std::io::stdout().lock();
        if opts.json {
            report.write_json(&mut out)?;
        } else {
            report.write_text(&mut out)?;
        }
        out.flush()?;
        return Ok(if report.clean() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        });
    }
    let report = bench::run(&opts).await?;
    if let Some(path) = &opts.html {
        std::fs::write(path, bench::html::render(&report))
            .with_context(|| format!("writing the HTML report to {}", path.display()))?;
    }
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
