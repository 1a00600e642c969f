//! Which replica acknowledgements survive a failover: a write counts only once every replica
//! Sentinel could promote has it, on the primary Sentinel names, while no failover is near.
//!
//! `WAIT n` counts any `n` replicas connected to the primary, but Sentinel does not promote
//! any replica: it skips priority 0 and replicas it sees down, then takes the *lowest
//! priority* first and only then the highest offset. So with replicas of priority 2 and 100,
//! a win acknowledged by the priority-100 one alone is lost when the priority-2 one is
//! promoted; a priority-0 replica's acknowledgement carries nothing; and during a graceful
//! `SENTINEL FAILOVER` a replica still following the old primary acknowledges writes that are
//! thrown away when it is re-pointed.
//!
//! Behind Sentinel a wait therefore asks the sentinels (a majority must answer; one round
//! trip shared with every wait that began before it, errors included) which replicas exist and
//! their priorities, reads the primary's `INFO replication` (which replicas are online, and
//! how far each has acknowledged), and counts a write only if:
//!
//! - at least `n` replicas that have it (their acknowledged offset is at or past the write's)
//!   have a priority no worse than every promotable replica that does not, down ones included
//!   (one down when the write is acknowledged may be up again, stale, when the primary fails),
//!   and strictly better than one Sentinel sees up that does not follow the primary (promoted
//!   by a failover not heard of yet, or resyncing). Sentinel picks the lowest priority first
//!   and, at equal priority, the highest offset, so it picks one that has the write; a replica
//!   no sentinel knows never counts (`view.rs`);
//! - the sentinels, asked after the replicas answered, name the server written to as primary
//!   (a majority of them), none has a failover in progress or sees the primary objectively
//!   down, and a majority does not see it subjectively down: a promotion that began before the
//!   acknowledgements shows as one of these (a failover takes seconds), and the promoted
//!   replica stops acknowledging the old primary the moment it is promoted.
//!
//! Offsets, not `WAIT`'s count, say *which* replicas have the write. The `WAIT` only waits for
//! as many as must answer (`View::need`: `n` when the candidates share one priority), so a
//! lagging replica — a priority-0 backup, one in a full sync — slows nothing. When the replicas
//! that answered first are not the ones that count (a priority-0 backup ahead of a promotable
//! replica catching up after a restart), the rest of the timeout waits for every online
//! replica and the offsets are read once more (`batch/replicas.rs`). Left open: the
//! view's `INFO` shares the multiplexed link with other batches' `WAIT`s, so with a slow replica
//! a confirm can take about twice `--redis-wait-timeout-ms`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionInfo};
use tokio::sync::Mutex;

mod view;

use view::Replica;
pub use view::{Addr, View};

/// How long one sentinel may take to answer: a silent one must not stall claim batches.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(300);

/// The last view asked, or why it could not be.
struct Asked {
    at: Instant,
    view: Result<View, String>,
}

/// The sentinels of one primary, asked at most once per round trip.
pub struct Promotable {
    sentinels: Vec<(ConnectionInfo, Mutex<Option<MultiplexedConnection>>)>,
    master: String,
    /// Held while asking: waits that arrive meanwhile share the answer.
    last: Mutex<Option<Asked>>,
}

fn config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(SENTINEL_TIMEOUT))
        .set_response_timeout(Some(SENTINEL_TIMEOUT))
}

/// One sentinel's answer: the primary, whether it sees a failover (in progress, or the
/// primary objectively down), whether it sees the primary subjectively down, and the
/// replicas it knows with their priorities.
struct Said {
    primary: Addr,
    failover: bool,
    s_down: bool,
    /// Priority, and whether it sees the replica down or disconnected.
    replicas: HashMap<Addr, (u32, bool)>,
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

    /// A view asked at or after `since`: the last one if it qualifies (a failure to ask
    /// included, so a silent sentinel is waited for once per round, not once per wait),
    /// otherwise a new one. `primary_info` is the primary's `INFO replication`, awaited only
    /// when a new view is asked.
    pub async fn view_since(
        &self,
        since: Instant,
        primary_info: impl std::future::Future<Output = anyhow::Result<String>>,
    ) -> anyhow::Result<View> {
        let mut last = self.last.lock().await;
        if let Some(a) = last.as_ref().filter(|a| a.at >= since) {
            return a.view.clone().map_err(anyhow::Error::msg);
        }
        let at = Instant::now();
        let view = self
            .ask(at, primary_info)
            .await
            .map_err(|e| format!("{e:#}"));
        *last = Some(Asked {
            at,
            view: view.clone(),
        });
        view.map_err(anyhow::Error::msg)
    }

    async fn ask(
        &self,
        asked: Instant,
        primary_info: impl std::future::Future<Output = anyhow::Result<String>>,
    ) -> anyhow::Result<View> {
        let online = online_replicas(&primary_info.await?);
        let answers =
            futures::future::join_all(self.sentinels.iter().map(|(info, conn)| async move {
                let r = tokio::time::timeout(SENTINEL_TIMEOUT, self.ask_one(info, conn))
                    .await
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer in {SENTINEL_TIMEOUT:?}")));
                if r.is_err() {
                    *conn.lock().await = None;
                }
                r
            }))
            .await;
        let mut said = Vec::new();
        let mut last_err = None;
        for a in answers {
            match a {
                Ok(s) => said.push(s),
                Err(e) => last_err = Some(e),
            }
        }
        // A failover needs a majority of the sentinels: fewer answering could all be the
        // ones that have not heard of it.
        let majority = self.sentinels.len() / 2 + 1;
        anyhow::ensure!(
            said.len() >= majority,
            "{} of {} sentinels answered: {}",
            said.len(),
            self.sentinels.len(),
            last_err.map_or_else(|| "none given".to_owned(), |e| format!("{e:#}"))
        );
        let primary = said
            .iter()
            .map(|s| &s.primary)
            .find(|p| said.iter().filter(|s| &s.primary == *p).count() >= majority)
            .cloned();
        let failover =
            said.iter().any(|s| s.failover) || said.iter().filter(|s| s.s_down).count() >= majority;
        let mut replicas: Vec<Replica> = Vec::new();
        let known = said.iter().flat_map(|s| s.replicas.keys());
        for addr in online.keys().chain(known) {
            if replicas.iter().any(|r| &r.addr == addr) {
                continue;
            }
            let seen: Vec<(u32, bool)> = said
                .iter()
                .filter_map(|s| s.replicas.get(addr).copied())
                .collect();
            replicas.push(Replica {
                addr: addr.clone(),
                priority: seen.iter().map(|s| s.0).min().unwrap_or(1),
                known: !seen.is_empty(),
                down: seen.iter().filter(|s| s.1).count() >= majority,
                online: online.contains_key(addr),
                offset: online.get(addr).copied().unwrap_or(0),
            });
        }
        Ok(View {
            asked,
            primary,
            failover,
            replicas,
        })
    }

    /// One sentinel's view of the primary and its replicas.
    async fn ask_one(
        &self,
        info: &ConnectionInfo,
        slot: &Mutex<Option<MultiplexedConnection>>,
    ) -> anyhow::Result<Said> {
        let mut conn = {
            let mut slot = slot.lock().await;
            match slot.as_ref() {
                Some(c) => c.clone(),
                None => {
                    let c = crate::redis_conn::tls::client(info.clone())?
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
        let flag = |f: &str| flags.split(',').any(|x| x == f);
        let replicas = replicas
            .iter()
            .filter_map(|r| {
                let addr = (field(r, "ip"), field(r, "port").parse().ok()?);
                let priority = r
                    .get("slave-priority")
                    .or(r.get("replica-priority"))
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(1);
                let down = field(r, "flags")
                    .split(',')
                    .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"));
                Some((addr, (priority, down)))
            })
            .collect();
        Ok(Said {
            primary: (field(&master, "ip"), port),
            failover: flag("failover_in_progress") || flag("o_down"),
            s_down: flag("s_down"),
            replicas,
        })
    }
}

/// The replicas `INFO replication` of a primary lists as online, with the offset each
/// acknowledged.
fn online_replicas(info: &str) -> HashMap<Addr, u64> {
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains(":ip="))
        .filter_map(|l| {
            let fields: HashMap<&str, &str> = l
                .split_once(':')?
                .1
                .split(',')
                .filter_map(|kv| kv.split_once('='))
                .collect();
            if fields.get("state") != Some(&"online") {
                return None;
            }
            let addr = (
                fields.get("ip")?.to_string(),
                fields.get("port")?.parse().ok()?,
            );
            Some((addr, fields.get("offset")?.parse().ok()?))
        })
        .collect()
}

/// `master_repl_offset` of an `INFO replication` answer.
pub fn primary_offset(info: &str) -> anyhow::Result<u64> {
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("INFO replication has no master_repl_offset"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_replication_is_read_with_offsets() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
                    slave0:ip=127.0.0.1,port=7001,state=online,offset=120,lag=0\r\n\
                    slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
                    master_repl_offset:130\r\n";
        let online = online_replicas(info);
        assert_eq!(online.len(), 1);
        assert_eq!(online[&("127.0.0.1".to_owned(), 7001)], 120);
        assert_eq!(primary_offset(info).unwrap(), 130);
    }
}
