//! Criterion micro-benchmarks of the engines' claim step.
//!
//! - `decide/*`: the pure atomic step [`CampaignState::decide`] (what the per-campaign mutex
//!   protects) on its three hot paths: a win, a sold-out rejection, a per-user rejection.
//! - `embedded/*`: a full claim through the embedded deployment (`Backend::claim`: campaign
//!   lookup, lock, decide, SQLite group commit, answer), one at a time (latency of one durable
//!   claim, dominated by the commit) and 256 in flight (what group commit buys).
//!
//! - `redis/*`: the scale-out claim step: `claim.lua` by SHA through the engine's script layer
//!   (decide, decrement, record the user, XADD the order) on a throwaway `redis-server` this
//!   bench starts on a free port without persistence; one at a time (one round trip) and 50 in
//!   flight on the engine's multiplexed connection (the `redis-benchmark -c 50` shape).
//!   `redis/batch_*`: the batched path, `claims.lua` deciding 50 and 128 claims in one call
//!   (`Scripts::claim_batch`, what the engine's per-campaign batcher sends), and 128 claims
//!   through the batcher itself from 128 tasks at once (`Batcher::claim`).
//!   Needs `redis-server` on PATH (`apt-get install redis-server`); panics with that hint.
//! - `claim_body/*`: a storm's claim body decoded by the claim route's hand-written parser
//!   (`parse_claim_body`) and by the generic JSON decoder it falls back to.
//! - `room_ticket/*`: what a waiting room adds to each claim of its campaign: one ticket check
//!   (an HMAC-SHA256 and a constant-time compare, `room::ticket::Tickets::check`), valid and
//!   forged; compare with `decide/*` and `claim_body/*` of the same run.
//!
//! Run: `cargo bench --bench claim_step` (add `-- decide` to run one group).

use std::sync::Arc;

use chrono::Utc;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use futures::future::join_all;
use seckill::domain::{ClaimRequest, Kind, NewCampaign, Status, Supply};
use seckill::engine::backend::Backend;
use seckill::engine::scale_out::{
    BatchClaim, BatchOptions, Batcher, RedisConn, RedisTarget, Scripts,
};
use seckill::engine::state::{CampaignDef, CampaignState};
use seckill::engine::{Embedded, EmbeddedOptions};

fn def(limit: u64) -> CampaignDef {
    CampaignDef {
        id: "bench".into(),
        kind: Kind::Stock,
        per_user_limit: limit,
        starts_at: None,
        ends_at: None,
        hold_seconds: None,
        waiting_room: None,
    }
}

fn users(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("u{i}")).collect()
}

fn decide(c: &mut Criterion) {
    let mut g = c.benchmark_group("decide");
    let names = users(1 << 16);
    let now = Utc::now();

    // Wins: fresh users, stock left; the state grows by one user per claim, as in a sale.
    // 1024 claims per iteration so building a fresh state stays out of the measurement.
    g.throughput(Throughput::Elements(1024));
    g.bench_function("won_x1024", |b| {
        b.iter_batched_ref(
            || CampaignState::new(def(1), u64::MAX / 2, vec![], Status::Active),
            |s| {
                for u in &names[..1024] {
                    std::hint::black_box(s.decide(u, 1, now));
                }
            },
            BatchSize::LargeInput,
        )
    });
    g.throughput(Throughput::Elements(1));
    let mut sold_out = CampaignState::new(def(1), 1, vec![], Status::Active);
    sold_out.decide("first", 1, now);
    let mut i = 0;
    g.bench_function("sold_out", |b| {
        b.iter(|| {
            i = (i + 1) % names.len();
            std::hint::black_box(sold_out.decide(&names[i], 1, now))
        })
    });
    let mut claimed = CampaignState::new(def(1), u64::MAX / 2, vec![], Status::Active);
    for u in &names[..4096] {
        claimed.decide(u, 1, now);
    }
    g.bench_function("already_claimed", |b| {
        b.iter(|| {
            i = (i + 1) % 4096;
            std::hint::black_box(claimed.decide(&names[i], 1, now))
        })
    });
    g.finish();
}

fn embedded(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let dir = tempfile::tempdir().expect("temp dir");
    let engine: Arc<Embedded> = rt.block_on(async {
        let e = Embedded::open(EmbeddedOptions::new(dir.path()))
            .await
            .expect("embedded engine opens");
        e.create_campaign(
            NewCampaign {
                id: "hot".into(),
                supply: Supply::Stock(1_000_000_000),
                per_user_limit: 1,
                starts_at: None,
                ends_at: None,
                hold_seconds: None,
                waiting_room: None,
            },
            None,
        )
        .await
        .expect("campaign created");
        e
    });
    let next = std::sync::atomic::AtomicU64::new(0);
    let claim = |engine: Arc<Embedded>| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        async move {
            let req = ClaimRequest {
                user_id: format!("u{n}"),
                qty: 1,
            };
            engine.claim("hot", req, None).await.expect("claim answers")
        }
    };
    let mut g = c.benchmark_group("embedded");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1));
    g.bench_function("claim_durable_one_at_a_time", |b| {
        b.to_async(&rt).iter(|| claim(engine.clone()))
    });
    g.throughput(Throughput::Elements(256));
    g.bench_function("claim_durable_256_in_flight", |b| {
        b.to_async(&rt)
            .iter(|| join_all((0..256).map(|_| claim(engine.clone()))))
    });
    g.finish();
    rt.block_on(engine.shutdown());
}

/// A `redis-server` without persistence on a free loopback port, killed on drop.
struct ThrowawayRedis {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl ThrowawayRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is needed for the redis benches: apt-get install redis-server");
        let server = Self {
            child,
            port,
            _dir: dir,
        };
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return server;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        drop(server);
        panic!("redis-server did not start on port {port}");
    }
}

impl Drop for ThrowawayRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn redis(c: &mut Criterion) {
    let server = ThrowawayRedis::start();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let scripts = Arc::new(Scripts::default());
    let conn = rt.block_on(async {
        let target = RedisTarget {
            urls: vec![format!("redis://127.0.0.1:{}", server.port)],
            cluster: false,
            sentinel_master: None,
        };
        let mut conn = RedisConn::connect(&target).await.expect("connects");
        scripts.load(&mut conn).await.expect("scripts load");
        let hot = CampaignState::new(def(1), 1_000_000_000, vec![], Status::Active);
        let installed = scripts.install(&mut conn, &hot, 1, &[]).await;
        assert!(installed.expect("install answers"), "campaign installed");
        conn
    });
    let next = std::sync::atomic::AtomicU64::new(0);
    let claim = || {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (scripts, mut conn) = (scripts.clone(), conn.clone());
        async move {
            let user = format!("u{n}");
            let limits = seckill::engine::IdemLimits::default();
            let answer = scripts
                .claim(&mut conn, "bench", &user, 1, None, (60, &limits))
                .await;
            std::hint::black_box(answer.expect("claim answers"))
        }
    };
    let mut g = c.benchmark_group("redis");
    g.throughput(Throughput::Elements(1));
    g.bench_function("claim_one_at_a_time", |b| b.to_async(&rt).iter(&claim));
    g.throughput(Throughput::Elements(50));
    g.bench_function("claim_50_in_flight", |b| {
        b.to_async(&rt).iter(|| join_all((0..50).map(|_| claim())))
    });
    let batch = |size: u64| {
        let first = next.fetch_add(size, std::sync::atomic::Ordering::Relaxed);
        let (scripts, mut conn) = (scripts.clone(), conn.clone());
        async move {
            let users: Vec<String> = (first..first + size).map(|n| format!("u{n}")).collect();
            let claims: Vec<BatchClaim> = users
                .iter()
                .map(|user| BatchClaim {
                    user,
                    qty: 1,
                    key: None,
                })
                .collect();
            let limits = seckill::engine::IdemLimits::default();
            let answers = scripts
                .claim_batch(&mut conn, "bench", &claims, (60, &limits), "0")
                .await;
            std::hint::black_box(answers.expect("batch answers"))
        }
    };
    for size in [50, 128] {
        g.throughput(Throughput::Elements(size));
        g.bench_function(format!("batch_{size}_in_one_call"), |b| {
            b.to_async(&rt).iter(|| batch(size))
        });
    }
    let batcher = Batcher::new(
        conn.clone(),
        scripts.clone(),
        BatchOptions::default(),
        (60, seckill::engine::IdemLimits::default()),
        std::time::Duration::from_secs(5),
    );
    g.throughput(Throughput::Elements(128));
    g.bench_function("batcher_128_in_flight", |b| {
        b.to_async(&rt).iter(|| {
            join_all((0..128).map(|_| {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let batcher = batcher.clone();
                async move {
                    let user = format!("u{n}");
                    std::hint::black_box(batcher.claim("bench", &user, 1, None).await)
                }
            }))
        })
    });
    g.finish();
}

/// The claim body of a storm, decoded by the hand-written parser of the claim route and by the
/// generic JSON decoder it falls back to.
fn claim_body(c: &mut Criterion) {
    use seckill::http::claim_body::{parse_claim_body, parse_generic};
    let body = br#"{"user_id":"w1234-56789","qty":1}"#;
    let mut g = c.benchmark_group("claim_body");
    g.throughput(Throughput::Elements(1));
    g.bench_function("hand_written", |b| {
        b.iter(|| parse_claim_body(std::hint::black_box(body)).unwrap())
    });
    g.bench_function("serde", |b| {
        b.iter(|| parse_generic(std::hint::black_box(body)).unwrap())
    });
    g.finish();
}

/// The ticket check a claim on a campaign with a waiting room pays before the engine.
fn room_ticket(c: &mut Criterion) {
    use seckill::room::ticket::Tickets;
    let tickets = Tickets::new([7; 32]);
    let now = Utc::now().timestamp_millis();
    let valid = tickets.sign("flash-2026", "w1234-56789", now + 300_000);
    let forged = tickets.sign("flash-2026", "w1234-56780", now + 300_000);
    let mut g = c.benchmark_group("room_ticket");
    g.throughput(Throughput::Elements(1));
    g.bench_function("check_valid", |b| {
        b.iter(|| {
            tickets
                .check(
                    Some(std::hint::black_box(&valid)),
                    "flash-2026",
                    "w1234-56789",
                    now,
                )
                .unwrap()
        })
    });
    g.bench_function("check_forged", |b| {
        b.iter(|| {
            tickets
                .check(
                    Some(std::hint::black_box(&forged)),
                    "flash-2026",
                    "w1234-56789",
                    now,
                )
                .unwrap_err()
        })
    });
    g.finish();
}

criterion_group!(benches, decide, embedded, redis, claim_body, room_ticket);
criterion_main!(benches);
