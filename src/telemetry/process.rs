//! Process-wide metrics: the process itself, the group-commit writer, Redis script calls and
//! the order pipeline.
//!
//! These belong to the process, not to one HTTP instance (a `seckill worker` runs a pipeline
//! and no server), so they go through the `metrics` facade's global recorder, installed once
//! on first use. Their handles are registered once and kept ([`handles`]), so recording costs
//! an atomic add, never a label lookup. One process normally runs one instance; when tests run
//! several in one process, these series are their sum.

use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Instant;

use metrics::{Counter, Gauge, Histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use super::catalog::{self, Kind};

/// The global recorder's handle (renders its exposition).
fn global() -> &'static Arc<PrometheusHandle> {
    static HANDLE: OnceLock<Arc<PrometheusHandle>> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let recorder = super::builder().build_recorder();
        let handle = Arc::new(recorder.handle());
        if metrics::set_global_recorder(recorder).is_err() {
            // Someone else installed one (an embedding application): record there and
            // render an empty process section rather than fail.
            tracing::warn!(
                "a global metrics recorder was already installed; process metrics go to it"
            );
            return Arc::new(PrometheusBuilder::new().build_recorder().handle());
        }
        super::keep_up(&handle);
        for fam in catalog::FAMILIES {
            let (name, help) = (fam.name, fam.help);
            match fam.kind {
                Kind::Counter => metrics::describe_counter!(name, help),
                Kind::Gauge => metrics::describe_gauge!(name, help),
                Kind::Histogram => metrics::describe_histogram!(name, help),
            }
        }
        collector().describe();
        handle
    })
}

fn collector() -> &'static metrics_process::Collector {
    static C: LazyLock<metrics_process::Collector> = LazyLock::new(Default::default);
    &C
}

/// The handles of the process-wide series.
pub struct Handles {
    pub commit_batch: Histogram,
    pub commit_duration: Histogram,
    pub commit_failures: Counter,
    pub pipeline_batch: Histogram,
    pub pipeline_insert: Histogram,
    pub pipeline_lag: Gauge,
    scripts: [(&'static str, Histogram); SCRIPTS.len()],
}

/// The Lua scripts whose calls are timed (label `script`).
pub const SCRIPTS: [&str; 6] = ["claim", "claims", "restock", "status", "release", "ack"];

impl Handles {
    /// The latency histogram of one script (`other` for a name not in [`SCRIPTS`]).
    pub fn script(&self, name: &str) -> &Histogram {
        self.scripts
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(&self.scripts[0].1, |(_, h)| h)
    }
}

/// The process-wide handles, registered on first use (which installs the global recorder).
pub fn handles() -> &'static Handles {
    static H: LazyLock<Handles> = LazyLock::new(|| {
        global();
        Handles {
            commit_batch: metrics::histogram!(catalog::COMMIT_BATCH),
            commit_duration: metrics::histogram!(catalog::COMMIT_DURATION),
            commit_failures: metrics::counter!(catalog::COMMIT_FAILURES),
            pipeline_batch: metrics::histogram!(catalog::PIPELINE_BATCH),
            pipeline_insert: metrics::histogram!(catalog::PIPELINE_INSERT_DURATION),
            pipeline_lag: metrics::gauge!(catalog::PIPELINE_LAG),
            scripts: SCRIPTS.map(|s| {
                (
                    s,
                    metrics::histogram!(catalog::REDIS_SCRIPT_DURATION, "script" => s),
                )
            }),
        }
    });
    &H
}

/// Times one call: `let _t = Timer::start(h);` records the elapsed seconds when dropped
/// (so a call that fails or is cancelled is timed too).
pub struct Timer<'a> {
    hist: &'a Histogram,
    start: Instant,
}

impl<'a> Timer<'a> {
    pub fn start(hist: &'a Histogram) -> Self {
        Self {
            hist,
            start: Instant::now(),
        }
    }
}

impl Drop for Timer<'_> {
    fn drop(&mut self) {
        self.hist.record(self.start.elapsed().as_secs_f64());
    }
}

/// The process section of `/metrics`: process metrics collected now, plus every process-wide
/// series. Collection is serialised (two scrapes at once would race on the gauges).
pub fn render() -> String {
    static LOCK: Mutex<()> = Mutex::new(());
    let handle = global();
    handles();
    let _one = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    collector().collect();
    metrics::gauge!(catalog::CLOCK_STEP).set(crate::clock::system_step().as_seconds_f64());
    handle.run_upkeep();
    handle.render()
}
