//! The sold-out board learns holder changes by version, not by count: a cancel followed at
//! once by a re-win leaves the number of holders unchanged, yet the other instance must hear
//! the new holder answer `already_claimed`, not the fast `sold_out`.

use std::time::{Duration, Instant};

use reqwest::Method;
use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::Outcome;
use serde_json::json;

use super::procs::Seckill;
use crate::helpers::settle_url;
use crate::servers::{pg, RedisServer};

async fn outcome(c: &Client, campaign: &str, user: &str) -> Outcome {
    match c.claim(campaign, user, 1, None).await.unwrap() {
        ClaimReply::Processed(a) => a.outcome,
        ClaimReply::Refused(s, body) => panic!("refused {s}: {body}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancel_then_rewin_is_seen_by_the_other_instance() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let urls = vec![redis.url()];
    // The documented bound: a stale board outlives a change by --stock-max-staleness-ms.
    let a = Seckill::serve(&urls, &postgres, &["--stock-max-staleness-ms", "500"]);
    let b = Seckill::serve(&urls, &postgres, &["--stock-max-staleness-ms", "500"]);
    let (ca, cb) = (a.client(), b.client());
    ca.create_campaign(&json!({"id": "board", "stock": 2, "per_user_limit": 1}))
        .await
        .unwrap();
    let mut orders = Vec::new();
    for u in ["u1", "u2"] {
        let ClaimReply::Processed(a) = ca.claim("board", u, 1, None).await.unwrap() else {
            panic!("refused")
        };
        assert_eq!(a.outcome, Outcome::Won);
        orders.push(a.order_id.unwrap());
    }
    // B learns the campaign is sold out (and loads its holders).
    for i in 0..5 {
        assert_eq!(
            outcome(&cb, "board", &format!("late-{i}")).await,
            Outcome::SoldOut
        );
    }
    assert_eq!(outcome(&cb, "board", "u2").await, Outcome::AlreadyClaimed);
    settle_url(&ca).await;
    // Cut the announcements, so only B's periodic re-read can tell it what follows.
    let mut raw = redis::Client::open(redis.url().as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query_async(&mut raw)
        .await
        .unwrap();
    let (s, body) = ca
        .admin(
            Method::POST,
            &format!("/v1/orders/{}/cancel", orders[0]),
            None,
        )
        .await
        .unwrap();
    assert_eq!(s, 200, "{body}");
    assert_eq!(outcome(&ca, "board", "u4").await, Outcome::Won);
    let rewon = Instant::now();
    let bound = Duration::from_millis(500 * 4 + 2000);
    loop {
        match outcome(&cb, "board", "u4").await {
            Outcome::AlreadyClaimed => break,
            Outcome::SoldOut => assert!(
                rewon.elapsed() < bound,
                "instance B still answers the new holder sold_out after {:?}",
                rewon.elapsed()
            ),
            other => panic!("unexpected {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "new holder known on the other instance after {:?}",
        rewon.elapsed()
    );
    // It stays known, and the campaign stays sold out for everyone else.
    for i in 0..5 {
        assert_eq!(outcome(&cb, "board", "u4").await, Outcome::AlreadyClaimed);
        assert_eq!(
            outcome(&cb, "board", &format!("later-{i}")).await,
            Outcome::SoldOut
        );
    }
}

/// `HSCAN`/`HKEYS` calls Redis has served so far.
async fn holder_scans(redis: &mut redis::aio::MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(redis)
        .await
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_hscan:") || l.starts_with("cmdstat_hkeys:"))
        .filter_map(|l| {
            l.split("calls=")
                .nth(1)?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// An idle sold-out campaign costs one `HMGET` per tick, never a re-read of its holders, even
/// with 200,000 holders; a holder change costs one reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_sold_out_campaign_never_rereads_its_holders() {
    let app = crate::helpers::App::spawn(crate::helpers::Deploy::ScaleOut).await;
    app.create(json!({"id": "idle", "stock": 2, "per_user_limit": 1}))
        .await;
    let mut redis = redis::Client::open(app.redis[0].as_str())
        .unwrap()
        .get_multiplexed_async_connection_with_config(&crate::servers::patient())
        .await
        .unwrap();
    // Many holders, as if a large sale had sold out (written straight into the gate).
    let users = seckill::engine::scale_out::Keys::new("idle").users();
    for chunk in 0..200 {
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&users);
        for i in 0..1000 {
            cmd.arg(format!("bulk-{chunk}-{i}")).arg(1);
        }
        let _: i64 = cmd.query_async(&mut redis).await.unwrap();
    }
    let won = app.claim("idle", "u1", 1).await;
    assert_eq!(won.outcome, Outcome::Won);
    assert_eq!(app.claim("idle", "u2", 1).await.outcome, Outcome::Won);
    let first = Instant::now();
    assert_eq!(app.claim("idle", "u3", 1).await.outcome, Outcome::SoldOut);
    // The holders load in the background; the board then answers new users from memory.
    let series = crate::guards::engine_claims("idle");
    let base = app.admin_url();
    let mut n = 0;
    loop {
        // The campaign's board entry (and with it its series) appears once the background
        // load has registered it; until then every claim reaches the engine.
        let before = seckill::guard::metrics::sample(&crate::guards::metrics(&base).await, &series);
        assert_eq!(
            app.claim("idle", &format!("new-{n}"), 1).await.outcome,
            Outcome::SoldOut
        );
        let after = seckill::guard::metrics::sample(&crate::guards::metrics(&base).await, &series);
        if before.is_some() && after == before {
            break;
        }
        n += 1;
        assert!(
            first.elapsed() < Duration::from_secs(120),
            "the board never loaded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "board sold out after loading 200,002 holders in pages: {:?}",
        first.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = holder_scans(&mut redis).await;
    // Three refresher ticks (1 s each by default) with nothing changing.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(
        holder_scans(&mut redis).await,
        before,
        "idle ticks re-read the holders"
    );
    // A cancel changes the holders: the next re-read reloads them once.
    app.settle().await;
    let (s, v) = app
        .admin(
            Method::POST,
            &format!("/v1/orders/{}/cancel", won.order_id.unwrap()),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(app.claim("idle", "u4", 1).await.outcome, Outcome::Won);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        holder_scans(&mut redis).await > before,
        "the holder change was never loaded"
    );
    assert_eq!(
        app.claim("idle", "u4", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    assert_eq!(
        app.claim("idle", "bulk-7-7", 1).await.outcome,
        Outcome::AlreadyClaimed
    );
    app.stop().await;
}
