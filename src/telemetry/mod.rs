//! Logs and metrics.
//!
//! Logging: `tracing` to stderr, filtered by `RUST_LOG` (default `info`), written by a
//! background thread (`tracing-appender`): a request never waits for stderr, and when the
//! buffer (128,000 lines) is full under a flood, lines are dropped rather than requests slowed.
//! [`flush_logs`] writes out what is buffered; every exit path calls it. Metrics: the
//! `metrics` facade with the Prometheus exporter — each server instance has its own recorder
//! ([`registry`]), process-wide series (process, group commit, Redis scripts, pipeline) go to
//! the global one ([`process`]); `GET /metrics` renders both. Every metric is listed in
//! [`catalog`].

pub mod catalog;
pub mod claims;
pub mod exposition;
pub mod process;
pub mod registry;
mod with_id;

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::EnvFilter;

pub use registry::Registry;

/// Keeps the log writer thread; dropped by [`flush_logs`].
static LOG_GUARD: Mutex<Option<tracing_appender::non_blocking::WorkerGuard>> = Mutex::new(None);

pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let (writer, guard) = tracing_appender::non_blocking(std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let format = tracing_subscriber::fmt::format().with_target(false);
    let installed = if json {
        builder
            .json()
            .event_format(with_id::WithRequestId {
                inner: format.json(),
                json: true,
            })
            .try_init()
    } else {
        builder
            .event_format(with_id::WithRequestId {
                inner: format,
                json: false,
            })
            .try_init()
    };
    if installed.is_ok() {
        *LOG_GUARD.lock().unwrap_or_else(|e| e.into_inner()) = Some(guard);
    }
}

/// Writes out every buffered log line and stops the writer thread: call it right before the
/// process exits (later lines are lost).
pub fn flush_logs() {
    let guard = LOG_GUARD.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(guard);
}

/// The exporter settings of every recorder: histograms with buckets (so Prometheus can
/// aggregate them across instances), latency in seconds, batch sizes in items.
fn builder() -> PrometheusBuilder {
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), catalog::LATENCY_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Suffix("_batch_size".into()),
                catalog::BATCH_BUCKETS,
            )
        })
        .expect("bucket lists are not empty")
}

/// How often recorded histogram samples are folded into their buckets between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Keeps `handle`'s memory bounded while nobody scrapes: histogram samples wait in a buffer
/// until an upkeep folds them into buckets, so one background thread runs the upkeep of every
/// live recorder every [`UPKEEP_EVERY`] (a dropped recorder falls off the list).
fn keep_up(handle: &Arc<PrometheusHandle>) {
    static LIVE: Mutex<Vec<Weak<PrometheusHandle>>> = Mutex::new(Vec::new());
    static THREAD: OnceLock<()> = OnceLock::new();
    LIVE.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(Arc::downgrade(handle));
    THREAD.get_or_init(|| {
        let spawned = std::thread::Builder::new()
            .name("metrics-upkeep".into())
            .spawn(|| loop {
                std::thread::sleep(UPKEEP_EVERY);
                let live: Vec<_> = {
                    let mut list = LIVE.lock().unwrap_or_else(|e| e.into_inner());
                    list.retain(|w| w.strong_count() > 0);
                    list.iter().filter_map(Weak::upgrade).collect()
                };
                for h in live {
                    h.run_upkeep();
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "no metrics upkeep thread; histograms fold at scrape only");
        }
    });
}
