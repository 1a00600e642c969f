//! Admin events fired during the storm: restock, pause, resume, close, cancel.
//!
//! A real sale is not a closed box: operators top up stock, pause a misbehaving campaign, and
//! orders get cancelled while users keep clicking. Firing those through the public admin API in
//! the middle of a storm exercises the engine's hardest interleavings, and the completion time
//! of each supply change tells the verifier from when on a `sold_out` proves the stock was gone.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde::Serialize;
use serde_json::json;

use super::event_spec::{Action, EventSpec, When};
use super::scenario::Stop;
use super::storm::Live;
use crate::bench::client::Client;

/// How the detail of an admin change that no attempt got an answer for begins: it may have
/// been applied (once: its retries share one Idempotency-Key) or not.
pub const UNANSWERED: &str = "unanswered after 6 attempts, outcome unknown";

/// What happened to one event.
#[derive(Debug, Clone, Serialize)]
pub struct EventRecord {
    pub spec: EventSpec,
    /// Seconds since the storm started when the event was sent (None: the storm ended first).
    pub sent_s: Option<f64>,
    pub done_s: Option<f64>,
    pub ok: bool,
    pub detail: String,
    #[serde(skip)]
    pub done_at: Option<Instant>,
    /// Orders this event cancelled, or may have (the cancel got no answer or a 5xx).
    pub cancelled: Vec<String>,
}

/// Runs `specs` in time order against `campaign` while the storm runs; `clients`: one per
/// instance (admin changes are retried on the next one).
pub async fn run(
    specs: Vec<EventSpec>,
    clients: Vec<Client>,
    campaign: String,
    codes: bool,
    stop: Stop,
    live: Arc<Live>,
) -> Vec<EventRecord> {
    let mut out = Vec::with_capacity(specs.len());
    for (n, spec) in specs.into_iter().enumerate() {
        if !wait_for(spec.when, stop, &live).await {
            out.push(EventRecord {
                spec,
                sent_s: None,
                done_s: None,
                ok: false,
                detail: "not reached: the storm ended first".into(),
                done_at: None,
                cancelled: Vec::new(),
            });
            continue;
        }
        let sent_s = live.started.elapsed().as_secs_f64();
        let (ok, detail, cancelled) = fire(spec.action, n, &clients, &campaign, codes, &live).await;
        let done_at = Instant::now();
        tracing::info!(?spec, ok, detail, "bench event");
        out.push(EventRecord {
            spec,
            sent_s: Some(sent_s),
            done_s: Some(done_at.duration_since(live.started).as_secs_f64()),
            ok,
            detail,
            done_at: Some(done_at),
            cancelled,
        });
    }
    out
}

/// Waits until the event is due; false if the storm finished first.
async fn wait_for(when: When, stop: Stop, live: &Live) -> bool {
    let due_at = match (when, stop) {
        (When::After(s), _) => Some(Duration::from_secs_f64(s)),
        (When::Fraction(f), Stop::Duration(d)) => Some(d.mul_f64(f)),
        (When::Fraction(_), Stop::Requests(_)) => None,
    };
    loop {
        if live.finished.load(Ordering::Acquire) {
            return false;
        }
        let due = match (due_at, when, stop) {
            (Some(d), _, _) => live.started.elapsed() >= d,
            (None, When::Fraction(f), Stop::Requests(n)) => {
                live.done.load(Ordering::Relaxed) as f64 >= n as f64 * f
            }
            _ => true,
        };
        if due {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn fire(
    action: Action,
    n: usize,
    clients: &[Client],
    campaign: &str,
    codes: bool,
    live: &Live,
) -> (bool, String, Vec<String>) {
    // As an operator's tooling does: one Idempotency-Key per change, and a change that got no
    // answer or a 5xx sent again with it, to the next instance, until it is answered (up to
    // six attempts, 500 ms apart). The key makes the retries one change. A cancel needs no
    // key: cancelling a cancelled order changes nothing and answers the order.
    let event_key = format!("bench-event-{n}-{campaign}");
    let admin = |path: String, body: Option<serde_json::Value>, key: Option<String>| {
        async move {
            let mut last = String::new();
            for attempt in 0..6 {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                let client = &clients[attempt % clients.len()];
                match client
                    .admin_keyed(Method::POST, &path, body.as_ref(), key.as_deref())
                    .await
                {
                    Ok((s, _)) if s.is_success() => {
                        return (true, format!("{s} (attempt {})", attempt + 1))
                    }
                    // After an unanswered attempt a refusal (a 408, say) does not tell
                    // whether that attempt landed.
                    Ok((s, b)) if s.is_client_error() && !last.is_empty() => {
                        return (false, format!("{UNANSWERED}: then {s}: {b}"))
                    }
                    Ok((s, b)) if s.is_client_error() => return (false, format!("{s}: {b}")),
                    Ok((s, b)) => last = format!("{s}: {b}"),
                    Err(e) => last = format!("{e:#}"),
                }
            }
            (false, format!("{UNANSWERED}: {last}"))
        }
    };
    let base = format!("/v1/campaigns/{campaign}");
    match action {
        Action::Pause => {
            let (ok, d) = admin(format!("{base}/pause"), None, Some(event_key.clone())).await;
            (ok, d, vec![])
        }
        Action::Resume => {
            let (ok, d) = admin(format!("{base}/resume"), None, Some(event_key.clone())).await;
            (ok, d, vec![])
        }
        Action::Close => {
            let (ok, d) = admin(format!("{base}/close"), None, Some(event_key.clone())).await;
            (ok, d, vec![])
        }
        Action::Restock(units) => {
            let body = if codes {
                let list: Vec<String> = (1..=units).map(|i| format!("R{n}-{i:07}")).collect();
                json!({ "codes": list })
            } else {
                json!({ "units": units })
            };
            let (ok, d) = admin(
                format!("{base}/restock"),
                Some(body),
                Some(event_key.clone()),
            )
            .await;
            (ok, d, vec![])
        }
        Action::Cancel(count) => {
            let ids = live.take_recent_wins(count as usize);
            let mut cancelled = Vec::new();
            let mut failures = Vec::new();
            for id in ids {
                let path = format!("/v1/orders/{id}/cancel");
                match admin(path, None, None).await {
                    (true, _) => cancelled.push(id),
                    // Refused at once: the order certainly stays as it was.
                    (false, d) if !d.starts_with(UNANSWERED) => failures.push(format!("{id}: {d}")),
                    // No attempt answered (faults all along), or a refusal after one that
                    // was not: the cancel may have happened, so the verifier must not call
                    // that order's cancellation unexplained.
                    (false, d) => {
                        failures.push(format!("{id}: {d}"));
                        cancelled.push(id);
                    }
                }
            }
            let detail = format!(
                "cancelled {} of {count} requested{}",
                cancelled.len(),
                if failures.is_empty() {
                    String::new()
                } else {
                    format!("; failed: {}", failures.join(", "))
                }
            );
            (failures.is_empty(), detail, cancelled)
        }
    }
}
