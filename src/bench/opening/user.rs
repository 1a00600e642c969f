//! One simulated user of the opening: join, poll with backoff, claim once admitted, and for
//! every tenth user three claims the room must refuse.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use reqwest::{RequestBuilder, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use super::check::{Cheat, Seen};
use crate::bench::client::Client;
use crate::bench::storm::Win;
use crate::domain::{ClaimAnswer, Outcome, RoomAnswer};

/// Longest pause between two reads of one user's place.
const MAX_POLL: Duration = Duration::from_secs(4);
/// Attempts of a join or a read that failed (no answer, 429, 5xx) before the user gives up.
const ATTEMPTS: u32 = 8;

/// What one user is to do.
pub struct UserRun {
    pub user: String,
    pub at: Instant,
    pub cheat: bool,
    pub seed: u64,
}

/// Why no answer about a user's place came.
enum Unplaced {
    /// Every try failed (no answer, 429, 5xx).
    GaveUp,
    /// A read answered 404: the room does not know a user its join placed.
    Forgotten,
}

/// An answer about a user's place.
struct Placed {
    answer: RoomAnswer,
    sent: Instant,
    sent_at: DateTime<Utc>,
    answered: Instant,
}

/// What one user did.
pub struct UserDone {
    pub seen: Seen,
    pub win: Option<Win>,
    /// Whether a join placed this user.
    pub placed: bool,
    /// The admission the room told this user, if it did.
    pub told: Option<RoomAnswer>,
}

/// The request histograms and counts every user adds to.
pub struct Tally {
    pub join: Histogram<u64>,
    pub status: Histogram<u64>,
    pub claim: Histogram<u64>,
    pub outcomes: BTreeMap<String, u64>,
    /// Answers other than 200 (and the cheats' 403s), by status.
    pub refused: BTreeMap<u16, u64>,
    pub cheats: Vec<Cheat>,
    pub transport_errors: u64,
    pub gave_up: u64,
    pub unanswered_claims: u64,
    pub claims_sold_out: u64,
}

/// What the users share: the in-flight limit, the tally, and the last ticket seen (for the
/// cheats that borrow another user's).
pub struct Shared {
    slots: Semaphore,
    campaign: String,
    timeout: Duration,
    tally: Mutex<Tally>,
    last_ticket: Mutex<Option<(String, String)>>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("static histogram bounds are valid")
}

impl Tally {
    fn new() -> Self {
        Tally {
            join: histogram(),
            status: histogram(),
            claim: histogram(),
            outcomes: BTreeMap::new(),
            refused: BTreeMap::new(),
            cheats: Vec::new(),
            transport_errors: 0,
            gave_up: 0,
            unanswered_claims: 0,
            claims_sold_out: 0,
        }
    }
}

/// Which histogram a request's latency goes to.
type Which = fn(&mut Tally) -> &mut Histogram<u64>;

impl Shared {
    pub fn new(connections: usize, campaign: &str, timeout: Duration) -> Self {
        Self {
            slots: Semaphore::new(connections),
            campaign: campaign.to_owned(),
            timeout,
            tally: Mutex::new(Tally::new()),
            last_ticket: Mutex::new(None),
        }
    }

    pub fn finish(&self) -> Tally {
        std::mem::replace(&mut *self.tally.lock(), Tally::new())
    }

    /// Sends one request within the in-flight limit; the latency goes to `which`, an answer
    /// other than 200 to the refusals unless `refusal_expected`. `None`: no whole answer
    /// (counted as a transport error). `first` is set to when the request left, unless set:
    /// a retried join may have been placed by its first try.
    async fn send(
        &self,
        req: RequestBuilder,
        which: Which,
        refusal_expected: bool,
        first: &mut Option<(Instant, DateTime<Utc>)>,
    ) -> Option<(StatusCode, Value, Instant, Instant)> {
        let _slot = self.slots.acquire().await.ok()?;
        let sent = Instant::now();
        first.get_or_insert((sent, Utc::now()));
        let answer = async {
            let resp = req.timeout(self.timeout).send().await?;
            let status = resp.status();
            let bytes = resp.bytes().await?;
            Ok::<_, reqwest::Error>((
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            ))
        }
        .await;
        let answered = Instant::now();
        match answer {
            Ok((status, body)) => {
                let us = (answered - sent).as_micros().max(1) as u64;
                let mut t = self.tally.lock();
                let _ = which(&mut t).record(us);
                if status != StatusCode::OK && !refusal_expected {
                    *t.refused.entry(status.as_u16()).or_default() += 1;
                }
                Some((status, body, sent, answered))
            }
            Err(e) => {
                tracing::debug!(error = %e, "opening request failed");
                self.tally.lock().transport_errors += 1;
                None
            }
        }
    }

    /// A join or a read of the place, retried with backoff while it fails; with when its
    /// first try left and when the last was answered. Every read comes after a join that
    /// placed the user, so a read answered 404 is not retried: the room forgot the user.
    async fn place(&self, client: &Client, user: &str, join: bool) -> Result<Placed, Unplaced> {
        let mut pause = Duration::from_millis(100);
        let mut first = None;
        for _ in 0..ATTEMPTS {
            let (req, which): (_, Which) = if join {
                let path = format!("/v1/campaigns/{}/queue", self.campaign);
                (
                    client
                        .http()
                        .post(client.url(&path))
                        .json(&json!({"user_id": user})),
                    |t| &mut t.join,
                )
            } else {
                let path = format!("/v1/campaigns/{}/queue/{user}", self.campaign);
                (client.http().get(client.url(&path)), |t| &mut t.status)
            };
            match self.send(req, which, false, &mut first).await {
                Some((StatusCode::OK, body, _, answered)) => {
                    if let (Ok(answer), Some((sent, sent_at))) =
                        (serde_json::from_value(body), first)
                    {
                        return Ok(Placed {
                            answer,
                            sent,
                            sent_at,
                            answered,
                        });
                    }
                }
                Some((StatusCode::NOT_FOUND, ..)) if !join => return Err(Unplaced::Forgotten),
                _ => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_POLL);
        }
        Err(Unplaced::GaveUp)
    }

    /// One claim of one unit with `ticket` as the header (none: no header).
    async fn claim(
        &self,
        client: &Client,
        user: &str,
        ticket: Option<&str>,
        refusal_expected: bool,
    ) -> Option<(StatusCode, Value, Instant, Instant)> {
        let path = format!("/v1/campaigns/{}/claims", self.campaign);
        let mut req = client
            .http()
            .post(client.url(&path))
            .json(&json!({"user_id": user, "qty": 1}));
        if let Some(t) = ticket {
            req = req.header("x-seckill-ticket", t);
        }
        self.send(req, |t| &mut t.claim, refusal_expected, &mut None)
            .await
    }

    /// A claim that must be refused: its answer is kept for the checker.
    async fn cheat(&self, client: &Client, user: &str, how: &'static str, ticket: Option<&str>) {
        if let Some((status, body, _, _)) = self.claim(client, user, ticket, true).await {
            let code = body["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            self.tally.lock().cheats.push(Cheat {
                user: user.to_owned(),
                how,
                status: status.as_u16(),
                code,
            });
        }
    }
}

/// The life of one user.
pub async fn live(sh: std::sync::Arc<Shared>, client: Client, run: UserRun) -> UserDone {
    let mut rng = rand::rngs::StdRng::seed_from_u64(run.seed);
    tokio::time::sleep_until(run.at.into()).await;
    let user = run.user.as_str();
    let mut seen = Seen {
        user: run.user.clone(),
        join_sent: Instant::now(),
        join_answered: Instant::now(),
        join_sent_at: Utc::now(),
        prequeue: false,
        admitted_at: None,
        room_sold_out: false,
        ticket_refused: false,
        answer_changed: None,
        forgotten: false,
    };
    let Ok(joined) = sh.place(&client, user, true).await else {
        sh.tally.lock().gave_up += 1;
        return UserDone {
            seen,
            win: None,
            placed: false,
            told: None,
        };
    };
    let mut answer = joined.answer;
    (seen.join_sent, seen.join_sent_at, seen.join_answered) =
        (joined.sent, joined.sent_at, joined.answered);
    seen.prequeue = matches!(answer, RoomAnswer::Prequeue { .. });
    if run.cheat {
        sh.cheat(&client, user, "no ticket", None).await;
        let forged = format!(
            "t1.{}.{}",
            chrono::Utc::now().timestamp_millis() + 60_000,
            "A".repeat(43)
        );
        sh.cheat(&client, user, "a forged ticket", Some(&forged))
            .await;
    }
    let mut backoff = Duration::from_millis(250);
    let ticket = loop {
        let pause = match &answer {
            RoomAnswer::Admitted {
                ticket,
                admitted_at,
                ..
            } => {
                seen.admitted_at = Some(*admitted_at);
                break ticket.clone();
            }
            RoomAnswer::SoldOut => {
                seen.room_sold_out = true;
                return UserDone {
                    seen,
                    win: None,
                    placed: true,
                    told: None,
                };
            }
            RoomAnswer::Prequeue { starts_at } => {
                let until = starts_at
                    .and_then(|s| (s - chrono::Utc::now()).to_std().ok())
                    .unwrap_or_default();
                let p = backoff.min(until + Duration::from_millis(rng.gen_range(0..200)));
                backoff = (backoff * 2).min(MAX_POLL);
                p
            }
            RoomAnswer::Waiting {
                estimated_wait_ms, ..
            } => Duration::from_millis(*estimated_wait_ms)
                .mul_f64(rng.gen_range(0.5..1.0))
                .clamp(Duration::from_millis(50), MAX_POLL),
        };
        tokio::time::sleep(pause).await;
        match sh.place(&client, user, false).await {
            Ok(p) => answer = p.answer,
            Err(why) => {
                seen.forgotten = matches!(why, Unplaced::Forgotten);
                sh.tally.lock().gave_up += 1;
                return UserDone {
                    seen,
                    win: None,
                    placed: true,
                    told: None,
                };
            }
        }
    };
    if run.cheat {
        let borrowed = sh.last_ticket.lock().clone();
        if let Some((_, other)) = borrowed.filter(|(u, _)| u != user) {
            sh.cheat(&client, user, "another user's ticket", Some(&other))
                .await;
        }
    }
    *sh.last_ticket.lock() = Some((run.user.clone(), ticket.clone()));
    let admitted = answer;
    let win = claim(&sh, &client, user, &ticket, &mut seen).await;
    // Once told, an admission never changes: read it once more after the claim.
    match sh.place(&client, user, false).await {
        Ok(again) if again.answer != admitted => {
            seen.answer_changed = Some(format!("{admitted:?}, then {:?}", again.answer));
        }
        Err(Unplaced::Forgotten) => seen.forgotten = true,
        _ => {}
    }
    UserDone {
        seen,
        win,
        placed: true,
        told: Some(admitted),
    }
}

/// The one real claim of an admitted user.
async fn claim(
    sh: &Shared,
    client: &Client,
    user: &str,
    ticket: &str,
    seen: &mut Seen,
) -> Option<Win> {
    let Some((status, body, sent, answered)) = sh.claim(client, user, Some(ticket), false).await
    else {
        sh.tally.lock().unanswered_claims += 1;
        return None;
    };
    seen.ticket_refused =
        status == StatusCode::FORBIDDEN && body["error"]["code"] == "not_admitted";
    let answer = (status == StatusCode::OK)
        .then(|| serde_json::from_value::<ClaimAnswer>(body).ok())
        .flatten();
    let mut t = sh.tally.lock();
    let Some(a) = answer else {
        // A 200 that says nothing readable may have won, like a 5xx.
        if status.is_server_error() || status == StatusCode::OK {
            t.unanswered_claims += 1;
        }
        return None;
    };
    *t.outcomes.entry(a.outcome.as_str().to_owned()).or_default() += 1;
    match (a.outcome, a.order_id) {
        (Outcome::SoldOut, _) => {
            t.claims_sold_out += 1;
            None
        }
        (Outcome::Won, Some(order_id)) => Some(Win {
            user: user.to_owned(),
            order_id,
            qty: a.qty.unwrap_or(1),
            codes: a.codes,
            key: None,
            sent,
            answered,
        }),
        _ => None,
    }
}
