//! Supervised background tasks: the work a deployment depends on (the order pipeline, the
//! stock subscriber and refresher, the limits re-reader) must never die silently.
//!
//! [`Supervisor::spawn`] runs a task from a factory and watches it: a task returns `Ok(())`
//! only when its work is over (its owner is gone, or shutdown); when it returns an error or
//! panics it is logged and started again after a backoff (0.5 s doubling to 8 s, reset once a
//! run lasted a minute). While a task is not running, [`Supervisor::health`] names it (so
//! `/healthz` answers 503) and [`Supervisor::down_for`] tells the claim path how long it has
//! been gone, so claims that depend on it are refused honestly instead of, say, answering
//! `won` with no pipeline moving orders. A task that dies [`CRASH_LIMIT`] times within
//! [`CRASH_WINDOW`] is in a crash loop that restarting in-process will not cure: the process
//! exits with status 70 so its own supervisor (systemd, Kubernetes) restarts it and recovery
//! runs from the stores.
//!
//! **Test hook**: `SECKILL_TEST_PANIC=<task>:<n>` (read once at start, never documented as a
//! flag) makes the first `n` calls of [`test_panic`] for `<task>` return true; the task panics
//! there. It exists only so the tests can kill a real task at a real place.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;

const BACKOFF_MIN: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(8);
/// A run this long resets the backoff and the crash count.
const HEALTHY_RUN: Duration = Duration::from_secs(60);
/// Deaths within [`CRASH_WINDOW`] after which the process exits.
pub const CRASH_LIMIT: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// The exit status of a process that gave up on a crash-looping task (EX_SOFTWARE).
pub const CRASH_EXIT: i32 = 70;

pub struct Supervisor {
    /// Task name → when it stopped running (None: running).
    down: Mutex<HashMap<&'static str, Option<Instant>>>,
    stop: watch::Sender<bool>,
    handles: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("tasks", &self.down.lock().len())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            down: Mutex::default(),
            stop: watch::channel(false).0,
            handles: Mutex::default(),
        })
    }

    fn stopping(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// Runs `make()` as the task `name`, restarting it whenever it fails or panics, until it
    /// returns `Ok(())` or [`Supervisor::shutdown`], which aborts it.
    pub fn spawn<F, Fut>(self: &Arc<Self>, name: &'static str, make: F)
    where
        F: Fn(watch::Receiver<bool>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.spawn_inner(name, false, make)
    }

    /// Like [`Supervisor::spawn`], but on shutdown the task is not aborted: the receiver it
    /// gets turns true and the shutdown waits for it to finish its work and return.
    pub fn spawn_graceful<F, Fut>(self: &Arc<Self>, name: &'static str, make: F)
    where
        F: Fn(watch::Receiver<bool>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.spawn_inner(name, true, make)
    }

    fn spawn_inner<F, Fut>(self: &Arc<Self>, name: &'static str, graceful: bool, make: F)
    where
        F: Fn(watch::Receiver<bool>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<()>> + Send + 'static,
    {
        self.down.lock().insert(name, None);
        let me = Arc::downgrade(self);
        let mut stopping = self.stopping();
        let handle = tokio::spawn(async move {
            let mut backoff = BACKOFF_MIN;
            let mut deaths: Vec<Instant> = Vec::new();
            loop {
                let started = Instant::now();
                let mut run = tokio::spawn(make(stopping.clone()));
                let outcome = tokio::select! {
                    outcome = &mut run => outcome,
                    _ = async { stopping.wait_for(|s| *s).await.map(|_| ()) } => {
                        if graceful {
                            let _ = run.await;
                        } else {
                            run.abort();
                        }
                        return;
                    }
                };
                if *stopping.borrow() {
                    return;
                }
                let Some(sup) = me.upgrade() else { return };
                if let Ok(Ok(())) = outcome {
                    sup.down.lock().remove(name);
                    return; // its work is over
                }
                sup.down.lock().insert(name, Some(Instant::now()));
                let why = match outcome {
                    Ok(Ok(())) => unreachable!("handled above"),
                    Ok(Err(e)) => format!("failed: {e:#}"),
                    Err(e) if e.is_panic() => {
                        let p = e.into_panic();
                        let msg = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        format!("panicked: {msg}")
                    }
                    Err(e) => format!("was cancelled: {e}"),
                };
                if started.elapsed() >= HEALTHY_RUN {
                    backoff = BACKOFF_MIN;
                    deaths.clear();
                }
                deaths.retain(|t| t.elapsed() < CRASH_WINDOW);
                deaths.push(Instant::now());
                if deaths.len() >= CRASH_LIMIT {
                    tracing::error!(task = name, deaths = deaths.len(), "background task {why}; it keeps dying, exiting so the process supervisor restarts seckill");
                    crate::telemetry::flush_logs();
                    std::process::exit(CRASH_EXIT);
                }
                tracing::error!(
                    task = name,
                    restart_in_ms = backoff.as_millis() as u64,
                    "background task {why}; restarting it"
                );
                drop(sup);
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = stopping.changed() => return,
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
                let Some(sup) = me.upgrade() else { return };
                sup.down.lock().insert(name, None);
                tracing::info!(task = name, "background task restarted");
            }
        });
        self.handles.lock().push(handle);
    }

    /// How long `name` has not been running (`None`: running, or not supervised here).
    pub fn down_for(&self, name: &str) -> Option<Duration> {
        self.down
            .lock()
            .get(name)
            .copied()
            .flatten()
            .map(|t| t.elapsed())
    }

    /// Ok while every task runs; otherwise which are down and for how long.
    pub fn health(&self) -> Result<(), String> {
        let down = self.down.lock();
        let mut dead: Vec<String> = down
            .iter()
            .filter_map(|(name, since)| {
                since.map(|t| format!("{name} down for {} ms", t.elapsed().as_millis()))
            })
            .collect();
        if dead.is_empty() {
            return Ok(());
        }
        dead.sort();
        Err(dead.join(", "))
    }

    /// Tells every task to stop and waits for them.
    pub async fn shutdown(&self) {
        self.stop.send_replace(true);
        let handles: Vec<_> = std::mem::take(&mut *self.handles.lock());
        for h in handles {
            let _ = h.await;
        }
    }
}

/// The test hook (see the module docs): true for the first `n` calls for `task`.
pub fn test_panic(task: &str) -> bool {
    static HOOK: OnceLock<Option<(String, AtomicU64)>> = OnceLock::new();
    let hook = HOOK.get_or_init(|| {
        let v = std::env::var("SECKILL_TEST_PANIC").ok()?;
        let (name, n) = v.split_once(':')?;
        Some((name.to_owned(), AtomicU64::new(n.parse().ok()?)))
    });
    match hook {
        Some((name, left)) if name == task => left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok(),
        _ => false,
    }
}
