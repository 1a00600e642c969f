//! Two pipeline consumers in one group apply 1,000 pending orders and their transitions at
//! once: confirms, expiries and cancels, some delivered twice, some before their own order.
//! Every order ends in exactly the state its transition says, with one resolution event.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Connection;

use seckill::domain::OrderState;
use seckill::engine::scale_out::Keys;
use seckill::ledger::Ledger;
use seckill::pipeline::Step;

use super::{new_order, transition, us, Rig, HOLD_US, WON};

const ORDERS: u64 = 1_000;
const WAVE: u64 = 100;

fn kind(i: u64) -> (&'static str, OrderState) {
    match i % 3 {
        0 => ("confirmed", OrderState::Confirmed),
        1 => ("expired", OrderState::Expired),
        _ => ("cancelled", OrderState::Cancelled),
    }
}

fn resolved_at(i: u64) -> i64 {
    WON + 1_000_000 + i as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_consumers_apply_a_thousand_mixed_transitions_one_final_state_each() {
    let mut rig = Rig::start("race", ORDERS, &[]).await;
    let done = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for name in ["a", "b"] {
        // Small batches, so the two interleave many transactions.
        let mut c = rig.consumer(name, 37, Duration::from_secs(30)).await;
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let (mut sum, mut failed_steps) = (Step::default(), 0);
            while !done.load(Ordering::Relaxed) {
                match c.step().await {
                    Ok(s) => {
                        sum.read += s.read;
                        sum.persisted += s.persisted;
                        sum.poisoned += s.poisoned;
                        if s.read == 0 {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                    }
                    // A deadlock between the two transactions is retried like any failure.
                    Err(_) => failed_steps += 1,
                }
            }
            (sum, failed_steps)
        }));
    }

    // Waves of new orders; each wave's transitions come with the next wave, shuffled, every
    // 7th twice, and every 5th order's transition before the order itself.
    let mut rng_state = 0x2545_f491_u64;
    let mut next = move || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    let mut behind: Vec<u64> = Vec::new();
    let mut sent = 0;
    for wave in 0..=ORDERS / WAVE {
        let mut entries = Vec::new();
        for i in wave * WAVE + 1..=((wave + 1) * WAVE).min(ORDERS) {
            let order = new_order("race", i, &format!("u{i}"), &[]);
            if i % 5 == 0 {
                entries.push(transition(kind(i).0, resolved_at(i), &order));
            }
            entries.push(order);
        }
        let mut later: Vec<_> = behind
            .drain(..)
            .flat_map(|i| {
                let t = transition(
                    kind(i).0,
                    resolved_at(i),
                    &new_order("race", i, &format!("u{i}"), &[]),
                );
                if i % 7 == 0 {
                    vec![t.clone(), t]
                } else {
                    vec![t]
                }
            })
            .collect();
        for k in (1..later.len()).rev() {
            later.swap(k, (next() % (k as u64 + 1)) as usize);
        }
        entries.extend(later);
        behind = (wave * WAVE + 1..=((wave + 1) * WAVE).min(ORDERS))
            .filter(|i| i % 5 != 0)
            .collect();
        for e in &entries {
            rig.xadd("race", e).await;
        }
        sent += entries.len();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let len: u64 = redis::cmd("XLEN")
            .arg(Keys::new("race").orders())
            .query_async(&mut rig.raw)
            .await
            .unwrap();
        if len == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{len} entries still in the stream"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done.store(true, Ordering::Relaxed);
    let mut total = Step::default();
    for w in workers {
        let (s, failed_steps) = w.await.unwrap();
        assert!(
            s.persisted > 0,
            "both consumers applied entries: {s:?} ({failed_steps} failed steps)"
        );
        total.read += s.read;
        total.persisted += s.persisted;
        total.poisoned += s.poisoned;
    }
    assert_eq!(total.poisoned, 0, "no contradiction, no poison");
    assert_eq!(
        total.persisted, sent,
        "every entry applied once it was read"
    );

    let orders = rig
        .ledger
        .orders("race", None, 0, ORDERS as u32 + 1)
        .await
        .unwrap();
    assert_eq!(orders.len(), ORDERS as usize);
    for o in &orders {
        let i = o.seq();
        let (_, want) = kind(i);
        assert_eq!(o.state, want, "{}", o.order_id);
        assert_eq!(o.pay_by, us(WON + i as i64 + HOLD_US), "{}", o.order_id);
        let (cancelled, resolved) = match want {
            OrderState::Cancelled => (us(resolved_at(i)), None),
            _ => (None, us(resolved_at(i))),
        };
        assert_eq!(
            (o.cancelled_at, o.resolved_at),
            (cancelled, resolved),
            "{}",
            o.order_id
        );
    }
    let mut conn = sqlx::PgConnection::connect(&rig.db).await.unwrap();
    let events: Vec<(String, i64)> = sqlx::query_as(
        "SELECT detail, COUNT(*) FROM events WHERE campaign_id = 'race' \
         AND kind IN ('confirmed', 'expired', 'cancel') GROUP BY detail",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let events: HashMap<String, i64> = events.into_iter().collect();
    assert_eq!(
        events.len(),
        ORDERS as usize,
        "one resolution event per order"
    );
    assert!(
        events.values().all(|n| *n == 1),
        "never two resolutions of one order"
    );
    assert!(rig.ledger.failed_orders("race").await.unwrap().is_empty());
}
