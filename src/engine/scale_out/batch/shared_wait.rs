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
//! A round that failed after holding the link (a replica gone, or connected but not
//! acknowledging, so `WAIT` ran out its timeout) is not run again on that link for as long as
//! it held it: rounds queued meanwhile fail at once with its error. Else writers arriving back
//! to back would keep the link inside `WAIT` nearly all the time, and every other command of
//! the instance — claims, reads, the link's heartbeat — behind it. A quick failure (the link
//! changed, a sentinel did not answer) held nothing and holds nothing back; a success clears it.
//!
//! Each round runs as a task of its own, under a deadline: a panic or a hang in one fails that
//! round's writers (503), not every later one.

use std::time::{Duration, Instant};

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

/// Longer than any round takes: the `WAIT`'s timeout, twice (a second `WAIT` behind Sentinel)
/// and the sentinels' answers.
fn deadline(wait: &WaitReplicas) -> Duration {
    wait.timeout * 2 + Duration::from_secs(5)
}

/// The last round that failed after holding the link: when it ended, on which link, its
/// error, and how long it held the link.
struct Failed {
    at: Instant,
    on: Option<Health>,
    error: String,
    held: Duration,
}

async fn rounds(wait: WaitReplicas, conn: RedisConn, mut rx: mpsc::UnboundedReceiver<Request>) {
    let mut failed: Option<Failed> = None;
    while let Some(first) = rx.recv().await {
        let mut queued = vec![first];
        while let Ok(r) = rx.try_recv() {
            queued.push(r);
        }
        while let Some(before) = queued.first().map(|r| r.before) {
            let (writers, rest): (Vec<_>, Vec<_>) =
                queued.into_iter().partition(|r| r.before == before);
            queued = rest;
            let result = match &failed {
                Some(f) if f.on == before && f.at.elapsed() < f.held => Err(format!(
                    "{} ({} ms ago; not asked again yet)",
                    f.error,
                    f.at.elapsed().as_millis()
                )),
                _ => {
                    let started = Instant::now();
                    let result = round(wait, conn.clone(), before).await;
                    let held = started.elapsed();
                    match &result {
                        Ok(()) => failed = None,
                        Err(e) if held >= wait.timeout / 2 => {
                            failed = Some(Failed {
                                at: Instant::now(),
                                on: before,
                                error: e.clone(),
                                held,
                            })
                        }
                        Err(_) => {}
                    }
                    result
                }
            };
            for r in writers {
                let _ = r.done.send(result.clone());
            }
        }
    }
}

/// One round, as its own task under [`deadline`].
async fn round(wait: WaitReplicas, conn: RedisConn, before: Option<Health>) -> Result<(), String> {
    let task = tokio::spawn(async move { wait.confirm(&conn, before).await });
    match tokio::time::timeout(deadline(&wait), task).await {
        Ok(Ok(result)) => result.map_err(|e| format!("{e:#}")),
        Ok(Err(e)) => Err(format!("the replica wait failed: {e}")),
        Err(_) => Err(format!(
            "no answer from the replicas within {:?}",
            deadline(&wait)
        )),
    }
}
