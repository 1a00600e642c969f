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
        return print(
            report.clean(),
            |out| report.write_json(out),
            |out| report.write_text(out),
            opts.json,
        );
    }
    let report = bench::run(&opts).await?;
    if let Some(path) = &opts.html {
        std::fs::write(path, bench::html::render(&report))
            .with_context(|| format!("writing the HTML report to {}", path.display()))?;
    }
    print(
        report.clean(),
        |out| report.write_json(out),
        |out| report.write_text(out),
        opts.json,
    )
}

/// Prints a report as JSON or text; the exit status says whether it was clean.
fn print(
    clean: bool,
    json: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    text: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    if as_json {
        json(&mut out)?;
    } else {
        text(&mut out)?;
    }
    out.flush()?;
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}
