//! Test helpers: start a deployment on a free port with fresh storage, talk to it.

use reqwest::Method;
use seckill::bench::client::{ClaimReply, Client};
use seckill::config::ServeConfig;
use seckill::domain::ClaimAnswer;
use serde_json::Value;

pub const TOKEN: &str = "test-admin-token";

/// Which deployment a conformance test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deploy {
    Embedded,
    /// Redis gate (one fresh redis-server) + PostgreSQL ledger (one fresh database).
    ScaleOut,
    /// The same on a fresh three-master Redis Cluster.
    Cluster,
}

/// A running deployment and a client for it.
pub struct App {
    pub client: Client,
    server: Option<seckill::app::App>,
    _dir: tempfile::TempDir,
    /// Scale-out: the Redis URLs and the PostgreSQL database URL of the deployment.
    pub redis: Vec<String>,
    pub postgres: Option<String>,
    /// Servers the deployment runs on (scale-out), stopped when the app is dropped.
    _infra: Option<Box<dyn std::any::Any + Send + Sync>>,
    /// The settings the server was started with, to restart it on the same data.
    cfg: ServeConfig,
}

impl App {
    pub async fn spawn(deploy: Deploy) -> App {
        App::spawn_tuned(deploy, |_| {}).await
    }

    /// [`App::spawn`] with the `serve` settings adjusted by `tune`.
    pub async fn spawn_tuned(deploy: Deploy, tune: impl FnOnce(&mut ServeConfig)) -> App {
        match deploy {
            Deploy::Embedded => App::spawn_with(tune).await,
            Deploy::ScaleOut | Deploy::Cluster => {
                let (urls, infra): (Vec<String>, Box<dyn std::any::Any + Send + Sync>) =
                    if deploy == Deploy::Cluster {
                        let c = crate::servers::RedisCluster::start();
                        (c.urls(), Box::new(c))
                    } else {
                        let r = crate::servers::RedisServer::start(&[]);
                        (vec![r.url()], Box::new(r))
                    };
                let postgres = crate::servers::pg().fresh_db().await;
                let dir = tempfile::tempdir().expect("temp dir");
                let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
                cfg.scale.redis = urls.clone();
                cfg.scale.postgres = Some(postgres.clone());
                cfg.scale.pipeline.pg_connections = 4;
                tune(&mut cfg);
                let server = seckill::app::App::build(cfg.clone())
                    .await
                    .expect("scale-out server starts");
                App {
                    client: Client::new(&server.url(), TOKEN),
                    server: Some(server),
                    _dir: dir,
                    redis: urls,
                    postgres: Some(postgres),
                    _infra: Some(infra),
                    cfg,
                }
            }
        }
    }

    /// An embedded deployment with its `serve` settings adjusted by `tune` (guard tests).
    pub async fn spawn_with(tune: impl FnOnce(&mut ServeConfig)) -> App {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = ServeConfig::ephemeral(dir.path().into(), TOKEN);
        tune(&mut cfg);
        let server = seckill::app::App::build(cfg.clone())
            .await
            .expect("embedded server starts");
        App {
            client: Client::new(&server.url(), TOKEN),
            server: Some(server),
            _dir: dir,
            redis: Vec::new(),
            postgres: None,
            _infra: None,
            cfg,
        }
    }

    /// Base URL of the admin routes (the admin listener when there is one).
    pub fn admin_url(&self) -> String {
        self.server.as_ref().expect("running").admin_url()
    }

    /// Waits until every `won` answered so far is visible in the ledger: a no-op when the
    /// deployment commits before answering, else until `/healthz` reports no pipeline lag.
    pub async fn settle(&self) {
        settle_url(&self.client).await
    }

    pub async fn create(&self, spec: Value) -> seckill::domain::CampaignView {
        self.client
            .create_campaign(&spec)
            .await
            .expect("campaign created")
    }

    pub async fn claim(&self, campaign: &str, user: &str, qty: u64) -> ClaimAnswer {
        self.claim_with_key(campaign, user, qty, None).await
    }

    pub async fn claim_with_key(
        &self,
        campaign: &str,
        user: &str,
        qty: u64,
        key: Option<&str>,
    ) -> ClaimAnswer {
        match self
            .client
            .claim(campaign, user, qty, key)
            .await
            .expect("claim request")
        {
            ClaimReply::Processed(a) => a,
            ClaimReply::Refused(s, body) => panic!("claim refused with {s}: {body}"),
        }
    }

    pub async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let (s, v) = self
            .client
            .admin(method, path, body.as_ref())
            .await
            .expect("admin request");
        (s.as_u16(), v)
    }

    /// An admin request expected to be refused: its status and error code.
    pub async fn refusal(&self, method: Method, path: &str, body: Option<Value>) -> (u16, String) {
        let (s, v) = self.admin(method, path, body).await;
        (
            s,
            v["error"]["code"].as_str().unwrap_or("<none>").to_owned(),
        )
    }

    /// The data directory of an embedded deployment.
    pub fn data_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// Stops the server gracefully and starts it again on the same data (same directory, or
    /// same Redis and PostgreSQL), on a new port.
    pub async fn restart(&mut self) {
        self.stop_keep().await;
        self.start_again().await;
    }

    /// Stops the server gracefully, keeping its data for [`App::start_again`].
    pub async fn stop_keep(&mut self) {
        if let Some(s) = self.server.take() {
            s.stop().await.expect("clean stop");
        }
    }

    /// Starts the server again on the data of the one [`App::stop_keep`] stopped.
    pub async fn start_again(&mut self) {
        let server = seckill::app::App::build(self.cfg.clone())
            .await
            .expect("server restarts");
        self.client = Client::new(&server.url(), TOKEN);
        self.server = Some(server);
    }

    /// The address of the listener serving the admin routes, for raw-socket tests.
    pub fn admin_addr(&self) -> std::net::SocketAddr {
        let s = self.server.as_ref().expect("running");
        s.admin_addr.unwrap_or(s.addr)
    }

    pub async fn stop(mut self) {
        if let Some(s) = self.server.take() {
            s.stop().await.expect("clean stop");
        }
    }
}

/// Waits until the deployment behind `client` reports no pipeline lag (or has no pipeline).
pub async fn settle_url(client: &Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let health: Option<Value> = match client.http().get(client.url("/healthz")).send().await {
            Ok(r) => r.json().await.ok(),
            Err(_) => None,
        };
        match health.as_ref().map(|h| h["pipeline_lag"].as_u64()) {
            Some(None) if health.as_ref().is_some_and(|h| h["status"] == "ok") => return,
            Some(Some(0)) => return,
            _ => {}
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the order pipeline did not drain: {health:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Instantiates each listed `async fn name(deploy: Deploy)` once per deployment.
#[macro_export]
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Deploy::Embedded).await
                }
            )*
        }
        mod scale_out {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Deploy::ScaleOut).await
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    super::$name($crate::helpers::Deploy::Cluster).await
                }
            )*
        }
    };
}

/// Holds the SQLite write lock of the ledger in `data` until dropped (or rolled back).
pub async fn hold_ledger(data: &std::path::Path) -> sqlx::SqliteConnection {
    use sqlx::Connection;
    let db = format!("sqlite://{}", data.join("seckill.db").display());
    let mut blocker = sqlx::SqliteConnection::connect(&db).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE")
        .execute(&mut blocker)
        .await
        .unwrap();
    blocker
}

/// `POST /v1/campaigns/{campaign}/queue` for `user`: the status and the body (Null if none).
pub async fn queue_join(c: &Client, campaign: &str, user: &str) -> (reqwest::StatusCode, Value) {
    let r = c
        .http()
        .post(c.url(&format!("/v1/campaigns/{campaign}/queue")))
        .json(&serde_json::json!({"user_id": user}))
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}

/// `GET /v1/campaigns/{campaign}/queue/{user}`: the status and the body (Null if none).
pub async fn queue_read(c: &Client, campaign: &str, user: &str) -> (reqwest::StatusCode, Value) {
    let r = c
        .http()
        .get(c.url(&format!("/v1/campaigns/{campaign}/queue/{user}")))
        .send()
        .await
        .unwrap();
    (r.status(), r.json().await.unwrap_or(Value::Null))
}
