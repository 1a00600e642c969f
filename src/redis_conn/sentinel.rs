//! Redis Sentinel: where the primary called `master` is now.
//!
//! [`super::link::Link`] asks on every (re)connect, so a failover is followed the way a
//! restart is: requests fail at once while the old primary is unreachable (or answer
//! `READONLY` after it came back as a replica, which also drops the connection), and the next
//! connection goes to whichever node the sentinels name, where scripts are reloaded on the
//! first NOSCRIPT.

use std::time::Duration;

use anyhow::Context;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};

fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)))
}

/// Asks each sentinel in turn for the primary's address; the first answer wins.
pub async fn resolve(sentinels: &[ConnectionInfo], master: &str) -> anyhow::Result<ConnectionAddr> {
    let mut last = None;
    for s in sentinels {
        let attempt = async {
            let client = super::tls::client(s.clone())?;
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&connection_config())
                .await?;
            let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(master)
                .query_async(&mut conn)
                .await?;
            let (host, port) =
                addr.with_context(|| format!("sentinel does not know {master:?}"))?;
            anyhow::Ok(super::tls::like(ConnectionAddr::Tcp(host, port), s))
        };
        match attempt.await {
            Ok(addr) => return Ok(addr),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| anyhow::anyhow!("no sentinel given")))
}
