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
    parse(crate::config::file::tokens(path)?, path)
}

fn parse(specs: Vec<String>, path: &Path) -> anyhow::Result<Vec<Token>> {
    specs
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

/// Re-reads the config file's tokens into `creds` on SIGHUP and when the file changes. The
/// SIGHUP handler is installed even without a config file, so `systemctl reload` never ends
/// the process (SIGHUP's default action); it then only says there is nothing to reload.
pub fn watch(
    supervisor: &Arc<Supervisor>,
    path: Option<PathBuf>,
    fixed: Vec<Token>,
    creds: Credentials,
) -> anyhow::Result<()> {
    // Installed now, before the server answers: a reload during start-up is not fatal.
    let hup = std::sync::Arc::new(tokio::sync::Mutex::new(hangups()?));
    supervisor.spawn("token-reload", move |_| {
        let (path, fixed, creds, hup) = (path.clone(), fixed.clone(), creds.clone(), hup.clone());
        async move {
            let mut hup = hup.lock().await;
            let Some(path) = path else {
                loop {
                    hup.recv().await;
                    tracing::info!("SIGHUP: no --config file, nothing to reload");
                }
            };
            let mut seen = modified(&path);
            loop {
                let signalled = tokio::select! {
                    _ = hup.recv() => true,
                    _ = tokio::time::sleep(WATCH_EVERY) => false,
                };
                let before = modified(&path);
                if !signalled && before == seen {
                    continue;
                }
                reload(&path, &fixed, &creds, signalled);
                // A file that changed while it was read is read again at the next look.
                seen = if modified(&path) == before {
                    before
                } else {
                    None
                };
            }
        }
    });
    Ok(())
}

/// Reloads; a file refused leaves the valid set unchanged.
fn reload(path: &Path, fixed: &[Token], creds: &Credentials, signalled: bool) {
    let why = if signalled { "SIGHUP" } else { "file changed" };
    let mut tokens = fixed.to_vec();
    match crate::config::file::reloaded_tokens(path).and_then(|specs| parse(specs, path)) {
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
