//! Assembling a deployment: the one place that turns a [`ServeConfig`] into a running
//! instance.
//!
//! [`App::build`] picks the deployment, has [`embedded`] or [`scale_out`] open its engine and
//! hand over the parts the engine keeps (its stock board, its rate limiter, its lock service),
//! then puts the guards, the listeners and the routers around them. Every background task of
//! the instance (the engine's sweeps and checks, the order pipeline, the limits re-reader)
//! runs under one [`Supervisor`], which [`App::stop`] shuts down last. `seckill serve`,
//! `seckill demo` and the tests that need a whole instance start it here, so what they run
//! is what production runs (the router's own tests and fuzz targets build only the router,
//! `http::router`). `seckill worker`, the pipeline alone, is assembled in
//! [`scale_out::Worker::build`].

pub mod embedded;
pub mod scale_out;
pub mod tokens;

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::ServeConfig;
use crate::engine::backend::Backend;
use crate::feed::Feed;
use crate::guard::rate::RateLimiter;
use crate::guard::soldout::StockBoard;
use crate::guard::Guards;
use crate::http::{self, HttpOptions};
use crate::lock::Locks;
use crate::supervise::Supervisor;

/// What a deployment's engine brings to the instance besides the claim path.
pub struct Parts {
    pub backend: Arc<dyn Backend>,
    /// The stock board the engine keeps current (`guard::soldout`).
    pub board: Arc<StockBoard>,
    /// Rate buckets shared by every instance; `None` keeps them in process.
    pub limiter: Option<Arc<dyn RateLimiter>>,
    /// How often to re-read every campaign's limits written through other instances.
    pub limits_refresh: Option<Duration>,
    /// The lock service of `/v1/locks`.
    pub locks: Locks,
    /// The event feed of `/v1/events`, over the engine's ledger.
    pub feed: Arc<Feed>,
    /// `--admin-token` (or the embedded deployment's generated one), if any.
    pub admin_token: Option<String>,
    /// The waiting rooms, kept where the engine keeps its gate.
    pub rooms: Arc<crate::room::Rooms>,
}

/// An instance serving in this process.
pub struct App {
    pub addr: SocketAddr,
    /// The admin listener, when `--admin-listen` is set.
    pub admin_addr: Option<SocketAddr>,
    pub admin_token: Option<String>,
    supervisor: Arc<Supervisor>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl App {
    /// Opens the deployment `cfg` describes, binds its listeners and serves in the background.
    pub async fn build(cfg: ServeConfig) -> anyhow::Result<App> {
        crate::clock::spawn_step_watch();
        let nofile = http::fd_limit::raise();
        let supervisor = Supervisor::new();
        crate::redis_conn::tls::configure(&cfg.scale.redis_tls)?;
        let parts = if cfg.scale.selected()? {
            scale_out::assemble(&cfg, &supervisor).await?
        } else {
            embedded::assemble(&cfg, &supervisor).await?
        };
        Self::serve(cfg, parts, supervisor, nofile).await
    }

    async fn serve(
        cfg: ServeConfig,
        parts: Parts,
        supervisor: Arc<Supervisor>,
        nofile: Option<(u64, u64)>,
    ) -> anyhow::Result<App> {
        let mut limits = cfg.conn.limits();
        limits.max_connections =
            http::fd_limit::fit(limits.max_connections, nofile.map(|(s, _)| s));
        let backend = parts.backend;
        let guards = match parts.limiter {
            Some(limiter) => Guards::with_limiter(cfg.guard.settings(), parts.board, limiter)?,
            None => Guards::new(cfg.guard.settings(), parts.board)?,
        };
        for (id, limits) in backend.all_limits().await? {
            guards.set_campaign_limits(&id, limits);
        }
        if let Some(every) = parts.limits_refresh {
            let (backend, guards) = (backend.clone(), Arc::downgrade(&guards));
            supervisor.spawn("limits-refresh", move |_| {
                limits_refresh(backend.clone(), guards.clone(), every)
            });
        }
        tracing::info!(settings = ?guards.settings(), "guards ready");
        limits.per_ip = Some(guards.connection_share.clone());

        let listener = TcpListener::bind(cfg.listen)
            .await
            .with_context(|| format!("cannot listen on {}", cfg.listen))?;
        let addr = listener.local_addr()?;
        let admin_listener = match cfg.admin_listen {
            Some(at) => Some(
                TcpListener::bind(at)
                    .await
                    .with_context(|| format!("cannot listen on {at} (--admin-listen)"))?,
            ),
            None => None,
        };
        let admin_addr = admin_listener
            .as_ref()
            .map(|l| l.local_addr())
            .transpose()?;
        let locks = if cfg.lock_redis.is_empty() {
            parts.locks
        } else {
            let redlock = crate::lock::redlock::Redlock::new(&cfg.lock_redis)?;
            tracing::info!(
                masters = cfg.lock_redis.len(),
                quorum = redlock.quorum(),
                "lock routes served by Redlock"
            );
            Locks::new(Arc::new(redlock))
        };
        let delivery = crate::delivery::Delivery::start(
            parts.feed.ledger().clone(),
            parts.feed.clone(),
            cfg.delivery.clone(),
            &supervisor,
        )
        .await
        .context("starting event delivery")?;
        let http_opts = HttpOptions {
            max_admin_body: cfg.max_admin_body,
            locks: Some(locks),
            feed: Some(parts.feed),
            delivery: Some(delivery),
            rooms: Some(parts.rooms),
            fast_claims: !cfg.no_fast_claims,
            ..HttpOptions::default()
        };
        let fixed = tokens::fixed(&cfg, parts.admin_token.as_deref())?;
        let mut all = fixed.clone();
        if let Some(path) = &cfg.config {
            all.extend(tokens::from_file(path)?);
        }
        let credentials =
            http::Credentials::new(all).map_err(|e| anyhow::anyhow!("tokens: {e}"))?;
        tokens::watch(&supervisor, cfg.config.clone(), fixed, credentials.clone())?;
        let routers = http::routers(
            backend.clone(),
            credentials,
            &http_opts,
            guards,
            admin_listener.is_some(),
        );
        let admin = admin_listener.zip(routers.admin);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(http::serve_all(
            listener,
            routers.public,
            routers.fast,
            admin,
            backend,
            limits,
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(App {
            addr,
            admin_addr,
            admin_token: parts.admin_token,
            supervisor,
            stop,
            task,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the admin routes are: the admin listener, else the public one.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr.unwrap_or(self.addr))
    }

    /// Graceful stop: finish in-flight requests, flush the ledger, then stop every
    /// background task.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        let served = self.task.await.context("server task panicked")?;
        self.supervisor.shutdown().await;
        served
    }
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing a SIGTERM handler cannot fail on unix");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

/// Re-reads every campaign's limits each `every` until the guards are dropped, so limits set
/// through another instance apply here within `every` (plus one ledger read).
async fn limits_refresh(
    backend: Arc<dyn Backend>,
    guards: Weak<Guards>,
    every: Duration,
) -> anyhow::Result<()> {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(guards) = guards.upgrade() else {
            return Ok(());
        };
        match backend.all_limits().await {
            Ok(all) => guards.replace_campaign_limits(all),
            Err(e) => tracing::warn!(error = %e, "re-reading campaign rate limits failed"),
        }
        match backend.campaign_ids().await {
            Ok(Some(ids)) => guards.board.set_known(ids),
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "re-reading campaign ids failed"),
        }
    }
}
