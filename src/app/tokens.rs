//! The instance's credentials (`crate::http::auth`): `--admin-token`, every `--token`
//! (`SECKILL_TOKENS`) and the config file's `token` list. The file's list is read again on
//! SIGHUP and whenever the file changes, and the valid set is swapped at once, so a secret
//! is rotated without a restart: add the new token, move the clients, remove the old one. A
//! file that fails to parse leaves the set as it was and says why.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::ServeConfig;
use crate::http::auth::{Credentials, Scope, Token};
use crate::supervise::Supervisor;

/// How often the config file's modification time is looked at.
const WATCH_EVERY: Duration = Duration::from_secs(2);

/// The tokens fixed for the process's life: `--admin-token` (named `admin`) and `--token`.
pub fn fixed(cfg: &ServeConfig, admin: Option<&str>) -> anyhow::Result<Vec<Token>> {
    let mut out = Vec::new();
    if let Some(secret) = admin {
        out.push(Token::new("admin", vec![Scope::Admin], secret));
    }
    for spec in &cfg.tokens {
        out.push(Token::parse(spec.expose()).map_err(|e| anyhow::anyhow!("--token: {e}"))?);
    }
    Ok(out)
}

/// The config file's tokens.
pub fn from_file(path: &Path) -> anyhow::Result<Vec<Token>> {
    crate::config::file::tokens(path)?
        .iter()
        .map(|spec| {
            Token::parse(spec).map_err(|e| anyhow::anyhow!("{} token: {e}", path.display()))
        })
        .collect()
}

/// Whether `cfg` names any token (`--token`, the config file's list).
pub fn configured(cfg: &ServeConfig) -> anyhow::Result<bool> {
    Ok(!cfg.tokens.is_empty()
        || match &cfg.config {
            Some(path) => !crate::config::file::tokens(path)?.is_empty(),
            None => false,
        })
}

/// Every token of `cfg`: the fixed ones and the config file's.
pub fn all(cfg: &ServeConfig, admin: Option<&str>) -> anyhow::Result<Vec<Token>> {
    let mut tokens = fixed(cfg, admin)?;
    if let Some(path) = &cfg.config {
        tokens.extend(from_file(path)?);
    }
    Ok(tokens)
}

/// Re-reads the config file's tokens into `creds` on SIGHUP and when the file changes.
pub fn watch(supervisor: &Arc<Supervisor>, path: PathBuf, fixed: Vec<Token>, creds: Credentials) {
    supervisor.spawn("token-reload", move |_| {
        let (path, fixed, creds) = (path.clone(), fixed.clone(), creds.clone());
        async move {
            let mut hup = hangups()?;
            let mut seen = modified(&path);
            loop {
                let signalled = tokio::select! {
                    _ = hup.recv() => true,
                    _ = tokio::time::sleep(WATCH_EVERY) => false,
                };
                let now = modified(&path);
                if !signalled && now == seen {
                    continue;
                }
                seen = now;
                reload(&path, &fixed, &creds, signalled);
            }
        }
    });
}

fn reload(path: &Path, fixed: &[Token], creds: &Credentials, signalled: bool) {
    let why = if signalled { "SIGHUP" } else { "file changed" };
    let mut tokens = fixed.to_vec();
    match from_file(path) {
        Ok(more) => tokens.extend(more),
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), why, "tokens not reloaded; the valid ones are unchanged");
            return;
        }
    }
    let names: Vec<String> = tokens.iter().map(|t| t.name.to_string()).collect();
    match creds.replace(tokens) {
        Ok(()) => tracing::info!(?names, why, "tokens reloaded"),
        Err(e) => {
            tracing::error!(error = %e, why, "tokens not reloaded; the valid ones are unchanged")
        }
    }
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

#[cfg(unix)]
fn hangups() -> anyhow::Result<tokio::signal::unix::Signal> {
    Ok(tokio::signal::unix::signal(
        tokio::signal::unix::SignalKind::hangup(),
    )?)
}
