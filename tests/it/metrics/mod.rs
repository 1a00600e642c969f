//! `/metrics` through the `metrics` facade, the live dashboard in a real browser, and the
//! Grafana/Prometheus files of `deploy/` checked against a live exposition.

mod browser;
mod exposition;
mod grafana;
mod webdriver;

use seckill::telemetry::exposition::{parse, Sample};

/// Every sample of the server's `/metrics` (admin route at `admin_base`).
pub async fn scrape(admin_base: &str) -> (String, Vec<Sample>) {
    let text = crate::guards::metrics(admin_base).await;
    let samples = parse(&text);
    (text, samples)
}

/// The value of `name` whose labels include every `(key, value)` of `labels`, summed.
pub fn total(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
        .map(|s| s.value)
        .sum()
}
