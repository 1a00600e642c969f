//! One client (or sixteen) sending complete claim heads whose bodies never come: genuine
//! claims are still answered at once.
//!
//! Before, a claim took one of the `--max-in-flight` places before its body was read and kept
//! it until the body came or the request timeout (10 s) passed: heads with `Content-Length: 20`
//! and no body, topped up every 500 ms from sixteen addresses, made every genuine claim answer
//! 503 `overloaded`. Now a claim's body is read under its own deadline before it takes a place,
//! and one address holds a bounded share of the places and of the connections.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use seckill::bench::client::ClaimReply;
use seckill::domain::Outcome;

use super::rss_kib;
use crate::helpers::App;

const HEAD: &str = "POST /v1/campaigns/sale/claims HTTP/1.1\r\nHost: seckill\r\n\
                    Content-Type: application/json\r\nContent-Length: 20\r\n\r\n";

/// Keeps opening connections from `from` that send a claim head and no body, `per_round`
/// every 500 ms, until `stop`; counts the heads sent.
async fn attacker(
    server: SocketAddr,
    from: IpAddr,
    per_round: usize,
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
) {
    let mut held: Vec<TcpStream> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..per_round {
            let Ok(socket) = TcpSocket::new_v4() else {
                break;
            };
            if socket.bind(SocketAddr::new(from, 0)).is_err() {
                break;
            }
            let Ok(Ok(mut s)) =
                tokio::time::timeout(Duration::from_millis(200), socket.connect(server)).await
            else {
                continue;
            };
            if s.write_all(HEAD.as_bytes()).await.is_ok() {
                sent.fetch_add(1, Ordering::Relaxed);
                held.push(s);
            }
        }
        // Keep the newest connections open; the server closes what it refuses.
        if held.len() > 4 * per_round {
            held.drain(..held.len() - 4 * per_round);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// 200 buyers from 127.0.0.1 in rounds of 20 while `addresses` attackers hold heads open:
/// how many were refused, and the slowest answer.
async fn buyers_under_attack(
    app: &App,
    campaign_round: usize,
    addresses: u8,
) -> (usize, Duration, usize) {
    let server: SocketAddr = app
        .client
        .url("")
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..addresses)
        .map(|i| {
            let from = IpAddr::from([127, 0, 0, 2 + i]);
            tokio::spawn(attacker(server, from, 200, stop.clone(), sent.clone()))
        })
        .collect();
    // Let the attack fill whatever it can before the buyers come.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut refused = 0;
    let mut slowest = Duration::ZERO;
    for round in 0..10 {
        let claims = (0..20).map(|i| {
            let c = app.client.clone();
            let user = format!("buyer-{campaign_round}-{round}-{i}");
            async move {
                let start = Instant::now();
                let r = c.claim("sale", &user, 1, None).await.unwrap();
                (r, start.elapsed())
            }
        });
        for (r, took) in futures::future::join_all(claims).await {
            slowest = slowest.max(took);
            match r {
                ClaimReply::Processed(a) => assert_eq!(a.outcome, Outcome::Won),
                ClaimReply::Refused(..) => refused += 1,
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.await.unwrap();
    }
    (refused, slowest, sent.load(Ordering::Relaxed))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn heads_without_bodies_from_one_or_sixteen_addresses_lock_no_buyer_out() {
    let app = App::spawn_with(|c| {
        c.guard.max_in_flight = 512;
        c.guard.max_in_flight_per_ip = 64;
        c.guard.max_connections_per_ip = 128;
        c.guard.share_loopback = true;
    })
    .await;
    app.create(json!({"id": "sale", "stock": 1000})).await;
    for (phase, addresses) in [(0, 1u8), (1, 16)] {
        let (refused, slowest, sent) = buyers_under_attack(&app, phase, addresses).await;
        eprintln!(
            "slow bodies from {addresses} address(es): {sent} heads sent, {refused} of 200 buyers refused, slowest answer {slowest:?}"
        );
        assert_eq!(refused, 0, "{addresses} address(es) locked buyers out");
        assert!(
            slowest < Duration::from_secs(1),
            "{addresses} address(es): a buyer waited {slowest:?}"
        );
    }
    let closed = crate::guards::sample(
        &app.admin_url(),
        "seckill_client_share_refused_total{limit=\"connections\"}",
    )
    .await;
    assert!(
        closed > 0,
        "connections beyond one address's share are refused and counted"
    );
}

/// Claim bodies sent one byte at a time hold at most their own bytes: each chunk is copied
/// and dropped as it comes. Before, every chunk kept the connection's whole read buffer alive
/// (about 4 KiB a byte): 64 connections trickling 81 KiB took a server from 24 to 355 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bodies_sent_a_byte_at_a_time_hold_only_their_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = crate::process::Proc::start(dir.path());
    let pid = p.child.id();
    let addr = p.url.trim_start_matches("http://").to_owned();
    let before = rss_kib(pid);
    let head = "POST /v1/campaigns/sale/claims HTTP/1.1\r\nHost: seckill\r\n\
                Content-Type: application/json\r\nContent-Length: 16384\r\n\r\n";
    let sent = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let trickles: Vec<_> = (0..64)
        .map(|_| {
            let (addr, sent) = (addr.clone(), sent.clone());
            tokio::spawn(async move {
                let mut s = TcpStream::connect(&addr).await.unwrap();
                s.set_nodelay(true).unwrap();
                s.write_all(head.as_bytes()).await.unwrap();
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    if s.write_all(b" ").await.is_err() {
                        return;
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_micros(500)).await;
                }
            })
        })
        .collect();
    let watch = {
        let peak = peak.clone();
        tokio::spawn(async move {
            for _ in 0..30 {
                peak.fetch_max(rss_kib(pid) as usize, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    for t in trickles {
        t.await.unwrap();
    }
    watch.await.unwrap();
    let grew =
        peak.load(Ordering::Relaxed) as u64 - before.min(peak.load(Ordering::Relaxed) as u64);
    eprintln!(
        "64 connections trickled {} bytes one at a time: RSS {before} KiB -> peak {} KiB",
        sent.load(Ordering::Relaxed),
        peak.load(Ordering::Relaxed)
    );
    assert!(
        grew < 48 * 1024,
        "RSS grew {grew} KiB for {} bytes of body",
        sent.load(Ordering::Relaxed)
    );
}
