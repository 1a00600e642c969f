//! How a throwaway redis-server, Sentinel, Cluster node and PostgreSQL cluster are started:
//! the command lines, config files and `initdb` the integration tests and the fault campaign
//! share. Each returns a [`Spec`] that [`Proc`](super::process::Proc) starts, kills and starts
//! again on the same port and directory; what runs around them (readiness, supervision,
//! faults) stays with the caller.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use super::process::Spec;
use super::{find_binary, postgres_user};

/// A redis-server on `port` with its data in `dir`: loopback only, no RDB snapshots unless
/// `extra` asks for them, then `extra` (persistence, replication, Cluster flags).
pub fn redis_spec(
    name: &str,
    dir: &Path,
    port: u16,
    extra: &[&str],
    log: PathBuf,
) -> anyhow::Result<Spec> {
    std::fs::create_dir_all(dir)?;
    let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
        .into_iter()
        .chain(["--save", "", "--protected-mode", "no", "--dir"])
        .map(str::to_owned)
        .collect();
    args.push(dir.display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    redis_server(name, args, log)
}

/// A redis-server (or Sentinel, with `--sentinel` in `extra`) run from its own config file,
/// `<root>/<name>/<file>` holding `conf` (`{dir}` replaced by that directory), which it may
/// rewrite (a node's role after a failover, a Sentinel's view, a Cluster node's `nodes.conf`
/// beside it), as under a supervisor.
pub fn conf_spec(
    root: &Path,
    name: &str,
    (file, conf): (&str, String),
    extra: &[&str],
    log: PathBuf,
) -> anyhow::Result<Spec> {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(file);
    std::fs::write(&file, conf.replace("{dir}", &dir.display().to_string()))?;
    let mut args = vec![file.display().to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    redis_server(name, args, log)
}

/// redis-server with `args`, logging to `log`.
fn redis_server(name: &str, args: Vec<String>, log: PathBuf) -> anyhow::Result<Spec> {
    Ok(Spec {
        name: name.to_owned(),
        program: find_binary("redis-server")?,
        args,
        env: vec![],
        user: None,
        log,
    })
}

/// `redis-cli --cluster create` over `ports`, with `replicas` replicas per master.
pub fn cluster_create(ports: &[u16], replicas: u8) -> anyhow::Result<Command> {
    let mut cmd = Command::new(find_binary("redis-cli")?);
    cmd.args(["--cluster", "create"]);
    for p in ports {
        cmd.arg(format!("127.0.0.1:{p}"));
    }
    cmd.args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"]);
    Ok(cmd)
}

/// A new PostgreSQL cluster in `<dir>/data` (`initdb`, trust authentication, user
/// `postgres`), owned by the `postgres` user when this process is root; that user then.
pub fn postgres_init(dir: &Path) -> anyhow::Result<Option<(u32, u32)>> {
    let user = postgres_user()?;
    std::fs::create_dir_all(dir)?;
    if let Some((uid, gid)) = user {
        std::os::unix::fs::chown(dir, Some(uid), Some(gid))?;
    }
    let mut initdb = Command::new(find_binary("initdb")?);
    initdb
        .args([
            "-U", "postgres", "-A", "trust", "-N", "-E", "UTF8", "--locale", "C", "-D",
        ])
        .arg(dir.join("data"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some((uid, gid)) = user {
        use std::os::unix::process::CommandExt;
        initdb.uid(uid).gid(gid);
    }
    let out = initdb.output().context("run initdb")?;
    anyhow::ensure!(
        out.status.success(),
        "initdb failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(user)
}

/// The `postgres` server of a cluster [`postgres_init`] made in `dir`, on `port` (loopback,
/// its socket in `dir`), with `settings` (`name=value`) and its log in `dir/postgres.log`.
/// fsync is off in every caller: tests and the fault campaign kill processes, never the
/// machine, so the page cache survives every fault they inject.
pub fn postgres_spec(
    dir: &Path,
    port: u16,
    user: Option<(u32, u32)>,
    settings: &[&str],
) -> anyhow::Result<Spec> {
    let mut args: Vec<String> = vec![
        "-D".into(),
        dir.join("data").display().to_string(),
        "-p".into(),
        port.to_string(),
        "-k".into(),
        dir.display().to_string(),
    ];
    for s in ["listen_addresses=127.0.0.1", "fsync=off"]
        .iter()
        .chain(settings)
    {
        args.extend(["-c".to_owned(), s.to_string()]);
    }
    let log = dir.join("postgres.log");
    if let Some((uid, gid)) = user {
        std::fs::File::create(&log)?;
        std::os::unix::fs::chown(&log, Some(uid), Some(gid))?;
    }
    Ok(Spec {
        name: "postgres".into(),
        program: find_binary("postgres")?,
        args,
        env: vec![],
        user,
        log,
    })
}
