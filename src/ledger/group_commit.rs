//! Group commit: one writer task turns many concurrent writes into few transactions.
//!
//! Every state change of the embedded deployment is submitted here. The writer takes the first
//! job, then everything that queued up while it waited (up to `max_batch`), applies them in one
//! ledger transaction and runs each job's completion callback with the result, in submission
//! order. So durability costs one fsync per batch instead of one per claim, and the callbacks
//! (not the HTTP handlers, which a client disconnect may drop) make the outcome take effect:
//! confirm the answer, or undo the reservation when the commit failed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Ledger, LedgerWrite};

/// Why a submitted write did not become durable. Cheap to clone: one result serves a batch.
#[derive(Debug, Clone, thiserror::Error)]
#[error("ledger commit failed: {0}")]
pub struct CommitError(pub Arc<str>);

type Callback = Box<dyn FnOnce(Result<(), CommitError>) + Send>;

struct Job {
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
}

impl GroupCommit {
    /// Starts the writer task on the current runtime.
    pub fn spawn(ledger: Arc<dyn Ledger>, max_batch: usize) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let stats = Arc::new(CommitStats::default());
        tokio::spawn(run(ledger, rx, max_batch.max(1), stats.clone()));
        Self { tx, stats }
    }

    /// Queues `writes`; `done` runs on the writer task once they are committed or failed.
    ///
    /// Never calls `done` inline, so it is safe to submit while holding a lock that `done`
    /// takes. Returns `Err` (and drops `done` uncalled) if the writer is gone.
    pub fn submit(
        &self,
        writes: Vec<LedgerWrite>,
        done: impl FnOnce(Result<(), CommitError>) + Send + 'static,
    ) -> Result<(), CommitError> {
        self.tx
            .send(Job {
                writes,
                done: Box::new(done),
            })
            .map_err(|_| CommitError("the ledger writer has stopped".into()))
    }

    /// Submits `writes` and waits until they are durable.
    pub async fn run(&self, writes: Vec<LedgerWrite>) -> Result<(), CommitError> {
        let (tx, rx) = oneshot::channel();
        self.submit(writes, move |res| {
            let _ = tx.send(res);
        })?;
        rx.await
            .map_err(|_| CommitError("the ledger writer has stopped".into()))?
    }

    /// Waits until everything submitted before this call has been committed.
    pub async fn flush(&self) -> Result<(), CommitError> {
        self.run(Vec::new()).await
    }

    pub fn stats(&self) -> &CommitStats {
        &self.stats
    }
}

async fn run(
    ledger: Arc<dyn Ledger>,
    mut rx: mpsc::UnboundedReceiver<Job>,
    max_batch: usize,
    stats: Arc<CommitStats>,
) {
    let mut batch: Vec<Job> = Vec::with_capacity(max_batch);
    while rx.recv_many(&mut batch, max_batch).await > 0 {
        let writes: Vec<&LedgerWrite> = batch.iter().flat_map(|j| j.writes.iter()).collect();
        let result = if writes.is_empty() {
            Ok(())
        } else {
            ledger.apply(&writes).await.map_err(|e| {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %format!("{e:#}"), writes = writes.len(), "ledger commit failed; undoing the batch");
                CommitError(format!("{e:#}").into())
            })
        };
        stats.batches.fetch_add(1, Ordering::Relaxed);
        stats
            .writes
            .fetch_add(writes.len() as u64, Ordering::Relaxed);
        tracing::trace!(writes = writes.len(), jobs = batch.len(), "batch committed");
        drop(writes);
        for job in batch.drain(..) {
            (job.done)(result.clone());
        }
    }
    tracing::debug!("ledger writer stopped");
}
