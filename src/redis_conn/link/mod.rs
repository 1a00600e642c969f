//! One Redis connection that knows whether Redis is reachable, and reconnects by itself.
//!
//! Why not redis-rs's `ConnectionManager`: redis 1.x fixed its backoff (0.27 slept 60–120 s
//! after a second failed attempt, redis-rs PR 1717), but while Redis is down every request
//! still awaits the manager's reconnect future, so a claim waits out its timeout instead of
//! being refused at once, and the caller cannot tell "never sent" from "sent, outcome
//! unknown". It also has no way to tell observers that a reconnect happened, which the
//! ledger check after a Redis restart (`engine::scale_out::fresh`) rests on, and it does not
//! ask the Sentinels again on each reconnect. This link owns the loop instead:
//!
//! - **Up**: requests go over one multiplexed connection. A request failing the way a dead
//!   connection fails (I/O error, reset, EOF, timeout, `READONLY` from a demoted primary)
//!   marks the link **Down** at once; so does a heartbeat `PING` every
//!   [`HEARTBEAT`] that gets no `PONG` within [`PING_TIMEOUT`] (a silent partition).
//! - **Down**: requests are refused at once with [`not_sent`] (nothing reached Redis, so the
//!   caller can say "nothing was changed"), and requests still waiting on the old connection
//!   are released with an error instead of waiting out their timeout. A background task
//!   reconnects every 50–250 ms (connect timeout [`CONNECT_TIMEOUT`]) and goes Up again when
//!   a fresh connection answers `PING`, i.e. within about 250 ms of Redis answering.
//! - **Sentinel**: each (re)connect first asks the sentinels where the primary is, so a
//!   failover is followed the same way a restart is.
//!
//! Observers ([`Link::watch`]) see every transition, e.g. to re-check Redis's settings after
//! a reconnect.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, Pipeline, RedisError, RedisResult,
    Value,
};
use tokio::sync::{watch, Notify};

mod errors;
mod loops;
mod pinned;

use errors::breaks_connection;
pub use errors::{moved_on, not_sent, surely_not_executed, unchecked};
use loops::{keep_alive, open};
pub use pinned::Pinned;

use super::promotable::Promotable;

/// Each connection attempt gives up after this long.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// Longest one request waits for its answer on a connection believed healthy.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often an Up link checks that Redis still answers.
pub const HEARTBEAT: Duration = Duration::from_millis(500);
/// A heartbeat unanswered this long declares the connection dead.
pub const PING_TIMEOUT: Duration = Duration::from_millis(1500);
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_millis(250);

/// Where the link connects.
#[derive(Debug, Clone)]
pub enum Endpoint {
    Node(ConnectionInfo),
    /// The primary the sentinels call `master`; credentials and db come from the first URL.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        master: String,
    },
}

/// Reachability as observers see it; `generation` grows on every transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    pub up: bool,
    pub generation: u64,
}

#[derive(Clone)]
enum State {
    /// Connected, to the server at the address.
    Up(u64, MultiplexedConnection, Arc<ConnectionAddr>),
    Down(u64, Instant),
}

impl State {
    fn health(&self) -> Health {
        match self {
            State::Up(g, ..) => Health {
                up: true,
                generation: *g,
            },
            State::Down(g, _) => Health {
                up: false,
                generation: *g,
            },
        }
    }
}

pub struct Link {
    endpoint: Endpoint,
    state: watch::Sender<State>,
    health: watch::Sender<Health>,
    wake: Arc<Notify>,
    /// The generation whose Redis was checked against the ledger (`fresh.rs`); gated requests
    /// go out only on that connection. `u64::MAX` = none checked.
    verified: AtomicU64,
    /// Behind Sentinel: which replica acknowledgements count (`promotable.rs`).
    promotable: Option<Arc<Promotable>>,
}

fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RESPONSE_TIMEOUT))
}

impl Link {
    /// Connects (failing if Redis cannot be reached now) and starts the reconnect task.
    pub async fn connect(endpoint: Endpoint) -> anyhow::Result<Arc<Self>> {
        let (conn, addr) = open(&endpoint).await?;
        let promotable = match &endpoint {
            Endpoint::Sentinel { sentinels, master } => {
                Some(Arc::new(Promotable::new(sentinels, master)))
            }
            Endpoint::Node(_) => None,
        };
        let link = Arc::new(Self {
            endpoint,
            promotable,
            state: watch::channel(State::Up(0, conn, Arc::new(addr))).0,
            health: watch::channel(Health {
                up: true,
                generation: 0,
            })
            .0,
            wake: Arc::new(Notify::new()),
            verified: AtomicU64::new(u64::MAX),
        });
        let (weak, wake) = (Arc::downgrade(&link), link.wake.clone());
        // The loop has no reason to panic; if it ever did, the link would stay in its last
        // state for good, so it is restarted in place (it holds no state of its own).
        tokio::spawn(async move {
            use futures::FutureExt;
            loop {
                let run = std::panic::AssertUnwindSafe(keep_alive(weak.clone(), wake.clone()));
                match run.catch_unwind().await {
                    Ok(()) => return,
                    Err(_) => {
                        tracing::error!("the Redis reconnect loop panicked; restarting it");
                        tokio::time::sleep(RETRY_MAX).await;
                    }
                }
            }
        });
        Ok(link)
    }

    pub fn db(&self) -> i64 {
        match &self.endpoint {
            Endpoint::Node(info) => info.redis_settings().db(),
            Endpoint::Sentinel { sentinels, .. } => sentinels[0].redis_settings().db(),
        }
    }

    /// Reachability now, and every change from here on.
    pub fn watch(&self) -> watch::Receiver<Health> {
        self.health.subscribe()
    }

    /// The server of the current connection and its generation (`None` while down).
    pub fn server(&self) -> Option<(u64, Arc<ConnectionAddr>)> {
        match &*self.state.borrow() {
            State::Up(g, _, addr) => Some((*g, addr.clone())),
            State::Down(..) => None,
        }
    }

    /// Behind Sentinel, which replicas' acknowledgements count.
    pub fn promotable(&self) -> Option<&Arc<Promotable>> {
        self.promotable.as_ref()
    }

    /// Reachability now.
    pub fn health(&self) -> Health {
        self.state.borrow().health()
    }

    /// Marks the connection of `generation` as checked against the ledger: gated requests may
    /// use it. Returns false if the link moved on meanwhile (that connection is gone).
    pub fn verify(&self, generation: u64) -> bool {
        self.verified.store(generation, Ordering::SeqCst);
        if self.health()
            == (Health {
                up: true,
                generation,
            })
        {
            return true;
        }
        self.unverify();
        false
    }

    /// Refuses gated requests until the next [`Link::verify`].
    pub fn unverify(&self) {
        self.verified.store(u64::MAX, Ordering::SeqCst);
    }

    /// One command that goes out only on a connection checked against the ledger; refused
    /// with [`unchecked`] (nothing was sent) otherwise.
    pub async fn request_gated(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.current()?;
        if self.verified.load(Ordering::SeqCst) != generation {
            return Err(unchecked());
        }
        self.guard(generation, conn.req_packed_command(cmd)).await
    }

    /// The connection to use, or the refusal while down.
    fn current(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        match &*self.state.borrow() {
            State::Up(g, c, _) => Ok((*g, c.clone())),
            State::Down(_, since) => Err(not_sent(since.elapsed())),
        }
    }

    fn set(&self, next: State) {
        let health = next.health();
        self.state.send_replace(next);
        self.health.send_replace(health);
    }

    /// Marks the connection of `generation` dead (once) and wakes the reconnect task.
    fn broken(&self, generation: u64, why: &RedisError) {
        let mut changed = false;
        self.state.send_if_modified(|s| match s {
            State::Up(g, ..) if *g == generation => {
                *s = State::Down(generation + 1, Instant::now());
                changed = true;
                true
            }
            _ => false,
        });
        if changed {
            self.health.send_replace(Health {
                up: false,
                generation: generation + 1,
            });
            tracing::warn!(error = %why, "Redis connection lost; refusing requests until Redis answers again");
            self.wake.notify_one();
        }
    }

    /// Waits for `request` (on the connection of `generation`), released at once if the link
    /// goes down meanwhile; marks the link down if the request failed like a dead connection.
    async fn guard<T>(
        &self,
        generation: u64,
        request: impl std::future::Future<Output = RedisResult<T>>,
    ) -> RedisResult<T> {
        let mut changes = self.state.subscribe();
        let result = tokio::select! {
            r = request => r,
            _ = changes.wait_for(|s| s.health().generation != generation) => {
                Err(RedisError::from(std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "the Redis connection was declared dead while this request waited",
                )))
            }
        };
        if let Err(e) = &result {
            if breaks_connection(e) {
                self.broken(generation, e);
            }
        }
        result
    }

    /// One command; refused at once while the link is down.
    pub async fn request(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.current()?;
        let reply = self.guard(generation, conn.req_packed_command(cmd)).await;
        if let Ok(v) = &reply {
            self.demoted(generation, std::slice::from_ref(v));
        }
        reply
    }

    /// One command on the connection of `generation` only: refused (nothing sent) once the
    /// link moved on, so a write meant for the server a `WAIT` just covered never lands on
    /// another.
    pub async fn request_on(&self, generation: u64, cmd: &Cmd) -> RedisResult<Value> {
        let (now, mut conn) = self.current()?;
        if now != generation {
            return Err(moved_on());
        }
        let reply = self.guard(generation, conn.req_packed_command(cmd)).await;
        if let Ok(v) = &reply {
            self.demoted(generation, std::slice::from_ref(v));
        }
        reply
    }

    /// A `READONLY` reply comes back as a value, not an error: the Redis behind this link was
    /// demoted to a replica, and the link goes down to find the primary again (through the
    /// Sentinels) instead of sending every later write to a replica.
    fn demoted(&self, generation: u64, replies: &[Value]) {
        let readonly = replies.iter().find_map(|v| match v {
            Value::ServerError(e) if e.code() == "READONLY" => Some(e.clone()),
            _ => None,
        });
        if let Some(e) = readonly {
            self.broken(generation, &RedisError::from(e));
        }
    }

    /// A pipeline; refused at once while the link is down.
    pub async fn request_many(
        &self,
        cmd: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.current()?;
        let replies = self
            .guard(generation, conn.req_packed_commands(cmd, offset, count))
            .await;
        if let Ok(v) = &replies {
            self.demoted(generation, v);
        }
        replies
    }
}
