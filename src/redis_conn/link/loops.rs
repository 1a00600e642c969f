//! How a link reaches Redis: opening a connection (asking the sentinels first, then
//! `PING`), and the loop that heartbeats while the link is Up and reconnects while it is Down
//! (the states and why are in the parent module's docs).

use std::sync::{Arc, Weak};

use anyhow::Context;
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, RedisError};
use tokio::sync::Notify;

use super::errors::breaks_connection;
use super::{
    config, Endpoint, Link, State, CONNECT_TIMEOUT, HEARTBEAT, PING_TIMEOUT, RETRY_MAX, RETRY_MIN,
};
use crate::redis_conn::sentinel;

/// Opens a connection to the endpoint and checks that Redis answers `PING`.
pub(super) async fn open(
    endpoint: &Endpoint,
) -> anyhow::Result<(MultiplexedConnection, ConnectionAddr)> {
    let info = match endpoint {
        Endpoint::Node(info) => info.clone(),
        Endpoint::Sentinel { sentinels, master } => {
            let addr: ConnectionAddr = sentinel::resolve(sentinels, master).await?;
            sentinels[0].clone().set_addr(addr)
        }
    };
    let addr = info.addr().clone();
    let attempt = async {
        let mut conn = crate::redis_conn::tls::client(info)?
            .get_multiplexed_async_connection_with_config(&config())
            .await?;
        redis::cmd("PING").query_async::<()>(&mut conn).await?;
        anyhow::Ok(conn)
    };
    tokio::time::timeout(CONNECT_TIMEOUT + PING_TIMEOUT, attempt)
        .await
        .context("Redis did not answer in time")?
        .context("cannot connect to Redis")
        .map(|conn| (conn, addr))
}

/// The reconnect loop: heartbeats while up, reconnects with a short backoff while down.
pub(super) async fn keep_alive(link: Weak<Link>, wake: Arc<Notify>) {
    let mut retry = RETRY_MIN;
    loop {
        let Some(me) = link.upgrade() else { return };
        let state = me.state.borrow().clone();
        match state {
            State::Up(generation, mut conn, _) => {
                drop(me);
                tokio::select! {
                    _ = tokio::time::sleep(HEARTBEAT) => {}
                    _ = wake.notified() => continue,
                }
                let ping = redis::cmd("PING");
                let answer = tokio::time::timeout(PING_TIMEOUT, ping.query_async::<()>(&mut conn))
                    .await
                    .unwrap_or_else(|_| {
                        Err(RedisError::from(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "heartbeat PING unanswered",
                        )))
                    });
                if let (Err(e), Some(me)) = (answer, link.upgrade()) {
                    if breaks_connection(&e) || e.code() == Some("LOADING") {
                        me.broken(generation, &e);
                    }
                }
            }
            State::Down(generation, since) => match open(&me.endpoint).await {
                Ok((conn, addr)) => {
                    retry = RETRY_MIN;
                    me.set(State::Up(generation + 1, conn, Arc::new(addr)));
                    tracing::info!(
                        down_ms = since.elapsed().as_millis() as u64,
                        "Redis answers again; serving"
                    );
                }
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "Redis still unreachable");
                    drop(me);
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            },
        }
    }
}
