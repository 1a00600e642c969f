//! The accept loop of every listener: HTTP/1.1 on hyper, with the limits a public service
//! needs against slow, stalled and greedy clients.
//!
//! - **Head timeout**: a request head must be complete within it, counted from its first
//!   byte (see `watchdog.rs`).
//! - **Idle timeout**: a connection with no request in progress and no byte of a next one
//!   (keep-alive, or accepted and silent) is closed after it.
//! - **Body timeout**: a request body must arrive in full within it (`timed_body.rs`).
//! - **A client's share**: one client address (IPv6: one /64) holds at most
//!   `--max-connections-per-ip` connections; a new one beyond it is closed at accept
//!   (`crate::guard::share`).
//! - **Connection cap**: at most `max_connections` open connections. When a new connection
//!   arrives at the cap, the oldest connection that has had no request in progress (still
//!   sending its head, or idle) for at least a quarter of the head timeout is closed to make
//!   room, so stalled clients cannot lock out new ones; if there is none, the loop stops
//!   accepting (new connections wait in the kernel's listen backlog) until one closes. Either way one log line, at most once a
//!   minute, says so.
//!
//! Only HTTP/1.1 is served (no HTTP/2, so no HTTP/2 limits to set). Shutdown is graceful: the
//! loop stops accepting, idle connections close, requests in flight finish.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::fast::{Dispatch, FastClaims};
use super::watchdog::{self, Clock, Watched};
use crate::guard::share::Share;

/// Limits of one listener's connections.
#[derive(Debug, Clone)]
pub struct ConnLimits {
    pub head_timeout: Duration,
    pub idle_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    /// Each client address's share of the connections (`crate::guard::share`); `None`: no
    /// per-address limit (the admin listener).
    pub per_ip: Option<Arc<Share>>,
}

impl Default for ConnLimits {
    fn default() -> Self {
        Self {
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(30),
            max_connections: 20_000,
            per_ip: None,
        }
    }
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets every request in flight
/// finish. `fast`: the claim route served before the router (`super::fast`; public listener
/// only). `name` tells the listeners apart in the log.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    fast: Option<Arc<FastClaims>>,
    limits: ConnLimits,
    name: &'static str,
    shutdown: impl Future<Output = ()>,
) {
    let max = limits.max_connections.max(1);
    let permits = Arc::new(Semaphore::new(max));
    let graceful = GracefulShutdown::new();
    let mut open = Open::default();
    let mut cap_log = RareLog::default();
    let mut accept_log = RareLog::default();
    let mut share_log = RareLog::default();
    tokio::pin!(shutdown);
    'accept: loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of descriptors or memory: back off instead of spinning on the error.
                    accept_log.note(|n| tracing::error!(listener = name, error = %e, times = n, "accept failed; retrying in 100 ms"));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // A client at its share is turned away before it can wait for a global place.
        let share = match limits.per_ip.as_ref().map(|s| s.take(peer.ip())) {
            Some(Err(_)) => {
                share_log.note(|n| tracing::warn!(listener = name, client = %peer.ip(), times = n,
                    "a client address holds its whole share of connections (--max-connections-per-ip); closing its new ones"));
                drop(stream);
                continue;
            }
            Some(Ok(taken)) => taken,
            None => None,
        };
        let mut at_cap = false;
        let permit = loop {
            if let Ok(p) = permits.clone().try_acquire_owned() {
                break p;
            }
            let evicted = open.evict_one(max, limits.head_timeout / 4);
            if !at_cap {
                at_cap = true;
                cap_log.note(|n| tracing::warn!(listener = name, max_connections = max, times = n,
                    "connection cap reached: closing the oldest connections that wait without a request in progress; \
                     while every connection is busy, new ones wait in the listen backlog"));
            }
            tokio::select! {
                p = permits.clone().acquire_owned() => break p.expect("the semaphore is never closed"),
                // Nobody to close yet: look again when the waiting connections have aged.
                _ = tokio::time::sleep(Duration::from_millis(100)), if !evicted => {}
                _ = &mut shutdown => break 'accept,
            }
        };
        let _ = stream.set_nodelay(true);
        let clock = Clock::new(limits.head_timeout, limits.idle_timeout);
        open.push(&clock, max);
        let dispatch = Dispatch {
            router: router.clone(),
            fast: fast.clone(),
            peer,
            clock: clock.clone(),
            body_timeout: limits.body_timeout,
        };
        let conn = connection(stream, dispatch);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            tokio::select! {
                // The connection first: a head that arrived counts before its deadline.
                biased;
                r = conn => if let Err(e) = r {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                },
                why = watchdog::watch(clock) => {
                    tracing::debug!(%peer, ?why, "connection closed by its timeout");
                }
            }
            drop(permit);
            drop(share);
        });
    }
    drop(listener);
    tracing::info!(
        listener = name,
        open = graceful.count(),
        "stopped accepting; waiting for requests in flight"
    );
    graceful.shutdown().await;
}

/// One HTTP/1.1 connection, served by [`Dispatch`].
fn connection(
    stream: tokio::net::TcpStream,
    dispatch: Dispatch,
) -> hyper::server::conn::http1::Connection<TokioIo<Watched<tokio::net::TcpStream>>, Dispatch> {
    let io = TokioIo::new(Watched::new(stream, dispatch.clock.clone()));
    hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, dispatch)
}

/// The open connections in accept order, to find the oldest one that can be closed.
#[derive(Default)]
struct Open(VecDeque<Weak<Clock>>);

impl Open {
    fn push(&mut self, clock: &Arc<Clock>, max: usize) {
        if self.0.len() >= 2 * max {
            self.0.retain(|c| c.strong_count() > 0);
        }
        self.0.push_back(Arc::downgrade(clock));
    }

    /// Closes the oldest connection that has had no request in progress for at least
    /// `min_wait` (a client that connected a moment ago is not punished for the crowd);
    /// false if there is none.
    fn evict_one(&mut self, max: usize, min_wait: Duration) -> bool {
        for _ in 0..self.0.len().min(2 * max) {
            let Some(weak) = self.0.pop_front() else {
                return false;
            };
            let Some(clock) = weak.upgrade() else {
                continue;
            };
            if clock.evict(min_wait) {
                return true;
            }
            self.0.push_back(weak);
        }
        false
    }
}

/// A warning that is logged at most once a minute, with how often it happened meanwhile.
#[derive(Default)]
struct RareLog {
    last: Option<Instant>,
    since: u64,
}

impl RareLog {
    fn note(&mut self, log: impl FnOnce(u64)) {
        self.since += 1;
        if self
            .last
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
        {
            log(self.since);
            self.since = 0;
            self.last = Some(Instant::now());
        }
    }
}
