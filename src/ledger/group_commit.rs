//! Group commit: one writer task turns many concurrent writes into few transactions.
//!
//! Every state change of the embedded deployment is submitted here. The writer takes the first
//! job, then everything that queued up while it waited (up to `max_batch`), applies them in one
//! ledger transaction and runs each job's completion callback with the result, in submission
//! order. So durability costs one fsync per batch instead of one per claim, and the callbacks
//! (not the HTTP handlers, which a client disconnect may drop) make the outcome take effect:
//! confirm the answer, or undo the reservation when nothing was written.
//!
//! Failures come in kinds ([`CommitFault`]), because the engine must react differently:
//! - *not committed* (disk full, ledger closed): the reservations are undone and the writer is
//!   [`WriterHealth::Unwritable`] until a batch (or, when idle, a probe every second) commits
//!   again — the service lives through a full disk and resumes by itself. The fault is logged
//!   once when it starts and once when it ends, not once per request.
//! - *unknown* (an I/O error at COMMIT, a panic while writing) or *diverged* (the ledger holds an
//!   order id the engine was about to hand out): the engine's memory can no longer be trusted.
//!   The writer bumps its **epoch** and turns [`WriterHealth::Recovering`]; every job decided on
//!   state of an older epoch is refused unwritten (*stale*), and nothing is acknowledged until
//!   the engine has re-read its state from the ledger and called [`GroupCommit::recovered`].
//!   This is how PostgreSQL treats a failed fsync: never retry blindly, re-read from disk.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Ledger, LedgerWrite, WriteFault};

/// How a batch failed, as far as the engine must care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFault {
    /// Nothing was written: undo the reservation.
    NotCommitted,
    /// Nothing was written, but the ledger contradicts memory; the engine is being re-read.
    Diverged,
    /// It may have been written; the engine is being re-read.
    Unknown,
    /// Decided on state that has since been re-read from the ledger; never written.
    Stale,
}

/// Why a submitted write did not become durable. Cheap to clone: one result serves a batch.
#[derive(Debug, Clone, thiserror::Error)]
#[error("ledger commit failed: {reason}")]
pub struct CommitError {
    pub fault: CommitFault,
    pub reason: Arc<str>,
}

impl CommitError {
    fn new(fault: CommitFault, reason: impl Into<Arc<str>>) -> Self {
        Self {
            fault,
            reason: reason.into(),
        }
    }

    /// True when the write was certainly not applied.
    pub fn nothing_written(&self) -> bool {
        self.fault != CommitFault::Unknown
    }
}

/// Whether the writer can make writes durable right now.
#[derive(Debug, Clone, PartialEq)]
pub enum WriterHealth {
    Writable,
    /// Batches fail without writing anything (typically a full disk).
    Unwritable {
        since: Instant,
        reason: String,
    },
    /// A commit's outcome was unknown; nothing is acknowledged until the engine re-read.
    Recovering {
        reason: String,
    },
}

type Callback = Box<dyn FnOnce(Result<(), CommitError>) + Send>;

struct Job {
    epoch: u64,
    writes: Vec<LedgerWrite>,
    done: Callback,
}

/// Counters of the writer, for logs and metrics.
#[derive(Debug, Default)]
pub struct CommitStats {
    pub batches: AtomicU64,
    pub writes: AtomicU64,
    pub failures: AtomicU64,
}

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct GroupCommit {
    tx: mpsc::UnboundedSender<Job>,
    stats: Arc<CommitStats>,
    epoch: Arc<AtomicU64>,
    health: watch::Receiver<WriterHealth>,
    recovered: Arc<watch::Sender<WriterHealth>>,
}

impl GroupCommit {
    /// Starts the writer task on the current runtime. If the task itself ever dies (a bug
    /// outside the guarded ledger call), the process exits non-zero so that its supervisor
    /// restarts it and recovery runs: claims must never wait on a writer that is gone.
    pub fn spawn(ledger: Arc<dyn Ledger>, max_batch: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(CommitStats::default());
        let epoch = Arc::new(AtomicU64::new(0));
        let (health_tx, health) = watch::channel(WriterHealth::Writable);
        let health_tx = Arc::new(health_tx);
        let writer = Writer {
            ledger,
            max_batch: max_batch.max(1),
            stats: stats.clone(),
            epoch: epoch.clone(),
            health: health_tx.clone(),
        };
        let task = tokio::spawn(writer.run(rx));
        tokio::spawn(async move {
            if let Err(e) = task.await {
                if e.is_panic() {
                    tracing::error!(error = %e, "the ledger writer died; exiting so recovery runs on restart");
                    crate::telemetry::flush_logs();
                    std::process::exit(70);
                }
            }
        });
        Self {
            tx,
            stats,
            epoch,
            health,
            recovered: health_tx,
        }
    }

    /// The current epoch: state decided now must be submitted with it.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Queues `writes`, decided on state of `epoch`; `done` runs on the writer task once they
    /// are committed or failed.
    ///
    /// Never calls `done` inline, so it is safe to submit while holding a lock that `done`
    /// takes. Returns `Err` (and drops `done` uncalled) if the writer is gone.
    pub fn submit(
        &self,
        epoch: u64,
        writes: Vec<LedgerWrite>,
        done: impl FnOnce(Result<(), CommitError>) + Send + 'static,
    ) -> Result<(), CommitError> {
        self.tx
            .send(Job {
                epoch,
                writes,
                done: Box::new(done),
            })
            .map_err(|_| {
                CommitError::new(CommitFault::NotCommitted, "the ledger writer has stopped")
            })
    }

    /// Submits `writes` and waits until they are durable.
    pub async fn run(&self, epoch: u64, writes: Vec<LedgerWrite>) -> Result<(), CommitError> {
        let (tx, rx) = oneshot::channel();
        self.submit(epoch, writes, move |res| {
            let _ = tx.send(res);
        })?;
        rx.await.map_err(|_| {
            CommitError::new(CommitFault::NotCommitted, "the ledger writer has stopped")
        })?
    }

    /// Waits until everything submitted before this call has been committed.
    pub async fn flush(&self) -> Result<(), CommitError> {
        self.run(self.epoch(), Vec::new()).await
    }

    pub fn health(&self) -> WriterHealth {
        self.health.borrow().clone()
    }

    /// A receiver of the writer's health that does not keep the writer alive: the engine's
    /// recovery task waits on it for [`WriterHealth::Recovering`].
    pub fn watch_health(&self) -> watch::Receiver<WriterHealth> {
        self.health.clone()
    }

    /// The engine's state was re-read at the current epoch: acknowledge again.
    /// `epoch` is the one the state was re-read at: if the writer failed again since (a batch
    /// of the re-read state failed before this call), it stays recovering and the engine
    /// re-reads once more, instead of acknowledging with cells whose jobs are all stale.
    pub fn recovered(&self, epoch: u64) {
        let current = &self.epoch;
        self.recovered.send_if_modified(|h| {
            if current.load(Ordering::Acquire) != epoch {
                return false;
            }
            *h = WriterHealth::Writable;
            true
        });
    }

    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }
}

struct Writer {
    ledger: Arc<dyn Ledger>,
    max_batch: usize,
    stats: Arc<CommitStats>,
    epoch: Arc<AtomicU64>,
    health: Arc<watch::Sender<WriterHealth>>,
}

/// How often an idle, unwritable writer tries a write of its own.
const PROBE_EVERY: Duration = Duration::from_secs(1);

impl Writer {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<Job>) {
        let mut batch: Vec<Job> = Vec::with_capacity(self.max_batch);
        loop {
            let unwritable = matches!(*self.health.borrow(), WriterHealth::Unwritable { .. });
            let got = if unwritable {
                match tokio::time::timeout(PROBE_EVERY, rx.recv_many(&mut batch, self.max_batch))
                    .await
                {
                    Ok(n) => n,
                    Err(_) => {
                        let probe = AssertUnwindSafe(self.ledger.probe()).catch_unwind().await;
                        if matches!(probe, Ok(Ok(()))) {
                            self.note(&Ok(()));
                        }
                        continue;
                    }
                }
            } else {
                rx.recv_many(&mut batch, self.max_batch).await
            };
            if got == 0 {
                break;
            }
            self.write(&mut batch).await;
        }
        tracing::debug!("ledger writer stopped");
    }

    /// Writes the jobs of the current epoch in one transaction and settles every job.
    ///
    /// A job of the current epoch is written even while the writer still reports recovering:
    /// it was decided on the state re-read at this epoch (the engine swaps its campaigns in
    /// before it calls [`GroupCommit::recovered`]). Refused as stale, nothing would undo it: its
    /// unit stayed taken, its Idempotency-Key answered 503 for good, an expiry was lost.
    async fn write(&self, batch: &mut Vec<Job>) {
        let epoch = self.epoch.load(Ordering::Acquire);
        let (current, stale): (Vec<Job>, Vec<Job>) =
            batch.drain(..).partition(|j| j.epoch == epoch);
        for job in stale {
            let err = CommitError::new(
                CommitFault::Stale,
                "the engine is re-reading its state from the ledger",
            );
            self.settle(job, Err(err));
        }
        let writes: Vec<&LedgerWrite> = current.iter().flat_map(|j| j.writes.iter()).collect();
        let result = if writes.is_empty() {
            Ok(())
        } else {
            let m = crate::telemetry::process::handles();
            m.commit_batch.record(writes.len() as f64);
            let started = std::time::Instant::now();
            let applied = AssertUnwindSafe(self.ledger.apply(&writes))
                .catch_unwind()
                .await;
            m.commit_duration.record(started.elapsed().as_secs_f64());
            if !matches!(applied, Ok(Ok(()))) {
                m.commit_failures.increment(1);
            }
            let result = match applied {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(classify(&e)),
                Err(panic) => Err(CommitError::new(
                    CommitFault::Unknown,
                    format!("the ledger writer panicked: {}", panic_message(&panic)),
                )),
            };
            self.stats.batches.fetch_add(1, Ordering::Relaxed);
            self.stats
                .writes
                .fetch_add(writes.len() as u64, Ordering::Relaxed);
            self.note(&result);
            result
        };
        drop(writes);
        for job in current {
            self.settle(job, result.clone());
        }
    }

    /// Runs a job's callback; a panic there leaves the engine's state unknown, so it is
    /// treated like an unknown commit.
    fn settle(&self, job: Job, result: Result<(), CommitError>) {
        let done = job.done;
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(move || done(result))) {
            self.note(&Err(CommitError::new(
                CommitFault::Unknown,
                format!("a commit callback panicked: {}", panic_message(&panic)),
            )));
        }
    }

    /// Moves the writer's health along after a batch; logs transitions only.
    fn note(&self, result: &Result<(), CommitError>) {
        match result {
            Ok(()) => {
                self.health.send_if_modified(|h| match h {
                    WriterHealth::Unwritable { since, .. } => {
                        tracing::info!(
                            after_ms = since.elapsed().as_millis() as u64,
                            "the ledger accepts writes again"
                        );
                        *h = WriterHealth::Writable;
                        true
                    }
                    _ => false,
                });
            }
            Err(e) => {
                self.stats.failures.fetch_add(1, Ordering::Relaxed);
                match e.fault {
                    CommitFault::NotCommitted => {
                        self.health.send_if_modified(|h| match h {
                            WriterHealth::Writable => {
                                tracing::error!(reason = %e.reason, "the ledger cannot write; claims and admin changes answer 503 until it can (nothing is acknowledged meanwhile)");
                                *h = WriterHealth::Unwritable {
                                    since: Instant::now(),
                                    reason: e.reason.to_string(),
                                };
                                true
                            }
                            _ => false,
                        });
                    }
                    CommitFault::Unknown | CommitFault::Diverged => {
                        let epoch = self.epoch.fetch_add(1, Ordering::AcqRel) + 1;
                        tracing::error!(reason = %e.reason, fault = ?e.fault, epoch, "ledger commit failed with an unknown outcome or a contradiction; acknowledging nothing until the engine is re-read from the ledger");
                        self.health.send_replace(WriterHealth::Recovering {
                            reason: e.reason.to_string(),
                        });
                    }
                    CommitFault::Stale => {}
                }
            }
        }
    }
}

/// The kind of a failed batch, as the ledger told it.
fn classify(e: &WriteFault) -> CommitError {
    let fault = match e {
        WriteFault::NotCommitted(_) => CommitFault::NotCommitted,
        WriteFault::Diverged(_) => CommitFault::Diverged,
        WriteFault::Unknown(_) => CommitFault::Unknown,
    };
    CommitError::new(fault, e.to_string())
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic".into())
}

#[cfg(test)]
mod tests;
