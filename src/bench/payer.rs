//! The payments of the `holds` preset, and what the verifier checks of them.
//!
//! While the storm runs, [`Payer`] reads the campaign's new orders every 100 ms and, for each
//! pending one, decides (seeded) whether its buyer pays: with `confirm_probability`, after a
//! random delay of up to 1.5 × `hold_seconds` from the win, so some confirms arrive after
//! `pay_by` and must be refused. After the storm the bench waits out the last deadline and
//! [`check`] holds the ledger to the contract: every order ended `confirmed` or `expired`
//! (once: an order has one state), every 200 is `confirmed` and resolved before `pay_by`,
//! every unpaid order is `expired` at or after `pay_by`, and units that expired before a
//! later `sold_out` answer were sold again. The deadline is also held in real time, as the
//! buyer reads it: no 200 to a confirm sent after `pay_by`, no 409 of an order that expired
//! received before it, both on this machine's clock (the server's clock stepping must not move
//! a deadline).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::client::Client;
use super::scenario::Hold;
use super::verify::{Invariant, Violation};
use crate::domain::{Order, OrderPage, OrderState};

/// Confirm answers by order.
#[derive(Debug, Default)]
pub struct Payments {
    pub confirmed: HashSet<String>,
    /// When the confirm answered 200 was sent and when that answer arrived.
    pub confirmed_at: HashMap<String, (Instant, Instant)>,
    /// The order each first 200 returned (after a Redis restore a number may name another
    /// order than the one listed).
    pub confirmed_for: HashMap<String, Returned>,
    pub refused: HashSet<String>,
    /// Confirm attempts that got neither 200 nor 409 (transport errors, 503).
    pub failed: u64,
    /// Orders one of whose confirm attempts went unanswered or failed: the order may be
    /// confirmed without a 200 having been seen (the attempt may have landed).
    pub uncertain: HashSet<String>,
    /// Confirms answered 200 although sent after the order's `pay_by` had passed on this
    /// machine's clock: how late, in ms.
    pub late_200: HashMap<String, i64>,
    /// Confirms answered 409 before the order's `pay_by` came on this machine's clock: how
    /// early, in ms (a fault only if the order ended `expired`: a cancelled one is refused too).
    pub early_409: HashMap<String, i64>,
}

/// How far the server's time may read from this process's for the deadline checks: both read
/// the same machine's clock, the server after the bench sent and before it got the answer.
const SAME_CLOCK_SLACK_MS: i64 = 100;

/// How [`check`] words an order whose confirm was answered 200 and that expired anyway.
pub const CONFIRMED_BUT_EXPIRED: &str = "answered confirmed (200) but expired";

/// How [`check`] words a confirm answered 200 though sent after the deadline had passed on
/// the machine's clock.
pub const CONFIRMED_LATE: &str = "answered 200 to a confirm sent after its pay_by";

/// How [`check`] words an order that expired and refused a confirm before its deadline came
/// on the machine's clock.
pub const EXPIRED_EARLY: &str = "expired, answering 409 to a confirm before its pay_by";

/// What the order a confirm's 200 returned says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    pub user: String,
    /// Its `pay_by`, in µs since the epoch.
    pub pay_by: Option<i64>,
    /// The confirm's first attempt was sent after that `pay_by` on this machine's clock.
    pub late: bool,
}

/// What the report shows of a run with holds.
#[derive(Debug, Clone, Serialize)]
pub struct HoldsSummary {
    pub confirm_answered_200: usize,
    pub confirm_answered_409: usize,
    pub confirm_failed: u64,
    pub confirmed: usize,
    pub expired: usize,
}

pub struct Payer {
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
    stop: tokio::sync::watch::Sender<bool>,
    payments: Arc<Mutex<Payments>>,
    confirms: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Payer {
    pub fn start(client: Client, campaign: String, hold: Hold, seed: u64) -> Payer {
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let payments: Arc<Mutex<Payments>> = Arc::default();
        let confirms: Arc<Mutex<Vec<tokio::task::JoinHandle<()>>>> = Arc::default();
        let (p, c) = (payments.clone(), confirms.clone());
        let task = tokio::spawn(async move {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x9a1d);
            let mut cursor: Option<String> = None;
            let mut failing = false;
            let max_delay = Duration::from_secs(u64::from(hold.seconds)).mul_f64(1.5);
            loop {
                let last = *stopped.borrow();
                loop {
                    // A server killed or frozen by a fault: read again on the next tick.
                    let page = match page(&client, &campaign, cursor.as_deref()).await {
                        Ok(p) => {
                            failing = false;
                            p
                        }
                        Err(e) => {
                            if !std::mem::replace(&mut failing, true) {
                                tracing::warn!(error = %format!("{e:#}"), "payer: listing orders failed; trying again every 100 ms");
                            }
                            break;
                        }
                    };
                    for o in page
                        .orders
                        .iter()
                        .filter(|o| o.state == OrderState::Pending)
                    {
                        if !rng.gen_bool(hold.confirm_probability) {
                            continue;
                        }
                        let at = o.created_at + max_delay.mul_f64(rng.gen::<f64>());
                        let wait = (at - crate::domain::now()).to_std().unwrap_or_default();
                        let (client, p, id) = (client.clone(), p.clone(), o.order_id.clone());
                        let pay_by = o.pay_by;
                        c.lock().push(tokio::spawn(async move {
                            tokio::time::sleep(wait).await;
                            confirm(&client, &id, pay_by, &p).await;
                        }));
                    }
                    if let Some(o) = page.orders.last() {
                        cursor = Some(o.seq().to_string());
                    }
                    if page.next_cursor.is_none() {
                        break;
                    }
                }
                if last {
                    return Ok(());
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = stopped.changed() => {}
                }
            }
        });
        Payer {
            task,
            stop,
            payments,
            confirms,
        }
    }

    /// After the storm: one last read of new orders, then every scheduled confirm answered.
    pub async fn finish(self) -> anyhow::Result<Payments> {
        let _ = self.stop.send(true);
        self.task.await??;
        let confirms = std::mem::take(&mut *self.confirms.lock());
        for c in confirms {
            c.await?;
        }
        Ok(std::mem::take(&mut *self.payments.lock()))
    }
}

async fn page(client: &Client, campaign: &str, after: Option<&str>) -> anyhow::Result<OrderPage> {
    let mut path = format!("/v1/campaigns/{campaign}/orders?limit=1000");
    if let Some(c) = after {
        path.push_str(&format!("&cursor={c}"));
    }
    let (status, body) = client.admin(reqwest::Method::GET, &path, None).await?;
    if !status.is_success() {
        bail!("listing orders answered {status}: {body}");
    }
    Ok(serde_json::from_value(body)?)
}

/// One payment: a confirm, retried as a shop's payment callback is (at most four attempts,
/// 300 ms apart) when it is not answered 200 or 409. Confirming a confirmed order answers 200
/// again, so a retry after an attempt that landed unanswered still tells the truth. Each answer
/// is also held to `pay_by` on this machine's wall clock (the deadline the buyer was given):
/// a 200 to a confirm whose first attempt was sent after it, or a 409 received before it, is
/// recorded.
async fn confirm(
    client: &Client,
    id: &str,
    pay_by: Option<chrono::DateTime<chrono::Utc>>,
    p: &Mutex<Payments>,
) {
    let path = format!("/v1/orders/{id}/confirm");
    let wall = chrono::Utc::now;
    // A retry of a confirm that landed (unanswered, or a 503) is answered 200 after the
    // deadline, rightly: what must come before `pay_by` is the first attempt.
    let first_sent = wall();
    for attempt in 0..4 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let sent_at = Instant::now();
        match client.admin(reqwest::Method::POST, &path, None).await {
            Ok((s, body)) if s.as_u16() == 200 => {
                let mut p = p.lock();
                if let Ok(o) = serde_json::from_value::<Order>(body) {
                    let returned = Returned {
                        late: o.pay_by.is_some_and(|d| {
                            (first_sent - d).num_milliseconds() > SAME_CLOCK_SLACK_MS
                        }),
                        pay_by: o.pay_by.map(|d| d.timestamp_micros()),
                        user: o.user_id,
                    };
                    p.confirmed_for.entry(id.to_owned()).or_insert(returned);
                }
                if let Some(late) = pay_by.map(|d| (first_sent - d).num_milliseconds()) {
                    if late > SAME_CLOCK_SLACK_MS {
                        p.late_200.insert(id.to_owned(), late);
                    }
                }
                p.confirmed.insert(id.to_owned());
                p.confirmed_at
                    .entry(id.to_owned())
                    .or_insert((sent_at, Instant::now()));
                return;
            }
            Ok((s, _)) if s.as_u16() == 409 => {
                let mut p = p.lock();
                if let Some(early) = pay_by.map(|d| (d - wall()).num_milliseconds()) {
                    if early > SAME_CLOCK_SLACK_MS {
                        p.early_409.insert(id.to_owned(), early);
                    }
                }
                p.refused.insert(id.to_owned());
                return;
            }
            _ => {
                let mut p = p.lock();
                p.failed += 1;
                p.uncertain.insert(id.to_owned());
            }
        }
    }
}

/// Waits until every deadline of `orders` passed and the campaign has nothing pending.
pub async fn wait_resolved(client: &Client, campaign: &str, hold: Hold) -> anyhow::Result<()> {
    tokio::time::sleep(Duration::from_secs(u64::from(hold.seconds))).await;
    for _ in 0..600 {
        let v = client
            .campaign_within(campaign, super::client::SETTLE)
            .await?;
        if v.holds.is_none_or(|h| h.pending == 0) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("orders of {campaign} were still pending 30 s after the last deadline")
}

/// The holds contract over the final orders (see the module docs). `last_sold_out`: when the
/// last qty-1 claim answered `sold_out` was sent, if after the last restock and cancel were
/// answered. Such a claim sent a second or more after an expiry was resolved was decided after
/// it, on an empty stock, so the expired units had been sold again: the campaign's orders,
/// whatever their state, must hold more units than it has.
pub fn check(
    orders: &[Order],
    pay: &Payments,
    last_sold_out: Option<chrono::DateTime<chrono::Utc>>,
    total: u64,
    cancel_tried: &HashSet<String>,
) -> (Vec<Violation>, HoldsSummary) {
    let mut out = Vec::new();
    let mut bad = |message: String, id: &str| {
        out.push(Violation {
            invariant: Invariant::HoldBroken,
            message,
            orders: vec![id.to_owned()],
            key: None,
        })
    };
    let (mut confirmed, mut expired, mut early_expiry) = (0, 0, false);
    for o in orders {
        let id = o.order_id.as_str();
        let (Some(pay_by), resolved) = (o.pay_by, o.resolved_at) else {
            bad(format!("order {id} has no pay_by"), id);
            continue;
        };
        match o.state {
            OrderState::Confirmed => {
                confirmed += 1;
                if !pay.confirmed.contains(id) && !pay.uncertain.contains(id) {
                    bad(
                        format!("order {id} is confirmed though no confirm got 200"),
                        id,
                    );
                }
                if resolved.is_none_or(|r| r >= pay_by) {
                    bad(
                        format!("order {id} was confirmed at or after its pay_by"),
                        id,
                    );
                }
            }
            OrderState::Expired => {
                expired += 1;
                if pay.confirmed.contains(id) {
                    bad(format!("order {id} {CONFIRMED_BUT_EXPIRED}"), id);
                }
                // A cancel answered 503 "outcome unknown" may be seen by a confirm (409) and
                // then lost in a failover: the order expires, as the 409 said it would not sell.
                if let Some(ms) = pay.early_409.get(id).filter(|_| !cancel_tried.contains(id)) {
                    bad(format!("order {id} {EXPIRED_EARLY} ({ms} ms before)"), id);
                }
                if resolved.is_none_or(|r| r < pay_by) {
                    bad(format!("order {id} expired before its pay_by"), id);
                }
                early_expiry |= resolved
                    .zip(last_sold_out)
                    .is_some_and(|(r, s)| r + chrono::TimeDelta::seconds(1) < s);
            }
            OrderState::Cancelled => {}
            other => bad(
                format!("order {id} is {} after its deadline", other.as_str()),
                id,
            ),
        }
        if let Some(ms) = pay.late_200.get(id) {
            bad(format!("order {id} {CONFIRMED_LATE} ({ms} ms after)"), id);
        }
        if pay.refused.contains(id) && o.state == OrderState::Confirmed {
            bad(format!("order {id} answered 409 but is confirmed"), id);
        }
    }
    // Orders are never deleted: once every unit was sold with an expired one among them sold
    // again, the orders of every state hold more units than the campaign has. (Counting
    // orders instead of their units was wrong where a claim may take two units.)
    let units: u64 = orders.iter().map(|o| o.qty).sum();
    if early_expiry && units <= total {
        out.push(Violation {
            invariant: Invariant::HoldBroken,
            message: format!(
                "units expired and a claim sent a second later was answered sold_out, yet the \
                 {} orders of every state hold only {units} units of {total}: the returned \
                 units were not sold again",
                orders.len()
            ),
            orders: vec![],
            key: None,
        });
    }
    let summary = HoldsSummary {
        confirm_answered_200: pay.confirmed.len(),
        confirm_answered_409: pay.refused.len(),
        confirm_failed: pay.failed,
        confirmed,
        expired,
    };
    (out, summary)
}

#[cfg(test)]
mod tests;
