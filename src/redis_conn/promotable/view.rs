//! What a wait may count, from what the sentinels and the primary said (`super`): which
//! replicas have a write, and whether Sentinel would pick one of them.

use std::time::Instant;

use redis::ConnectionAddr;

pub type Addr = (String, u16);

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
            (Some((h, p)), ConnectionAddr::Tcp(host, port))
            | (Some((h, p)), ConnectionAddr::TcpTls { host, port, .. }) => h == host && p == port,
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
    fn a_primary_reached_over_tls_is_the_one_the_sentinels_name() {
        let tls = |port| ConnectionAddr::TcpTls {
            host: "127.0.0.1".into(),
            port,
            insecure: false,
            tls_params: None,
        };
        let v = view(Vec::new());
        v.usable(&tls(7000)).unwrap();
        assert!(v.usable(&tls(7001)).is_err());
    }

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
}
