//! Redis Cluster: a connection reset after a claim script ran and before its reply arrived.
//!
//! The cluster client used to retry internally (`retries(2)`): after the reset it sent the
//! claim batch again, which ran a second time — the buyer whose first run won was told
//! `already_claimed` (or, under a higher limit, got a second order). Now the client never
//! retries a call: the claim answers the outcome-unknown 503 and the unit was taken once.
//!
//! A proxy sits in front of each master (the masters announce the proxies' ports, so the slot
//! map sends every client through them); armed, it lets the next script call through and
//! resets the connection instead of forwarding the reply.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use seckill::bench::client::{ClaimReply, Client};
use seckill::config::ServeConfig;
use seckill::domain::Outcome;

use crate::helpers::TOKEN;
use crate::servers::{pg, RedisCluster};

/// Forwards `listener` to `target`; while `armed`, the first connection that sends a script
/// call (`EVALSHA`) has the claim answer that comes back dropped and is reset, and `armed` is
/// cleared.
async fn proxy(
    listener: TcpListener,
    target: Arc<std::sync::OnceLock<u16>>,
    armed: Arc<AtomicBool>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            return;
        };
        let (target, armed) = (target.clone(), armed.clone());
        tokio::spawn(async move {
            let Some(port) = target.get().copied() else {
                return;
            };
            let Ok(server) = TcpStream::connect(("127.0.0.1", port)).await else {
                return;
            };
            let (mut cr, mut cw) = client.into_split();
            let (mut sr, mut sw) = server.into_split();
            let doomed = Arc::new(AtomicBool::new(false));
            let up = {
                let (armed, doomed) = (armed.clone(), doomed.clone());
                async move {
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        let call = buf[..n]
                            .windows(7)
                            .any(|w| w.eq_ignore_ascii_case(b"EVALSHA"));
                        if call && armed.swap(false, Ordering::SeqCst) {
                            doomed.store(true, Ordering::SeqCst);
                        }
                        if sw.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                }
            };
            let down = async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match sr.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    // The claim's own answer (it names its outcome): proof the script ran.
                    let answer = buf[..n].windows(3).any(|w| w == b"won");
                    if doomed.load(Ordering::SeqCst) && answer {
                        return; // the reply is dropped; both halves close below
                    }
                    if cw.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
            };
            tokio::select! {
                _ = up => {}
                _ = down => {}
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reset_after_the_script_ran_never_runs_the_claim_twice() {
    let armed = Arc::new(AtomicBool::new(false));
    let mut fronts = Vec::new();
    let mut targets = Vec::new();
    for _ in 0..3 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(std::sync::OnceLock::new());
        tokio::spawn(proxy(listener, target.clone(), armed.clone()));
        fronts.push(port);
        targets.push(target);
    }
    // The proxies need their targets before the cluster is created (redis-cli reaches the
    // nodes through the announced ports): set as soon as the nodes listen.
    let _cluster = tokio::task::block_in_place(|| {
        RedisCluster::start_announcing([fronts[0], fronts[1], fronts[2]], |ports| {
            for (t, p) in targets.iter().zip(ports) {
                let _ = t.set(*p);
            }
        })
    });
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
    cfg.scale.redis = fronts
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    cfg.scale.postgres = Some(pg().fresh_db().await);
    let server = seckill::app::App::build(cfg)
        .await
        .expect("serve on the Cluster");
    let c = Client::new(&server.url(), TOKEN);
    c.create_campaign(&json!({"id": "reset", "stock": 10, "per_user_limit": 1}))
        .await
        .unwrap();
    // Warm: the script is loaded on the campaign's master (a NOSCRIPT round is no run).
    match c.claim("reset", "warm", 1, None).await.unwrap() {
        ClaimReply::Processed(a) => assert_eq!(a.outcome, Outcome::Won),
        other => panic!("{other:?}"),
    }
    armed.store(true, Ordering::SeqCst);
    // Without an Idempotency-Key: a second run is a second decision, not a replay.
    let first = c.claim("reset", "victim", 1, None).await.unwrap();
    assert!(!armed.load(Ordering::SeqCst), "the reset happened");
    match &first {
        ClaimReply::Refused(s, body) => {
            assert_eq!(s.as_u16(), 503, "{body}");
            assert_eq!(body["error"]["outcome"], "unknown", "{body}");
        }
        ClaimReply::Processed(a) => {
            crate::helpers::settle_url(&c).await;
            let orders = c.all_orders("reset").await.unwrap();
            panic!(
                "the claim was answered {:?} after its reply was lost: the client ran it again; orders {orders:?}",
                a.outcome
            )
        }
    }
    // The one run won: a retry is told so (already_claimed), and the unit was taken once. The
    // client reconnects to the node in the background: a retry sent before it has answers the
    // outcome-unknown 503 as well (sent nowhere twice), so the buyer retries a little later.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut unknown = 0;
    let retried = loop {
        match c.claim("reset", "victim", 1, None).await.unwrap() {
            ClaimReply::Refused(s, body)
                if s.as_u16() == 503
                    && body["error"]["outcome"] == "unknown"
                    && std::time::Instant::now() < deadline =>
            {
                unknown += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            other => break other,
        }
    };
    eprintln!("retries answered 503 outcome unknown before the reconnect: {unknown}");
    match retried {
        ClaimReply::Processed(a) => assert_eq!(a.outcome, Outcome::AlreadyClaimed),
        other => panic!("{other:?}"),
    }
    crate::helpers::settle_url(&c).await;
    let orders = c.all_orders("reset").await.unwrap();
    let victims = orders.iter().filter(|o| o.user_id == "victim").count();
    assert_eq!(victims, 1, "one run, one order: {orders:?}");
    assert_eq!(c.campaign("reset").await.unwrap().remaining, 8);
    server.stop().await.unwrap();
}
