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
//!   have a priority no worse than every promotable replica that does not — whatever Sentinel
//!   thinks of that one now: a replica that is down when the write is acknowledged may be up
//!   again, stale, when the primary fails. Sentinel picks the lowest priority first and, at
//!   equal priority, the highest offset, so it picks one that has the write (`View::acked`);
//! - the sentinels, asked after the replicas answered, name the server written to as primary
//!   (a majority of them), none has a failover in progress or sees the primary objectively
//!   down, and a majority does not see it subjectively down: a promotion that began before the
//!   acknowledgements shows as one of these (a failover takes seconds), and the promoted
//!   replica stops acknowledging the old primary the moment it is promoted.
//!
//! Offsets, not `WAIT`'s count, say *which* replicas have the write. The `WAIT` only waits for
//! the replicas that must answer (`View::need`), so a lagging replica Sentinel would pick after
//! them (a priority-0 backup, say) slows nothing.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo};
use tokio::sync::Mutex;

use super::link::Link;

pub type Addr = (String, u16);

/// How long one sentinel may take to answer: a silent one must not stall claim batches.
const SENTINEL_TIMEOUT: Duration = Duration::from_millis(300);

/// A replica as the primary and the sentinels see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replica {
    pub addr: Addr,
    /// Its `replica-priority` as the sentinels report it (0: never promoted).
    pub priority: u32,
    /// Some sentinel knows it (one that does not — `replica-announced no`, or announced under
    /// another name — can never count as having a write, and blocks if it lacks one).
    pub known: bool,
    /// A majority of the answering sentinels sees it down or disconnected.
    pub down: bool,
    /// Listed online by the primary.
    pub online: bool,
    /// The replication offset it acknowledged (0 when not online).
    pub offset: u64,
}

/// What a replica without a write demands of the ones that have it: a priority no worse
/// (Sentinel then picks by offset, and theirs is higher), or strictly better.
#[derive(Debug, Clone, Copy)]
enum Bar {
    AtMost(u32),
    Below(u32),
}

impl Replica {
    /// The bar this replica sets if it lacks the write; `None` if it cannot be promoted.
    fn bar(&self) -> Option<Bar> {
        if !self.known {
            return Some(Bar::AtMost(1)); // its priority is unknown: assume the best
        }
        if self.priority == 0 {
            return None;
        }
        Some(if self.online || self.down {
            Bar::AtMost(self.priority)
        } else {
            // Up, yet not following the primary: promoted already by a failover this
            // instance has not heard of, or resyncing. Sentinel's offset tie-break cannot be
            // relied on for it.
            Bar::Below(self.priority)
        })
    }

    fn clears(&self, bar: Bar) -> bool {
        match bar {
            Bar::AtMost(p) => self.priority <= p,
            Bar::Below(p) => self.priority < p,
        }
    }
}

/// What the sentinels and the primary said, asked at `asked`.
#[derive(Debug, Clone)]
pub struct View {
    pub asked: Instant,
    /// The primary a majority of the sentinels names (`None` if none does).
    pub primary: Option<Addr>,
    /// A failover is in progress, or the primary is seen down.
    pub failover: bool,
    /// Every replica the primary lists or a sentinel knows.
    pub replicas: Vec<Replica>,
}

impl View {
    fn usable(&self, server: &ConnectionAddr) -> anyhow::Result<()> {
        anyhow::ensure!(
            !self.failover,
            "a Sentinel failover is in progress or the primary is seen down"
        );
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

    /// The replicas that count for a write: known, promotable, having it (`has`), and
    /// clearing the bar of every replica that lacks it.
    fn counting(&self, has: impl Fn(&Replica) -> bool) -> Vec<&Replica> {
        let bars: Vec<Bar> = self
            .replicas
            .iter()
            .filter(|r| !has(r))
            .filter_map(Replica::bar)
            .collect();
        self.replicas
            .iter()
            .filter(|r| r.known && r.priority > 0 && has(r))
            .filter(|r| bars.iter().all(|b| r.clears(*b)))
            .collect()
    }

    /// What a write to `server` waits for: how many acknowledgements (`WAIT k`), and the
    /// online replicas that may give them — those that would count if they all had it; or
    /// why no wait could count.
    pub fn need(&self, n: u32, server: &ConnectionAddr) -> anyhow::Result<(u32, Vec<Addr>)> {
        self.usable(server)?;
        let ahead = self.counting(|r| r.online);
        anyhow::ensure!(
            ahead.len() >= n as usize,
            "{} connected replicas Sentinel would promote first, {n} required (replicas: {:?})",
            ahead.len(),
            self.replicas
        );
        // At one priority any n of them will do (Sentinel's offset tie-break picks one that
        // has the write); with several, the better ones must answer too.
        let one_priority = ahead.windows(2).all(|w| w[0].priority == w[1].priority);
        let k = if one_priority { n } else { ahead.len() as u32 };
        Ok((k, ahead.iter().map(|r| r.addr.clone()).collect()))
    }

    /// Ok if a write to `server` at replication offset `written` survives a failover: `n`
    /// replicas have it, each with a priority Sentinel prefers to every replica without it.
    pub fn acked(&self, n: u32, server: &ConnectionAddr, written: u64) -> anyhow::Result<()> {
        self.usable(server)?;
        let good = self.counting(|r| r.online && r.offset >= written).len();
        anyhow::ensure!(
            good >= n as usize,
            "{good} replicas Sentinel would promote first have the write (offset {written}), {n} required (replicas: {:?})",
            self.replicas
        );
        Ok(())
    }
}

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
        .set_connection_timeout(SENTINEL_TIMEOUT)
        .set_response_timeout(SENTINEL_TIMEOUT)
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
    /// otherwise a new one.
    pub async fn view_since(&self, since: Instant, link: &Link) -> anyhow::Result<View> {
        let mut last = self.last.lock().await;
        if let Some(a) = last.as_ref().filter(|a| a.at >= since) {
            return a.view.clone().map_err(anyhow::Error::msg);
        }
        let at = Instant::now();
        let view = self.ask(at, link).await.map_err(|e| format!("{e:#}"));
        *last = Some(Asked {
            at,
            view: view.clone(),
        });
        view.map_err(anyhow::Error::msg)
    }

    async fn ask(&self, asked: Instant, link: &Link) -> anyhow::Result<View> {
        let info = link
            .request(redis::cmd("INFO").arg("replication"))
            .await
            .map_err(|e| anyhow::anyhow!("INFO replication of the primary failed: {e}"))?;
        let online = online_replicas(&redis::from_redis_value::<String>(&info)?);
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

    fn r(port: u16, priority: u32, online: bool, offset: u64) -> Replica {
        Replica {
            addr: ("127.0.0.1".into(), port),
            priority,
            known: true,
            down: false,
            online,
            offset,
        }
    }

    fn view(replicas: Vec<Replica>) -> View {
        View {
            asked: Instant::now(),
            primary: Some(("127.0.0.1".into(), 7000)),
            failover: false,
            replicas,
        }
    }

    const SERVER: fn() -> ConnectionAddr = || ConnectionAddr::Tcp("127.0.0.1".into(), 7000);

    #[test]
    fn a_write_counts_only_where_sentinel_would_pick_a_replica_that_has_it() {
        let s = SERVER();
        let dead = |mut x: Replica| {
            x.down = true;
            x
        };
        // Two equal replicas, one dead: the other has it and wins the offset tie-break.
        let v = view(vec![r(1, 100, true, 50), dead(r(2, 100, false, 0))]);
        assert_eq!(v.need(1, &s).unwrap().0, 1);
        assert!(v.acked(1, &s, 50).is_ok());
        assert!(v.acked(1, &s, 51).is_err(), "nobody has offset 51");
        // An equal replica up but not following the primary (promoted by a failover not yet
        // heard of, or resyncing): no tie-break can be relied on.
        let v = view(vec![r(1, 100, true, 50), r(2, 100, false, 0)]);
        assert!(v.need(1, &s).is_err());
        assert!(v.acked(1, &s, 50).is_err());
        // A better-priority replica without the write (lagging, or down now and back later).
        let v = view(vec![r(1, 100, true, 50), r(2, 2, true, 10)]);
        assert_eq!(v.need(1, &s).unwrap().0, 2, "both must answer");
        assert!(v.acked(1, &s, 50).is_err());
        let v = view(vec![r(1, 100, true, 50), dead(r(2, 2, false, 0))]);
        assert!(v.need(1, &s).is_err(), "the favourite is not connected");
        // Three equal replicas, one lagging (a full sync): any one will do.
        let v = view(vec![
            r(1, 100, true, 50),
            r(2, 100, true, 50),
            r(3, 100, true, 0),
        ]);
        assert_eq!(v.need(1, &s).unwrap().0, 1);
        assert!(v.acked(1, &s, 50).is_ok());
        // A priority-0 replica neither counts nor is waited for.
        let v = view(vec![r(1, 100, true, 50), r(2, 0, true, 10)]);
        assert_eq!(v.need(1, &s).unwrap().0, 1);
        assert!(v.acked(1, &s, 50).is_ok());
        let v = view(vec![dead(r(1, 100, false, 0)), r(2, 0, true, 50)]);
        assert!(v.need(1, &s).is_err());
        assert!(v.acked(1, &s, 50).is_err());
        // One no sentinel knows never counts, and blocks while it lacks the write.
        let mut hidden = r(2, 1, true, 50);
        hidden.known = false;
        let v = view(vec![r(1, 100, true, 10), hidden.clone()]);
        assert!(v.acked(1, &s, 50).is_err(), "the hidden one alone has it");
        hidden.offset = 10;
        let v = view(vec![r(1, 100, true, 50), hidden]);
        assert!(v.acked(1, &s, 50).is_err(), "the hidden one lacks it");
    }

    #[test]
    fn no_wait_counts_during_a_failover_or_on_another_primary() {
        let mut v = view(vec![r(1, 100, true, 50)]);
        let other = ConnectionAddr::Tcp("127.0.0.1".into(), 7001);
        assert!(v.acked(1, &other, 50).is_err());
        v.failover = true;
        assert!(v.acked(1, &SERVER(), 50).is_err());
    }

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
