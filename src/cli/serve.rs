//! `seckill serve`: start the chosen deployment and serve the API until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::sync::{Arc, Weak};
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::config::{ServeConfig, SyncMode};
use crate::engine::backend::Backend;
use crate::engine::{Embedded, EmbeddedOptions};
use crate::guard::Guards;
use crate::http::{self, AdminToken, HttpOptions};

/// A server started in this process.
pub struct Running {
    pub addr: SocketAddr,
    /// The admin listener, when `--admin-listen` is set.
    pub admin_addr: Option<SocketAddr>,
    pub admin_token: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Running {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where the admin routes are: the admin listener, else the public one.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin_addr.unwrap_or(self.addr))
    }

    /// Graceful stop: finish in-flight requests, flush the ledger.
    pub async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        self.task.await.context("server task panicked")?
    }
}

/// Opens the backend, binds the listener and serves in a background task.
pub async fn start(cfg: ServeConfig) -> anyhow::Result<Running> {
    crate::clock::spawn_step_watch();
    let nofile = http::fd_limit::raise();
    let mut limits = cfg.conn.limits();
    limits.max_connections = http::fd_limit::fit(limits.max_connections, nofile.map(|(s, _)| s));
    let backend: Arc<dyn Backend>;
    let admin_token;
    if cfg.scale.selected()? {
        admin_token = cfg
            .admin_token
            .as_ref()
            .map(|t| t.expose().to_owned())
            .filter(|t| !t.trim().is_empty())
            .context("the scale-out deployment needs --admin-token (the same on every instance)")?;
        backend = super::scale::open(&cfg).await?;
    } else {
        admin_token = resolve_admin_token(&cfg)?;
        let mut embedded = EmbeddedOptions::new(&cfg.data);
        embedded.synchronous_full = cfg.sync == SyncMode::Full;
        embedded.max_batch = cfg.max_batch;
        embedded.idempotency_ttl = std::time::Duration::from_secs(cfg.idempotency_hours * 3600);
        embedded.idempotency_limits = cfg.idem_limits();
        if let Some(clock) = &cfg.clock {
            embedded.clock = clock.clone();
        }
        backend = Embedded::open(embedded).await?;
        tracing::info!(data = %cfg.data.display(), sync = ?cfg.sync, "embedded deployment ready");
    }

    let board = backend.stock_board().unwrap_or_default();
    let guards = match backend.rate_limiter() {
        Some(limiter) => Guards::with_limiter(cfg.guard.settings(), board, limiter)?,
        None => Guards::new(cfg.guard.settings(), board)?,
    };
    for (id, limits) in backend.all_limits().await? {
        guards.set_campaign_limits(&id, limits);
    }
    if let Some(every) = backend.limits_refresh() {
        spawn_limits_refresh(backend.clone(), Arc::downgrade(&guards), every);
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
        None
    } else {
        let redlock = crate::lock::redlock::Redlock::new(&cfg.lock_redis)?;
        tracing::info!(
            masters = cfg.lock_redis.len(),
            quorum = redlock.quorum(),
            "lock routes served by Redlock"
        );
        Some(crate::lock::Locks::new(Arc::new(redlock)))
    };
    let http_opts = HttpOptions {
        max_admin_body: cfg.max_admin_body,
        locks,
        fast_claims: !cfg.no_fast_claims,
        ..HttpOptions::default()
    };
    let routers = http::routers(
        backend.clone(),
        AdminToken::new(&admin_token),
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
    Ok(Running {
        addr,
        admin_addr,
        admin_token,
        stop,
        task,
    })
}

/// Re-reads every campaign's limits each `every` until the guards are dropped, so limits set
/// through another instance apply here within `every` (plus one ledger read). Supervised by
/// the backend's supervisor when it has one.
fn spawn_limits_refresh(backend: Arc<dyn Backend>, guards: Weak<Guards>, every: Duration) {
    let sup = backend.supervisor();
    match sup {
        Some(sup) => sup.spawn("limits-refresh", move |_| {
            limits_refresh(backend.clone(), guards.clone(), every)
        }),
        None => drop(tokio::spawn(limits_refresh(backend, guards, every))),
    }
}

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

pub async fn run(cfg: ServeConfig) -> anyhow::Result<ExitCode> {
    let running = start(cfg).await?;
    shutdown_signal().await;
    tracing::info!("shutdown requested");
    running.stop().await?;
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn shutdown_signal() {
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

/// The configured token, else the one kept in the data directory, else a new one (printed once).
fn resolve_admin_token(cfg: &ServeConfig) -> anyhow::Result<String> {
    if let Some(t) = &cfg.admin_token {
        let t = t.expose();
        anyhow::ensure!(!t.trim().is_empty(), "--admin-token must not be empty");
        return Ok(t.to_owned());
    }
    let file = cfg.data.join("admin-token");
    if let Ok(t) = std::fs::read_to_string(&file) {
        tracing::info!(file = %file.display(), "using the admin token kept in the data directory");
        return Ok(t.trim().to_owned());
    }
    let token = hex::encode(rand::random::<[u8; 24]>());
    write_private(&cfg.data, &file, &token)?;
    // Printed once, on stdout, for the operator; logs never carry it.
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "generated admin token (kept in {}): {token}",
        file.display()
    )?;
    Ok(token)
}

fn write_private(dir: &Path, file: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(file)
            .with_context(|| format!("cannot write {}", file.display()))?;
        f.write_all(contents.as_bytes())?;
    }
    #[cfg(not(unix))]
    std::fs::write(file, contents)?;
    Ok(())
}
