//! TLS to Redis: a `rediss://` URL connects over TLS (rustls), checked against the system's
//! trust store, or against `--redis-ca-file` when the service's CA is a private one (as
//! managed Redis services often use), with a client certificate when the server asks for one
//! (`--redis-client-cert` and `--redis-client-key`).
//!
//! The files are read once at start ([`configure`]) and apply to every Redis connection of
//! the process — the gate, the pipeline, Sentinel, Cluster, the stock channel and Redlock —
//! so each connection site builds its client here ([`client`]) instead of with
//! `redis::Client::open`. A certificate that does not verify fails the connection with the
//! reason rustls gives (`invalid peer certificate: UnknownIssuer`, a name mismatch…), which
//! the start-up error carries.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::Context;
use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, TlsCertificates};

/// The TLS files of the Redis connections (flags of `serve` and `worker`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RedisTlsArgs {
    /// PEM file of the CA that signed the Redis servers' certificates (`rediss://` URLs);
    /// unset: the system's trust store.
    #[arg(long, env = "SECKILL_REDIS_CA_FILE")]
    pub redis_ca_file: Option<PathBuf>,
    /// PEM client certificate for Redis servers that require one (with --redis-client-key).
    #[arg(long, env = "SECKILL_REDIS_CLIENT_CERT", requires = "redis_client_key")]
    pub redis_client_cert: Option<PathBuf>,
    /// PEM private key of --redis-client-cert.
    #[arg(long, env = "SECKILL_REDIS_CLIENT_KEY", requires = "redis_client_cert")]
    pub redis_client_key: Option<PathBuf>,
}

static CERTS: OnceLock<TlsCertificates> = OnceLock::new();

/// Reads the files of `args` for every later `rediss://` connection of the process. A second
/// call with other files is refused (one process, one set of Redis credentials).
pub fn configure(args: &RedisTlsArgs) -> anyhow::Result<()> {
    let read = |p: &PathBuf, what: &str| {
        std::fs::read(p).with_context(|| format!("reading {what} {}", p.display()))
    };
    let root_cert = args
        .redis_ca_file
        .as_ref()
        .map(|p| read(p, "--redis-ca-file"))
        .transpose()?;
    let client_tls = match (&args.redis_client_cert, &args.redis_client_key) {
        (Some(cert), Some(key)) => Some(ClientTlsConfig {
            client_cert: read(cert, "--redis-client-cert")?,
            client_key: read(key, "--redis-client-key")?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        anyhow::ensure!(
            CERTS.get().is_none(),
            "the Redis TLS files are set once per process"
        );
        return Ok(());
    }
    let certs = TlsCertificates {
        client_tls,
        root_cert,
    };
    if CERTS.set(certs.clone()).is_err() {
        let same = CERTS.get().is_some_and(|c| {
            c.root_cert == certs.root_cert
                && c.client_tls
                    .as_ref()
                    .map(|t| (&t.client_cert, &t.client_key))
                    == certs
                        .client_tls
                        .as_ref()
                        .map(|t| (&t.client_cert, &t.client_key))
        });
        anyhow::ensure!(same, "the Redis TLS files are set once per process");
    }
    Ok(())
}

/// The certificates given by [`configure`], for a cluster client.
pub fn certs() -> Option<TlsCertificates> {
    CERTS.get().cloned()
}

fn is_tls(info: &ConnectionInfo) -> bool {
    matches!(info.addr(), ConnectionAddr::TcpTls { .. })
}

/// Whether `nodes` (Sentinels, Cluster seeds) are reached over TLS; an error when some are and
/// some are not: the primary a plain sentinel names would be reached in clear, credentials
/// included, whenever the TLS ones did not answer.
pub fn one_scheme(nodes: &[ConnectionInfo]) -> anyhow::Result<bool> {
    let tls = nodes.iter().filter(|n| is_tls(n)).count();
    anyhow::ensure!(
        tls == 0 || tls == nodes.len(),
        "the Redis URLs mix rediss:// and redis://: give every node the same scheme"
    );
    Ok(tls > 0)
}

/// Installs ring as the process's rustls provider, once. redis 1.x asks rustls for the
/// process default, which rustls can only pick by itself while exactly one provider is built:
/// a dependency that ever brought aws-lc-rs in as well would make the first `rediss://`
/// connection panic.
pub fn provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Err: another part of the process installed one first, which is as good.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A client for `info`: over TLS with the configured files when `info` is a `rediss://`
/// address and files were given, else as `redis::Client::open` makes it.
pub fn client(info: impl IntoConnectionInfo) -> redis::RedisResult<redis::Client> {
    provider();
    let info = info.into_connection_info()?;
    match CERTS.get() {
        Some(certs) if is_tls(&info) => redis::Client::build_with_tls(info, certs.clone()),
        _ => redis::Client::open(info),
    }
}

/// `addr` as a TLS address when the sentinels themselves are reached over TLS (a primary
/// named by a sentinel is served the way its sentinels are).
pub fn like(addr: ConnectionAddr, sentinel: &ConnectionInfo) -> ConnectionAddr {
    match (addr, sentinel.addr()) {
        (ConnectionAddr::Tcp(host, port), ConnectionAddr::TcpTls { insecure, .. }) => {
            ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: None,
            }
        }
        (addr, _) => addr,
    }
}

#[cfg(test)]
mod tests {
    use redis::IntoConnectionInfo;

    #[test]
    fn nodes_share_one_scheme_and_a_plain_url_stays_plain() {
        let infos = |urls: &[&str]| -> Vec<redis::ConnectionInfo> {
            urls.iter()
                .map(|u| u.into_connection_info().unwrap())
                .collect()
        };
        assert!(super::one_scheme(&infos(&["rediss://a:1", "REDISS://b:2"])).unwrap());
        assert!(!super::one_scheme(&infos(&["redis://a:1", "redis://b:2"])).unwrap());
        let e = super::one_scheme(&infos(&["rediss://a:1", "redis://b:2"])).unwrap_err();
        assert!(e.to_string().contains("mix"), "{e}");
        let sentinel = &infos(&["rediss://s:26379"])[0];
        let plain = &infos(&["redis://s:26379"])[0];
        let named = || redis::ConnectionAddr::Tcp("p".into(), 6379);
        assert!(matches!(
            super::like(named(), sentinel),
            redis::ConnectionAddr::TcpTls { .. }
        ));
        assert!(matches!(
            super::like(named(), plain),
            redis::ConnectionAddr::Tcp(..)
        ));
    }
}
