//! `seckill events receive`: a webhook receiver to try an endpoint with, and to measure
//! delivery by. It checks every request's Standard Webhooks signature and timestamp (400 when
//! they do not verify), answers `--status` after `--delay-ms` (a slow or failing receiver on
//! demand), prints each verified event as a JSON line with `--print`, and logs a summary every
//! `--report-every` and at exit: events received, repeats of an id, refused signatures, and
//! the lag from each event's transition (`at`) to its arrival, p50 / p99 / max.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use clap::Args;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde_json::json;

use crate::delivery::sign::{self, Key};
use crate::guard::secret::Secret;

#[derive(Debug, Args)]
pub struct ReceiveOpts {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:9000")]
    pub listen: SocketAddr,
    /// The endpoint's secret (`whsec_…`).
    #[arg(long, env = "SECKILL_WEBHOOK_SECRET", hide_env_values = true)]
    pub secret: Secret,
    /// Status of the answer to a verified request (410 makes seckill disable the endpoint).
    #[arg(long, default_value_t = 204)]
    pub status: u16,
    /// Wait this long before answering (a slow receiver).
    #[arg(long, default_value_t = 0)]
    pub delay_ms: u64,
    /// Print each verified event on stdout as a JSON line.
    #[arg(long)]
    pub print: bool,
    /// Log a summary this often (and at exit).
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse)]
    pub report_every: Duration,
}

#[derive(Default)]
struct Tally {
    ids: HashSet<String>,
    received: u64,
    repeats: u64,
    refused: u64,
    lag_us: Option<Histogram<u64>>,
}

struct Receiver {
    key: Key,
    status: StatusCode,
    delay: Duration,
    print: bool,
    tally: Mutex<Tally>,
}

pub async fn run(opts: ReceiveOpts) -> anyhow::Result<ExitCode> {
    let key = Key::parse(opts.secret.expose()).map_err(|e| anyhow::anyhow!("--secret: {e}"))?;
    let me = Arc::new(Receiver {
        key,
        status: StatusCode::from_u16(opts.status)?,
        delay: Duration::from_millis(opts.delay_ms),
        print: opts.print,
        tally: Mutex::new(Tally {
            lag_us: Some(Histogram::new_with_bounds(1, 3_600_000_000, 3)?),
            ..Tally::default()
        }),
    });
    let app = axum::Router::new()
        .fallback(axum::routing::post(receive))
        .with_state(me.clone());
    let listener = tokio::net::TcpListener::bind(opts.listen).await?;
    tracing::info!("receiving webhooks on http://{}", listener.local_addr()?);
    let reporter = {
        let me = me.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(opts.report_every).await;
                report(&me);
            }
        })
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::app::shutdown_signal())
        .await?;
    reporter.abort();
    report(&me);
    Ok(ExitCode::SUCCESS)
}

fn report(me: &Receiver) {
    let t = me.tally.lock();
    let lag = t.lag_us.as_ref().expect("made at start");
    let ms = |q: f64| lag.value_at_quantile(q) as f64 / 1000.0;
    let summary = json!({
        "received": t.received,
        "distinct": t.ids.len(),
        "repeats": t.repeats,
        "refused_signatures": t.refused,
        "lag_ms": {"p50": ms(0.5), "p99": ms(0.99), "max": lag.max() as f64 / 1000.0},
    });
    tracing::info!(summary = %summary, "webhooks received");
}

async fn receive(State(me): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let now = crate::clock::now();
    let checked = sign::verify(
        &me.key,
        h("webhook-id"),
        h("webhook-timestamp"),
        h("webhook-signature"),
        &body,
        now.timestamp(),
    );
    if let Err(e) = checked {
        tracing::warn!(id = h("webhook-id"), error = %e, "refused a request");
        me.tally.lock().refused += 1;
        return StatusCode::BAD_REQUEST;
    }
    let at = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            v["at"]
                .as_str()
                .and_then(|s| s.parse::<chrono::DateTime<chrono::Utc>>().ok())
        });
    {
        let mut t = me.tally.lock();
        t.received += 1;
        if !t.ids.insert(h("webhook-id").to_owned()) {
            t.repeats += 1;
        }
        if let (Some(at), Some(lag)) = (at, t.lag_us.as_mut()) {
            let us = (now - at).num_microseconds().unwrap_or(0).max(1) as u64;
            let _ = lag.record(us.min(3_600_000_000));
        }
    }
    if me.print {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&body).and_then(|_| out.write_all(b"\n"));
    }
    if !me.delay.is_zero() {
        tokio::time::sleep(me.delay).await;
    }
    me.status
}
