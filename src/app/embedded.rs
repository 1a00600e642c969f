//! The embedded deployment's parts: the in-process engine over SQLite in `--data`, and the
//! admin token kept beside it.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;

use super::Parts;
use crate::config::{ServeConfig, SyncMode};
use crate::engine::{Embedded, EmbeddedOptions};
use crate::feed::Feed;
use crate::supervise::Supervisor;

/// Opens the engine `cfg` describes, its background tasks under `supervisor`.
pub async fn assemble(cfg: &ServeConfig, supervisor: &Arc<Supervisor>) -> anyhow::Result<Parts> {
    let admin_token = resolve_admin_token(cfg)?;
    let mut opts = EmbeddedOptions::new(&cfg.data);
    opts.synchronous_full = cfg.sync == SyncMode::Full;
    opts.max_batch = cfg.max_batch;
    opts.idempotency_ttl = std::time::Duration::from_secs(cfg.idempotency_hours * 3600);
    opts.idempotency_limits = cfg.idem_limits();
    opts.supervisor = supervisor.clone();
    if let Some(clock) = &cfg.clock {
        opts.clock = clock.clone();
    }
    let engine = Embedded::open(opts).await?;
    tracing::info!(data = %cfg.data.display(), sync = ?cfg.sync, "embedded deployment ready");
    let feed = Feed::new(engine.ledger(), cfg.events_retention);
    feed.spawn_upkeep(supervisor);
    let rooms = rooms(&engine).await?;
    Ok(Parts {
        rooms,
        feed,
        board: engine.board(),
        limiter: None,
        limits_refresh: None,
        locks: engine.locks(),
        backend: engine,
        admin_token,
    })
}

/// The waiting rooms: in memory, every join in the SQLite ledger first.
async fn rooms(engine: &Arc<Embedded>) -> anyhow::Result<Arc<crate::room::Rooms>> {
    let ledger = engine.ledger();
    let key = ledger.room_key().await.context("reading the room key")?;
    let backend: Arc<dyn crate::engine::backend::Backend> = engine.clone();
    let shuffle = crate::room::Rooms::shuffle_fn(&key);
    let store = crate::room::embedded::EmbeddedRooms::open(ledger, backend.clone(), shuffle)
        .await
        .context("recovering the waiting rooms")?;
    Ok(Arc::new(crate::room::Rooms::new(store, backend, key)))
}

/// The configured token; none when only named tokens (`--token`, the config file's) are
/// given; else the one kept in the data directory, else a new one (printed once).
fn resolve_admin_token(cfg: &ServeConfig) -> anyhow::Result<Option<String>> {
    if let Some(t) = &cfg.admin_token {
        let t = t.expose();
        anyhow::ensure!(!t.trim().is_empty(), "--admin-token must not be empty");
        return Ok(Some(t.to_owned()));
    }
    if super::tokens::configured(cfg)? {
        return Ok(None);
    }
    let file = cfg.data.join("admin-token");
    if let Ok(t) = std::fs::read_to_string(&file) {
        tracing::info!(file = %file.display(), "using the admin token kept in the data directory");
        return Ok(Some(t.trim().to_owned()));
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
    Ok(Some(token))
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
