//! The Grafana dashboard, the Prometheus alert rules and the scrape example under `deploy/`
//! parse, and every seckill or process metric their queries use exists in the `/metrics` of a
//! live scale-out server that has sold something.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::{json, Value};

use super::scrape;
use crate::helpers::{App, Deploy};

fn deploy(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Metric names in a PromQL expression: identifiers of seckill's and the process's families
/// (label names, values and functions are other identifiers and are skipped).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut in_string = false;
    let mut word = String::new();
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            in_string = !in_string;
        }
        if !in_string && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("seckill_") || word.starts_with("process_") {
            out.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    out
}

/// Every `expr` of the Grafana dashboard's panels.
fn grafana_exprs() -> Vec<String> {
    let dash: Value = serde_json::from_str(&deploy("grafana/seckill.json")).expect("valid JSON");
    assert!(dash["uid"].is_string() && dash["title"].is_string());
    let panels = dash["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    panels
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets").clone())
        .map(|t| t["expr"].as_str().expect("expr").to_owned())
        .collect()
}

/// Every `expr` of the alert rules (and a check of their shape).
fn alert_exprs() -> Vec<String> {
    let rules: serde_yaml::Value =
        serde_yaml::from_str(&deploy("prometheus/alerts.yml")).expect("valid YAML");
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            assert!(rule["alert"].as_str().is_some(), "a named alert: {rule:?}");
            assert!(rule["annotations"]["summary"].as_str().is_some());
            out.push(rule["expr"].as_str().expect("expr").to_owned());
        }
    }
    out
}

#[test]
fn the_scrape_example_names_the_rules_and_the_admin_token() {
    let prom: serde_yaml::Value =
        serde_yaml::from_str(&deploy("prometheus/prometheus.yml")).expect("valid YAML");
    assert_eq!(prom["rule_files"][0].as_str(), Some("alerts.yml"));
    let job = &prom["scrape_configs"][0];
    assert_eq!(job["job_name"].as_str(), Some("seckill"));
    assert_eq!(job["metrics_path"].as_str(), Some("/metrics"));
    assert_eq!(job["authorization"]["type"].as_str(), Some("Bearer"));
    assert!(
        metric_names("rate(seckill_claims_total{outcome=\"won\"}[1m])")
            .contains("seckill_claims_total")
    );
    assert!(metric_names("x{a=\"seckill_not_a_name\"}").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_queried_metric_exists_in_a_live_scale_out_exposition() {
    let app = App::spawn(Deploy::ScaleOut).await;
    app.create(json!({"id": "gf", "stock": 3, "per_user_limit": 1}))
        .await;
    for i in 0..5 {
        app.claim("gf", &format!("u{i}"), 1).await;
    }
    app.settle().await;
    let (text, samples) = scrape(&app.admin_url()).await;
    let present: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    let mut used = BTreeSet::new();
    for expr in grafana_exprs().iter().chain(&alert_exprs()) {
        used.extend(metric_names(expr));
    }
    assert!(used.len() >= 15, "the files query {used:?}");
    let missing: Vec<_> = used
        .iter()
        .filter(|n| !present.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not exposed: {missing:?}\n{text}"
    );
    app.stop().await;
}
