//! Which replica acknowledgements survive a failover: only those of replicas Sentinel could
//! promote, of the primary Sentinel names, while no failover is under way.
//!
//! `WAIT n` counts every replica connected to the primary. Two kinds of them do not carry a
//! write through a failover: a replica Sentinel never promotes (`replica-priority 0`, or one
//! Sentinel sees as down or disconnected), and — during a graceful `SENTINEL FAILOVER` — a
//! replica still following the old primary after another one was promoted (its copy is thrown
//! away when it is re-pointed). A win acknowledged only by such a replica is lost with the
//! old primary, after `won` was answered.
//!
//! So, behind Sentinel, a replica wait asks every sentinel (once per round trip, shared by
//! every wait that began before it) for the primary, its flags and its replicas:
//!
//! - with `k` replicas connected to the primary that a sentinel would not promote (or does
//!   not know), the wait is `WAIT n + k`, which
//!   `n` promotable replicas must have answered (at most `k` answers came from the others),
//!   and a claim batch runs only with `n + k` replicas in sync (`claims.lua`);
//! - a wait counts only if every sentinel that answered names the server the write went to as
//!   the primary and none has a failover in progress, asked after the replicas answered: a
//!   promotion that began before then shows as one of the two (a failover takes seconds).
//!
//! Left open (docs/SCALE_OUT.md): a sentinel that cannot be reached is not asked; with several
//! sentinels the one leading a failover is the first to know of it.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};
use tokio::sync::Mutex;

use super::link::Link;

type Addr = (String, u16);

/// What the sentinels said, asked at `asked`.
#[derive(Debug, Clone)]
pub struct View {
    pub asked: Instant,
    /// The primary every answering sentinel names (`None` if they disagree).
    pub primary: Option<(String, u16)>,
    /// A sentinel has a failover of the primary in progress.
    pub failover: bool,
    /// Replicas connected to the primary (its `INFO replication`) that some sentinel would
    /// not promote or does not know.
    pub not_promotable: u32,
}

impl View {
    /// Ok if a write to `server` acknowledged by replicas before this view was asked survives
    /// a failover; the reason otherwise.
    pub fn check(&self, server: &ConnectionAddr) -> anyhow::Result<()> {
        anyhow::ensure!(!self.failover, "a Sentinel failover is in progress");
        let same = match (&self.primary, server) {
            (Some((h, p)), ConnectionAddr::Tcp(host, port)) => h == host && p == port,
            _ => false,
        };
        anyhow::ensure!(
            same,
            "the sentinels name {:?} as the primary, not the server written to",
            self.primary
        );
        Ok(())
    }
}

/// The sentinels of one primary, asked at most once per round trip.
pub struct Promotable {
    sentinels: Vec<(ConnectionInfo, Mutex<Option<MultiplexedConnection>>)>,
    master: String,
    last: Mutex<Option<View>>,
}

fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Duration::from_secs(1))
        .set_response_timeout(Duration::from_secs(1))
}

impl Promotable {
    pub fn new(sentinels: &[ConnectionInfo], master: &str) -> Self {
        Self {
            sentinels: sentinels
                .iter()
                .map(|s| (s.clone(), Mutex::new(None)))
                .collect(),
            master: master.to_owned(),
            last: Mutex::new(None),
        }
    }

    /// A view asked at or after `since`: the one in flight or last asked if it qualifies,
    /// otherwise a new one.
    pub async fn view_since(&self, since: Instant, link: &Link) -> anyhow::Result<View> {
        let mut last = self.last.lock().await;
        if let Some(v) = last.as_ref().filter(|v| v.asked >= since) {
            return Ok(v.clone());
        }
        let view = self.ask(link).await?;
        *last = Some(view.clone());
        Ok(view)
    }

    async fn ask(&self, link: &Link) -> anyhow::Result<View> {
        let asked = Instant::now();
        let info = link
            .request(redis::cmd("INFO").arg("replication"))
            .await
            .map_err(|e| anyhow::anyhow!("INFO replication of the primary failed: {e}"))?;
        let connected = connected_replicas(&redis::from_redis_value::<String>(&info)?);
        let answers =
            futures::future::join_all(self.sentinels.iter().map(|(info, conn)| async move {
                let r = self.ask_one(info, conn).await;
                if r.is_err() {
                    *conn.lock().await = None;
                }
                r
            }))
            .await;
        let mut view = View {
            asked,
            primary: None,
            failover: false,
            not_promotable: 0,
        };
        let mut answered = 0;
        let mut last_err = None;
        let mut outside: HashSet<&Addr> = HashSet::new();
        for a in &answers {
            match a {
                Ok((primary, failover, promotable)) => {
                    if answered == 0 {
                        view.primary = Some(primary.clone());
                    } else if view.primary.as_ref() != Some(primary) {
                        view.primary = None;
                    }
                    answered += 1;
                    view.failover |= failover;
                    outside.extend(connected.iter().filter(|r| !promotable.contains(*r)));
                }
                Err(e) => last_err = Some(e),
            }
        }
        if answered == 0 {
            return Err(anyhow::anyhow!(
                "no sentinel answered: {}",
                last_err.map_or_else(|| "none given".to_owned(), |e| format!("{e:#}"))
            ));
        }
        view.not_promotable = outside.len() as u32;
        Ok(view)
    }

    /// One sentinel's primary, failover flag and the replicas it could promote.
    async fn ask_one(
        &self,
        info: &ConnectionInfo,
        slot: &Mutex<Option<MultiplexedConnection>>,
    ) -> anyhow::Result<(Addr, bool, HashSet<Addr>)> {
        let mut conn = {
            let mut slot = slot.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = redis::Client::open(info.clone())?
                        .get_multiplexed_async_connection_with_config(&config())
                        .await?;
                    *slot = Some(c.clone());
                    c
                }
            }
        };
        let (master, replicas): (HashMap<String, String>, Vec<HashMap<String, String>>) =
            redis::pipe()
                .cmd("SENTINEL")
                .arg("MASTER")
                .arg(&self.master)
                .cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(&self.master)
                .query_async(&mut conn)
                .await?;
        let field = |m: &HashMap<String, String>, k: &str| m.get(k).cloned().unwrap_or_default();
        let port: u16 = field(&master, "port").parse()?;
        let flags = field(&master, "flags");
        let failover = flags.split(',').any(|f| f == "failover_in_progress");
        let promotable = replicas
            .iter()
            .filter(|r| promotable(r))
            .filter_map(|r| Some((field(r, "ip"), field(r, "port").parse().ok()?)))
            .collect();
        Ok(((field(&master, "ip"), port), failover, promotable))
    }
}

/// The replicas `INFO replication` of a primary lists as online.
fn connected_replicas(info: &str) -> Vec<Addr> {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(":ip="))
        .filter_map(|l| {
            let fields: HashMap<&str, &str> = l
                .split_once(':')?
                .1
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            (fields.get("state") == Some(&"online")).then(|| {
                Some((
                    fields.get("ip")?.to_string(),
                    fields.get("port")?.parse().ok()?,
                ))
            })?
        })
        .collect()
}

/// Whether Sentinel would consider this replica for promotion.
fn promotable(replica: &HashMap<String, String>) -> bool {
    let priority = replica
        .get("slave-priority")
        .or(replica.get("replica-priority"));
    let flags = replica.get("flags").map(String::as_str).unwrap_or_default();
    priority.is_some_and(|p| p != "0")
        && !flags
            .split(',')
            .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}
