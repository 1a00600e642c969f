//! `seckill bench` against a real embedded server, with small numbers: every preset's shape,
//! admin events mid-storm, and the binary's exit status and JSON report.

use std::process::Command;
use std::time::Duration;

use seckill::bench::{self, BenchOpts, Pick, ScenarioName};
use serde_json::Value;

use crate::helpers::{App, Deploy, TOKEN};

fn opts(app: &App, scenario: ScenarioName) -> BenchOpts {
    let mut o = BenchOpts::new(&app.client.url(""), TOKEN, scenario);
    o.drain_interval = Duration::from_millis(50);
    o
}

/// Runs the bench and asserts a clean, drained verification; returns the report.
async fn clean_run(o: &BenchOpts) -> bench::BenchReport {
    let report = bench::run(o).await.expect("the bench runs");
    let v = report.verification.as_ref().expect("verification ran");
    assert!(
        v.violations.is_empty(),
        "violations against a correct server: {:#?}",
        v.violations
    );
    assert!(v.drained);
    assert_eq!(report.transport_errors, 0);
    assert!(report.non_2xx.is_empty(), "{:?}", report.non_2xx);
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed000_preset_sells_exactly_the_stock() {
    let app = App::spawn(Deploy::Embedded).await;
    let r = clean_run(&opts(&app, ScenarioName::Seed000)).await;
    assert_eq!(r.requests, 100);
    assert_eq!(r.outcomes["won"], 10);
    assert_eq!(r.outcomes["sold_out"], 90);
    let v = r.verification.unwrap();
    assert!(v.under_sell_checked);
    assert_eq!((v.orders, v.remaining), (10, 0));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed002_shape_with_repeat_clickers_and_events() {
    let app = App::spawn(Deploy::Embedded).await;
    let mut o = opts(&app, ScenarioName::Seed002);
    o.stock = Some(200);
    o.users = Some(1_000);
    o.pick = Some(Pick::Uniform);
    o.clicks = Some(2);
    o.requests = Some(3_000);
    o.connections = Some(16);
    // At a fixed rate the storm lasts 3 s however fast a paused campaign answers, so every
    // event is reached even when admin calls are slow on a loaded machine.
    o.rate = Some(1_000.0);
    o.events = ["20%:cancel=5", "40%:pause", "50%:resume", "60%:restock=20"]
        .iter()
        .map(|e| e.parse().unwrap())
        .collect();
    let r = clean_run(&o).await;
    assert_eq!(r.requests, 3_000);
    assert!(r.events.iter().all(|e| e.ok), "{:#?}", r.events);
    let v = r.verification.unwrap();
    assert_eq!(v.total, 220);
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prizes_with_idempotent_retries() {
    let app = App::spawn(Deploy::Embedded).await;
    let mut o = opts(&app, ScenarioName::Prizes);
    o.codes = Some(300);
    o.users = Some(500);
    o.requests = Some(1_000);
    o.connections = Some(16);
    o.idempotency = true;
    let r = clean_run(&o).await;
    let v = r.verification.unwrap();
    assert_eq!((v.orders, v.remaining), (300, 0));
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn soldout_and_hot_presets_for_a_fixed_time_and_rate() {
    let app = App::spawn(Deploy::Embedded).await;
    let mut o = opts(&app, ScenarioName::Soldout);
    o.duration = Some(Duration::from_millis(300));
    o.connections = Some(8);
    let r = clean_run(&o).await;
    assert_eq!(r.presold, 101);
    assert_eq!(r.outcomes.keys().collect::<Vec<_>>(), ["sold_out"]);

    let mut o = opts(&app, ScenarioName::Hot);
    o.duration = Some(Duration::from_millis(300));
    o.connections = Some(8);
    o.rate = Some(500.0);
    let r = clean_run(&o).await;
    assert_eq!(r.outcomes.keys().collect::<Vec<_>>(), ["won"]);
    assert!(
        r.requests <= 151,
        "a 500/s schedule over 0.3s: {}",
        r.requests
    );
    app.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_binary_reports_json_and_html_and_exits_zero() {
    let app = App::spawn(Deploy::Embedded).await;
    let url = app.client.url("");
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let (u, p) = (url.clone(), page.clone());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_seckill"))
            .args(["bench", "--url", &u, "--scenario", "seed000", "--json"])
            .args(["--drain-interval", "50ms", "--threads", "1", "--html"])
            .arg(&p)
            .env("SECKILL_ADMIN_TOKEN", TOKEN)
            .output()
            .expect("seckill bench runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert_eq!(report["requests"], 100);
    assert_eq!(report["outcomes"]["won"], 10);
    assert_eq!(report["verification"]["violations"], Value::Array(vec![]));
    assert!(report["latency_ms"]["p99"].as_f64().unwrap() > 0.0);

    // The HTML page: written, self-contained, with this run's figures.
    let html = std::fs::read_to_string(&page).expect("--html wrote the page");
    for outside in [
        "src=", "href=", "url(", "<script", "<link", "@import", "https://",
    ] {
        assert!(
            !html.contains(outside),
            "the page refers outside: {outside}"
        );
    }
    assert_eq!(
        html.matches("http://").count(),
        html.matches(url.as_str()).count(),
        "only the target's address may be written out"
    );
    let p99 = format!("p99 {:.3}", report["latency_ms"]["p99"].as_f64().unwrap());
    assert!(html.contains(&p99), "the page lacks {p99}");
    assert!(html.contains("<tr><th>Requests</th><td>100</td></tr>"));
    assert!(html.contains("<tr><th>won</th><td class=\"n\">10</td>"));
    assert!(html.contains("<tr><th>sold_out</th><td class=\"n\">90</td>"));
    assert!(html.contains("OK: every invariant holds"));
    assert!(html.contains("Latency by percentile (HDR)"));
    assert!(html.contains("Throughput over time"));
    assert_eq!(
        html.matches("<polyline").count(),
        4,
        "two latency and two throughput series"
    );
    app.stop().await;
}

/// The hidden `baseline` subcommand serves the claim route the bench can storm unverified.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_baseline_handler_answers_claims() {
    let started = crate::child::start(
        crate::child::seckill(&["baseline", "--listen", "127.0.0.1:0"], &[]),
        crate::child::SERVING,
    );
    let (mut child, url) = (
        started.child,
        started.url.expect("baseline gives its address"),
    );
    let mut o = BenchOpts::new(&url, "", ScenarioName::Hot);
    o.campaign = Some("ceiling".into());
    o.no_verify = true;
    o.admin_token = None;
    o.requests = Some(500);
    o.duration = None;
    o.connections = Some(4);
    let r = bench::run(&o).await.expect("the bench runs");
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(r.outcomes["won"], 500);
    assert!(r.verification.is_none() && r.clean());
}

/// The `holds` preset on a code campaign: winners pay with probability 0.5 after a random
/// delay (some too late), the rest expire and their codes sell again; the verifier checks
/// every order resolved as its answers said.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_preset_resolves_every_order_once_and_resells_expired_units() {
    let app = App::spawn(Deploy::Embedded).await;
    holds_preset_runs_clean(&app.client.url("")).await;
    app.stop().await;
}

/// `seckill bench --scenario holds` against `url` (one or several instances): 100 codes,
/// 1-second holds, 4 s at 150 claims/s; a clean, drained verification with some orders
/// confirmed, some expired and more orders than codes (expired codes sold again).
pub async fn holds_preset_runs_clean(url: &str) {
    let mut o = BenchOpts::new(url, TOKEN, ScenarioName::Holds);
    o.drain_interval = Duration::from_millis(50);
    o.codes = Some(100);
    o.hold_seconds = Some(1);
    o.duration = Some(Duration::from_secs(4));
    o.connections = Some(8);
    o.rate = Some(150.0);
    let r = clean_run(&o).await;
    let v = r.verification.unwrap();
    let h = v.holds.expect("the holds summary");
    assert!(h.expired > 0 && h.confirmed > 0, "{h:?}");
    assert!(
        v.orders > 100,
        "expired codes were sold again: {} orders",
        v.orders
    );
    assert_eq!(v.remaining + v.active_units, v.total);
}
