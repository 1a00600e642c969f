//! Claims batched into Redis: many concurrent claims on one campaign reach Redis as one call
//! of `lua/claims.lua`, which decides them in arrival order exactly as `lua/claim.lua` decides
//! one (same outcomes, limits, codes, idempotency records, and the same atomic append of each
//! won order to the campaign's stream).
//!
//! Why: in a sale, one hot campaign lives on one Redis server (one Cluster slot), so Redis's
//! CPU per claim is the ceiling of the biggest sale any number of instances can serve. Most of
//! what Redis spends on a one-claim call is the call itself — reading the request, finding the
//! script, entering Lua, writing the reply — and the campaign's shared fields read and written
//! again for every claim. A batch pays those once (the idea of a hot-row "inventory hint" and
//! of group commit, applied to the gate).
//!
//! How (group commit): each instance keeps one queue per campaign. A claim joins its campaign's
//! queue; the campaign's batcher takes the first waiting claim and, while a call of this
//! campaign is still in flight, waits for it to return — at most [`BatchOptions::wait`]
//! (1 ms by default) — so the claims arriving meanwhile join the batch; then it sends every
//! claim waiting, up to [`BatchOptions::max`], as one call. A lone claim on an idle campaign
//! is sent at once: batching adds no latency when there is nothing to batch, and at most
//! `wait` when there is.
//!
//! Failure: a batch is one script call, so it ran entirely or not at all. When its result is
//! lost, every claim of the batch gets the same answer one claim would get (`refuse.rs`):
//! "nothing was changed" only if the call surely did not run, otherwise the outcome-unknown 503.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub mod replicas;
pub mod shared_wait;

use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, Semaphore};

use super::keys::Keys;
use super::refuse;
use super::scripts::{Claimed, Scripts};
use crate::domain::Error;
use crate::engine::IdemLimits;
use crate::redis_conn::RedisConn;
use replicas::WaitReplicas;

/// How claims are gathered into batches.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Most claims in one call (1: every claim is its own call).
    pub max: usize,
    /// Longest the first claim of a batch waits for the campaign's previous call to return.
    pub wait: Duration,
    /// Answer a batch only once this many replicas have it (`--redis-wait-replicas`).
    pub replicas: Option<WaitReplicas>,
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self {
            max: 128,
            wait: Duration::from_millis(1),
            replicas: None,
        }
    }
}

/// Calls of one campaign in flight at once before a batch waits (up to `wait`) for one to
/// return. One lets the most claims gather; two keeps Redis busy while an answer travels back.
const CALLS_IN_FLIGHT: usize = 2;

/// A batcher with no claim for this long stops (a new claim starts another).
const IDLE_STOP: Duration = Duration::from_secs(10);

/// One claim waiting for its batch.
struct Pending {
    user: String,
    qty: u64,
    key: Option<String>,
    reply: oneshot::Sender<Result<Claimed, Error>>,
}

/// One claim as the batch script takes it.
pub struct BatchClaim<'a> {
    pub user: &'a str,
    pub qty: u64,
    pub key: Option<&'a str>,
}

pub struct Batcher {
    conn: RedisConn,
    scripts: Arc<Scripts>,
    opts: BatchOptions,
    /// Retention of won answers in seconds, and what is kept of the other answers.
    idem: (u64, IdemLimits),
    /// Longest one batch call may take before its claims answer 503.
    timeout: Duration,
    queues: Mutex<HashMap<String, mpsc::UnboundedSender<Pending>>>,
}

impl Batcher {
    /// How many replicas must have a batch before it is answered (`--redis-wait-replicas`).
    pub fn replicas(&self) -> Option<WaitReplicas> {
        self.opts.replicas
    }

    pub fn new(
        conn: RedisConn,
        scripts: Arc<Scripts>,
        opts: BatchOptions,
        idem: (u64, IdemLimits),
        timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Self {
            conn,
            scripts,
            opts: BatchOptions {
                max: opts.max.max(1),
                ..opts
            },
            idem,
            timeout,
            queues: Mutex::default(),
        })
    }

    /// Decides one claim as part of the next batch of its campaign.
    pub async fn claim(
        self: &Arc<Self>,
        campaign: &str,
        user: &str,
        qty: u64,
        key: Option<&str>,
    ) -> Result<Claimed, Error> {
        let (reply, answer) = oneshot::channel();
        let mut pending = Pending {
            user: user.to_owned(),
            qty,
            key: key.map(str::to_owned),
            reply,
        };
        loop {
            let queue = self.queue(campaign);
            match queue.send(pending) {
                Ok(()) => break,
                // Its batcher stopped for idleness just now: start another.
                Err(mpsc::error::SendError(back)) => {
                    pending = back;
                    let mut queues = self.queues.lock();
                    if queues.get(campaign).is_some_and(|q| q.same_channel(&queue)) {
                        queues.remove(campaign);
                    }
                }
            }
        }
        answer.await.unwrap_or_else(|_| {
            Err(Error::OutcomeUnknown(
                "the claim's batch was abandoned; it may or may not have been processed: \
                 retry with the same Idempotency-Key to learn its outcome"
                    .into(),
            ))
        })
    }

    fn queue(self: &Arc<Self>, campaign: &str) -> mpsc::UnboundedSender<Pending> {
        let mut queues = self.queues.lock();
        if let Some(q) = queues.get(campaign) {
            return q.clone();
        }
        let (tx, rx) = mpsc::unbounded_channel();
        queues.insert(campaign.to_owned(), tx.clone());
        tokio::spawn(self.clone().run(campaign.to_owned(), tx.downgrade(), rx));
        tx
    }

    /// The batcher of one campaign: gathers claims while its previous calls are in flight.
    async fn run(
        self: Arc<Self>,
        campaign: String,
        me: mpsc::WeakUnboundedSender<Pending>,
        mut rx: mpsc::UnboundedReceiver<Pending>,
    ) {
        let slots = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
        loop {
            let first = match tokio::time::timeout(IDLE_STOP, rx.recv()).await {
                Ok(Some(p)) => p,
                Ok(None) => return,
                Err(_) => {
                    self.retire(&campaign, me, rx).await;
                    return;
                }
            };
            // Group commit: the claims that arrive while the previous calls run join this
            // batch; never longer than `wait`.
            let slot = tokio::time::timeout(self.opts.wait, slots.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok);
            let mut batch = vec![first];
            while batch.len() < self.opts.max {
                match rx.try_recv() {
                    Ok(p) => batch.push(p),
                    Err(_) => break,
                }
            }
            let (me, campaign) = (self.clone(), campaign.clone());
            tokio::spawn(async move {
                me.send(&campaign, batch).await;
                drop(slot);
            });
        }
    }

    /// Stops an idle batcher: no new claim can join it, and the ones that did are sent.
    async fn retire(
        &self,
        campaign: &str,
        me: mpsc::WeakUnboundedSender<Pending>,
        mut rx: mpsc::UnboundedReceiver<Pending>,
    ) {
        {
            let mut queues = self.queues.lock();
            let mine = |q: &mpsc::UnboundedSender<Pending>| {
                me.upgrade().is_some_and(|me| me.same_channel(q))
            };
            if queues.get(campaign).is_some_and(mine) {
                queues.remove(campaign);
            }
        }
        rx.close();
        let mut rest = Vec::new();
        while let Ok(p) = rx.try_recv() {
            rest.push(p);
        }
        for batch in chunks(rest, self.opts.max) {
            self.send(campaign, batch).await;
        }
    }

    /// One call of the batch script; every claim of the batch gets its answer or the error.
    async fn send(&self, campaign: &str, batch: Vec<Pending>) {
        let claims: Vec<BatchClaim> = batch
            .iter()
            .map(|p| BatchClaim {
                user: &p.user,
                qty: p.qty,
                key: p.key.as_deref(),
            })
            .collect();
        let mut conn = self.conn.clone();
        let before = WaitReplicas::before(&conn);
        let required = match self.opts.replicas {
            Some(w) => w.required(&conn).await,
            None if conn.is_cluster() => "cluster".to_owned(),
            None => "0".to_owned(),
        };
        let call = self.scripts.claim_batch(
            &mut conn,
            campaign,
            &claims,
            (self.idem.0, &self.idem.1),
            &required,
        );
        let result = tokio::time::timeout(self.timeout, call)
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer from Redis in time")));
        drop(claims);
        // A batch that decided nothing (too few replicas, a fenced or missing campaign) wrote
        // nothing and has nothing to wait for.
        let decided = |answers: &[Claimed]| answers.iter().any(|a| matches!(a, Claimed::Answer(_)));
        let result = match (result, self.opts.replicas) {
            (Ok(answers), Some(w)) if decided(&answers) => {
                w.confirm(&self.conn, before).await.map(|()| answers)
            }
            (result, _) => result,
        };
        match result {
            Ok(answers) if answers.len() == batch.len() => {
                for (p, a) in batch.into_iter().zip(answers) {
                    let _ = p.reply.send(Ok(a));
                }
            }
            Ok(answers) => {
                let e = anyhow::anyhow!(
                    "the batch claim script answered {} claims of {}",
                    answers.len(),
                    batch.len()
                );
                self.fail(campaign, batch, e);
            }
            Err(e) => self.fail(campaign, batch, e),
        }
    }

    fn fail(&self, campaign: &str, batch: Vec<Pending>, e: anyhow::Error) {
        let err = refuse::claim_failed(campaign, self.conn.is_cluster())(e);
        for p in batch {
            let _ = p.reply.send(Err(err.clone()));
        }
    }
}

fn chunks(mut v: Vec<Pending>, max: usize) -> Vec<Vec<Pending>> {
    let mut out = Vec::new();
    while v.len() > max {
        let rest = v.split_off(max);
        out.push(std::mem::replace(&mut v, rest));
    }
    if !v.is_empty() {
        out.push(v);
    }
    out
}

impl Scripts {
    /// Decides `claims` of one campaign in one call of `lua/claims.lua`, in order.
    pub async fn claim_batch(
        &self,
        conn: &mut RedisConn,
        campaign: &str,
        claims: &[BatchClaim<'_>],
        (idem_ttl_secs, rejected): (u64, &IdemLimits),
        // Replicas that must be in sync for the batch to run ("0": no check; claims.lua ARGV[5]).
        replicas: &str,
    ) -> anyhow::Result<Vec<Claimed>> {
        let k = Keys::new(campaign);
        let mut inv = self.claims.prepare_invoke();
        inv.key(k.meta())
            .key(k.users())
            .key(k.codes())
            .key(k.seq())
            .key(k.orders())
            .key(k.held())
            .key(k.deadlines())
            .key(k.idem_rejected())
            .key(k.packed());
        inv.arg(idem_ttl_secs)
            .arg(rejected.rejected_ttl.num_seconds().max(1))
            .arg(rejected.per_user)
            .arg(rejected.per_campaign)
            .arg(replicas);
        let mut keys = 9;
        for c in claims {
            inv.arg(c.user).arg(c.qty);
            match c.key {
                Some(key) => {
                    keys += 1;
                    inv.key(k.idem(c.user, key)).arg(keys);
                }
                None => {
                    inv.arg(0);
                }
            }
        }
        let _t = super::scripts::timer("claims");
        let answers: Vec<String> = inv.invoke_async(conn).await?;
        anyhow::ensure!(
            answers.len() == claims.len(),
            "the batch claim script answered {} items for {} claims",
            answers.len(),
            claims.len()
        );
        answers
            .iter()
            .map(|encoded| match encoded.as_str() {
                "missing" => Ok(Claimed::Missing),
                "fenced" => Ok(Claimed::Fenced),
                "replicas" => Ok(Claimed::NoReplicas),
                "unchecked" => Ok(Claimed::Unchecked),
                _ => super::scripts::decode_answer(encoded)
                    .map(Claimed::Answer)
                    .ok_or_else(|| anyhow::anyhow!("the batch claim script answered {encoded:?}")),
            })
            .collect()
    }
}
