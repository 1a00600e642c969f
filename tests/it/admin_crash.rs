//! Admin operations and a SIGKILL at a random point, on both deployments (real processes; the
//! scale-out one on an AOF Redis that survives it): after the restart the engine equals the
//! ledger, every invariant holds, and retrying every request whose answer was lost — keyed
//! restocks, pauses and resumes, cancels — changes nothing twice.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::Row;

use seckill::bench::client::{ClaimReply, Client};
use seckill::domain::Outcome;

use crate::helpers::{settle_url, TOKEN};
use crate::process::Proc;
use crate::scale_out::procs::Seckill;
use crate::servers::{pg, RedisServer};

/// A request as sent: (path, body, Idempotency-Key).
type Sent = (String, Option<Value>, String);

async fn keyed(
    c: &Client,
    path: &str,
    body: Option<Value>,
    key: &str,
) -> anyhow::Result<(u16, Value)> {
    let mut req = c
        .http()
        .post(c.url(path))
        .bearer_auth(TOKEN)
        .header("idempotency-key", key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.json().await.unwrap_or(Value::Null)))
}

/// A deployment run as real processes that can be SIGKILLed and started again on its data.
enum Target {
    Embedded {
        dir: tempfile::TempDir,
        proc: Proc,
    },
    ScaleOut {
        redis: Box<RedisServer>,
        postgres: String,
        proc: Seckill,
    },
}

impl Target {
    async fn start(scale_out: bool) -> Target {
        if !scale_out {
            let dir = tempfile::tempdir().unwrap();
            let proc = Proc::start(dir.path());
            return Target::Embedded { dir, proc };
        }
        let redis = Box::new(RedisServer::start_aof());
        let postgres = pg().fresh_db().await;
        let proc = Seckill::serve(&[redis.url()], &postgres, &[]);
        Target::ScaleOut {
            redis,
            postgres,
            proc,
        }
    }

    fn client(&self) -> Client {
        match self {
            Target::Embedded { proc, .. } => proc.client(),
            Target::ScaleOut { proc, .. } => proc.client(),
        }
    }

    fn kill(&mut self) {
        match self {
            Target::Embedded { proc, .. } => {
                proc.signal(libc::SIGKILL);
                let _ = proc.child.wait();
            }
            Target::ScaleOut { proc, .. } => proc.sigkill(),
        }
    }

    fn restart(&mut self) {
        match self {
            Target::Embedded { dir, proc } => *proc = Proc::start(dir.path()),
            Target::ScaleOut {
                redis,
                postgres,
                proc,
            } => *proc = Seckill::serve(&[redis.url()], postgres, &[]),
        }
    }

    /// (total, remaining, status) of each campaign, from the ledger's database.
    async fn ledger(&self) -> BTreeMap<String, (u64, u64, String)> {
        const SQL: &str = "SELECT c.id, c.total, c.status, CAST(COALESCE((SELECT SUM(o.qty) \
            FROM orders o WHERE o.campaign_id = c.id AND o.state = 'active'), 0) AS BIGINT) \
            FROM campaigns c ORDER BY c.id";
        let rows: Vec<(String, i64, String, i64)> = match self {
            Target::Embedded { dir, .. } => {
                let url = format!(
                    "sqlite://{}?mode=ro",
                    dir.path().join("seckill.db").display()
                );
                let pool = sqlx::SqlitePool::connect(&url).await.unwrap();
                let rows = sqlx::query(SQL).fetch_all(&pool).await.unwrap();
                pool.close().await;
                rows.iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                    .collect()
            }
            Target::ScaleOut { postgres, .. } => {
                settle_url(&self.client()).await;
                let pool = sqlx::PgPool::connect(postgres).await.unwrap();
                let rows = sqlx::query(SQL).fetch_all(&pool).await.unwrap();
                pool.close().await;
                rows.iter()
                    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                    .collect()
            }
        };
        rows.into_iter()
            .map(|(id, total, status, active)| {
                assert!(active <= total, "{id}: oversold");
                (id, (total as u64, (total - active) as u64, status))
            })
            .collect()
    }
}

async fn engine(c: &Client, ids: &[&str]) -> BTreeMap<String, (u64, u64, String)> {
    let mut out = BTreeMap::new();
    for id in ids {
        let v = c.campaign(id).await.unwrap();
        out.insert(
            id.to_string(),
            (v.total, v.remaining, v.status.as_str().to_owned()),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn embedded_admin_operations_survive_sigkill_and_keyed_retries() {
    sigkill_during_admin_operations(false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scale_out_admin_operations_survive_sigkill_and_keyed_retries() {
    sigkill_during_admin_operations(true).await
}

async fn sigkill_during_admin_operations(scale_out: bool) {
    let mut target = Target::start(scale_out).await;
    let c = target.client();
    c.create_campaign(&json!({"id": "kr", "stock": 1}))
        .await
        .unwrap();
    c.create_campaign(&json!({"id": "kc", "stock": 400}))
        .await
        .unwrap();
    let mut orders = Vec::new();
    for i in 0..400 {
        let ClaimReply::Processed(a) = c.claim("kc", &format!("u{i}"), 1, None).await.unwrap()
        else {
            panic!("refused")
        };
        assert_eq!(a.outcome, Outcome::Won);
        orders.push(a.order_id.unwrap());
    }
    // Every request sent, whether or not its answer arrived: (path, body, key).
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let mut next = 0usize;
    settle_url(&c).await;
    for round in 0..6 {
        let c = target.client();
        let load = {
            let (sent, orders) = (sent.clone(), orders.clone());
            tokio::spawn(async move {
                for i in next.. {
                    let key = format!("k{i}");
                    let (path, body) = match i % 3 {
                        0 => (
                            "/v1/campaigns/kr/restock".to_owned(),
                            Some(json!({"units": 1})),
                        ),
                        1 => (
                            format!("/v1/orders/{}/cancel", orders[i / 3 % orders.len()]),
                            None,
                        ),
                        _ if i % 2 == 0 => ("/v1/campaigns/kr/pause".to_owned(), None),
                        _ => ("/v1/campaigns/kr/resume".to_owned(), None),
                    };
                    sent.lock().push((path.clone(), body.clone(), key.clone()));
                    if keyed(&c, &path, body, &key).await.is_err() {
                        return;
                    }
                }
            })
        };
        let wait = rand::thread_rng().gen_range(20..250);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        target.kill();
        let _ = load.await;
        next = sent.lock().len() + 1;
        target.restart();
        let c = target.client();
        let ids = ["kc", "kr"];
        let ledger = target.ledger().await;
        assert_eq!(engine(&c, &ids).await, ledger, "round {round}");
        // Retry everything with its key: each answers, none applies twice.
        let all = sent.lock().clone();
        for (path, body, key) in &all {
            let (s, v) = keyed(&c, path, body.clone(), key).await.unwrap();
            assert_eq!(s, 200, "{path} {key}: {v}");
        }
        let restocks = all.iter().filter(|(p, ..)| p.ends_with("/restock")).count() as u64;
        let view = engine(&c, &ids).await;
        assert_eq!(
            view["kr"].0,
            1 + restocks,
            "round {round}: a restock applied twice or never"
        );
        assert_eq!(view, target.ledger().await, "round {round} after retries");
        let cancelled: std::collections::HashSet<_> = all
            .iter()
            .filter(|(p, ..)| p.ends_with("/cancel"))
            .map(|(p, ..)| p.clone())
            .collect();
        assert_eq!(
            view["kc"].1,
            cancelled.len() as u64,
            "round {round}: a cancelled unit is stuck"
        );
        eprintln!(
            "round {round}: killed after {wait} ms, {} requests so far",
            all.len()
        );
    }
    let (s, _) = target
        .client()
        .admin(Method::POST, "/v1/campaigns/kr/resume", None)
        .await
        .unwrap();
    assert_eq!(s, 200);
}
