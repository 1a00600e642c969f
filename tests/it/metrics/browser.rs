//! The dashboard in a real browser: headless chromium (through chromedriver) opens
//! `/dashboard` while `seckill bench` storms a campaign, sees its numbers move, and once the
//! storm is over shows what the API says; the screenshot is target/dashboard.png
//! (docs/dashboard.png with `SECKILL_UPDATE_SCREENSHOT=1`).

use std::time::Duration;

use seckill::bench::{self, BenchOpts, ScenarioName};
use serde_json::{json, Value};

use super::webdriver::Driver;
use crate::helpers::{App, Deploy, TOKEN};

/// What the page shows for campaign `dash` and the tiles, read from the DOM.
const READ: &str = r#"
const row = document.querySelector('#campaigns tr[data-id="dash"]');
const cell = (c) => row ? row.querySelector('td.' + c).textContent : null;
return {
  polls: Number(document.getElementById('status').dataset.polls || 0),
  rate: document.getElementById('rate-all').textContent,
  p99: document.getElementById('p99').textContent,
  stock: cell('stock'),
  won: cell('won'),
  sold_out: cell('sold_out'),
};"#;

fn num(v: &Value) -> u64 {
    v.as_str()
        .unwrap_or("")
        .replace(',', "")
        .parse()
        .unwrap_or(0)
}

fn rate(v: &Value) -> f64 {
    v.as_str()
        .unwrap_or("")
        .replace(',', "")
        .parse()
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dashboard_moves_during_a_storm_and_matches_the_api() {
    let driver = Driver::start().await;
    let app = App::spawn(Deploy::Embedded).await;
    app.create(json!({"id": "dash", "stock": 2500, "per_user_limit": 1}))
        .await;
    let browser = driver.session().await;
    browser
        .goto(&format!("{}/dashboard#token={TOKEN}", app.admin_url()))
        .await;

    // The storm: 400 claims/s of distinct users for 8 s (it sells out near the end).
    let mut o = BenchOpts::new(&app.client.url(""), TOKEN, ScenarioName::Seed000);
    o.campaign = Some("dash".into());
    o.users = Some(100_000);
    o.requests = None;
    o.duration = Some(Duration::from_secs(8));
    o.rate = Some(400.0);
    o.connections = Some(8);
    o.drain_interval = Duration::from_millis(50);
    let storm = tokio::spawn(async move { bench::run(&o).await });

    let mut seen_won = Vec::new();
    let mut max_rate: f64 = 0.0;
    let mut shot = None;
    while !storm.is_finished() {
        let v = browser.eval(READ).await;
        if v["stock"].is_string() {
            seen_won.push(num(&v["won"]));
            max_rate = max_rate.max(rate(&v["rate"]));
            if shot.is_none() && num(&v["won"]) > 500 && rate(&v["rate"]) > 0.0 {
                shot = Some(browser.screenshot().await);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let report = storm.await.unwrap().expect("the bench runs");
    let v = report.verification.as_ref().expect("verified");
    assert!(v.violations.is_empty(), "{:#?}", v.violations);
    seen_won.dedup();
    assert!(
        seen_won.len() >= 3,
        "the won count shown did not move during the storm: {seen_won:?}"
    );
    assert!(max_rate > 0.0, "claims/s never shown above 0");

    // Quiet: the page converges on the API's view (remaining, total, won = orders).
    let view = app.client.campaign("dash").await.unwrap();
    let orders = app.client.all_orders("dash").await.unwrap().len() as u64;
    assert_eq!(orders, view.total - view.remaining);
    let want_stock = format!("{} / {}", fmt(view.remaining), fmt(view.total));
    let mut last = Value::Null;
    for _ in 0..60 {
        last = browser.eval(READ).await;
        if last["stock"] == want_stock.as_str() && num(&last["won"]) == orders {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(last["stock"], want_stock.as_str(), "page: {last}");
    assert_eq!(num(&last["won"]), orders, "page: {last}");
    assert_eq!(
        num(&last["won"]) + num(&last["sold_out"]),
        report.outcomes.get("won").copied().unwrap_or(0)
            + report.outcomes.get("sold_out").copied().unwrap_or(0),
        "the page counts every answer the bench got: {last}"
    );

    let png = match shot {
        Some(png) => png,
        None => browser.screenshot().await,
    };
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
    // Saved under target/ on every run; `SECKILL_UPDATE_SCREENSHOT=1` refreshes the README's
    // copy in docs/ (so a test run leaves the source tree as it was).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let path = if std::env::var_os("SECKILL_UPDATE_SCREENSHOT").is_some() {
        root.join("docs/dashboard.png")
    } else {
        root.join("target/dashboard.png")
    };
    std::fs::write(&path, png).expect("screenshot saved");
    eprintln!("dashboard screenshot: {}", path.display());
    browser.close().await;
    app.stop().await;
}

/// `1,234` as the page writes numbers.
fn fmt(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The page is served with the admin routes (only on --admin-listen when set), and its data
/// needs the admin token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_lives_with_the_admin_routes() {
    let app = App::spawn_with(|c| c.admin_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let http = reqwest::Client::new();
    let public = app.client.url("/dashboard");
    assert_eq!(http.get(&public).send().await.unwrap().status(), 404);
    let admin = app.admin_url();
    let page = http.get(format!("{admin}/dashboard")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let html = page.text().await.unwrap();
    assert!(html.contains("/dashboard/dashboard.js"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "no external request"
    );
    for asset in ["dashboard.js", "dashboard.css"] {
        let r = http
            .get(format!("{admin}/dashboard/{asset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{asset}");
    }
    let data = format!("{admin}/dashboard/data");
    let r = http.get(&data).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unauthorized");
    let r = http.get(&data).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert!(body["samples"].is_array() && body["campaigns"].is_array());
    app.stop().await;
}
