//! One `WAIT` for many writers: group commit for the writes that are not claim batches (the
//! waiting room's joins, and status reads of a place no replica is known to have).
//!
//! `WAIT` holds the connection it is sent on until the replicas answer, and that connection is
//! the instance's one multiplexed link: every join waiting on its own queued every later
//! command of the instance behind its round trip, and doubled the join p50 under a crowd
//! (docs/BENCHMARKS.md, "Waiting room"). Here the writers queue, and one task runs
//! [`WaitReplicas::confirm`] for all who queued before it began: its fence write follows every
//! one of their writes, so one acknowledgement covers them all. A writer arriving while a round
//! is in flight waits for the next one (that round's fence may precede its write).
//!
//! Writers whose step began on another generation of the link than the round's are given a
//! round of their own, which fails as theirs would have on its own.
//!
//! A round that failed (a replica gone, or connected but not acknowledging) is not run again
//! for the wait's timeout: rounds queued meanwhile fail at once with its error. Else writers
//! arriving back to back would keep the link inside `WAIT` nearly all the time, and every
//! other command of the instance — claims, reads, the link's heartbeat — behind it.

use std::time::Instant;

use tokio::sync::{mpsc, oneshot};

use super::replicas::WaitReplicas;
use crate::redis_conn::link::Health;
use crate::redis_conn::RedisConn;

/// One writer's request: the link's health when its step began, and where to answer.
struct Request {
    before: Option<Health>,
    done: oneshot::Sender<Result<(), String>>,
}

/// A handle on the task that runs the shared rounds; the task ends with the last handle.
#[derive(Clone)]
pub struct SharedWait {
    tx: mpsc::UnboundedSender<Request>,
}

impl SharedWait {
    /// Starts the task (within a Tokio runtime).
    pub fn start(wait: WaitReplicas, conn: RedisConn) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(rounds(wait, conn, rx));
        Self { tx }
    }

    /// Ok once replicas have everything written on the connection's server before this call,
    /// and the link is still the one of `before` (as [`WaitReplicas::confirm`]).
    pub async fn confirm(&self, before: Option<Health>) -> anyhow::Result<()> {
        let (done, answer) = oneshot::channel();
        let gone = || anyhow::anyhow!("the replica wait task has stopped");
        self.tx.send(Request { before, done }).map_err(|_| gone())?;
        answer
            .await
            .map_err(|_| gone())?
            .map_err(anyhow::Error::msg)
    }
}

async fn rounds(wait: WaitReplicas, conn: RedisConn, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut failed: Option<(Instant, Option<Health>, String)> = None;
    while let Some(first) = rx.recv().await {
        let mut queued = vec![first];
        while let Ok(r) = rx.try_recv() {
            queued.push(r);
        }
        while let Some(before) = queued.first().map(|r| r.before) {
            let (round, rest): (Vec<_>, Vec<_>) =
                queued.into_iter().partition(|r| r.before == before);
            queued = rest;
            let result = match &failed {
                Some((at, on, e)) if *on == before && at.elapsed() < wait.timeout => Err(format!(
                    "{e} ({} ms ago; not asked again yet)",
                    at.elapsed().as_millis()
                )),
                _ => {
                    let result = wait
                        .confirm(&conn, before)
                        .await
                        .map_err(|e| format!("{e:#}"));
                    failed = result
                        .as_ref()
                        .err()
                        .map(|e| (Instant::now(), before, e.clone()));
                    result
                }
            };
            for r in round {
                let _ = r.done.send(result.clone());
            }
        }
    }
}
