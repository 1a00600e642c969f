//! Held orders through a failover: one campaign with holds (every win is a pending order, later
//! confirmed by its payer or expired), a primary Redis with one replica that applies the
//! primary's writes in order and lags by any number of them, the order stream and its consumer,
//! and PostgreSQL. One fault: a failover to the replica (Sentinel), or a restart from an older
//! RDB snapshot. Redis state is one value (`Redis`) changed by one write at a time (`W`), so a
//! replica and a snapshot are copies of it at an earlier moment.

pub const TOTAL: u8 = 1;
pub const BUYERS: u8 = 2;
pub const TRIES: u8 = 1;

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum St {
    Pending,
    Confirmed,
    Expired,
}

/// One event of the order stream: a new order, or a resolution of one.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Ev {
    Order(u8, u8),
    Resolved(u8, St),
}

/// One write to Redis, as the primary applies it and sends it to its replica.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum W {
    Claim(u8, u8),
    Resolve(u8, St),
    Read(u8),
    Ack(u8),
    Fence,
    Install(Vec<(u8, u8, St)>),
}

#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Redis {
    /// (order number, buyer, state), by number.
    pub orders: Vec<(u8, u8, St)>,
    pub seq: u8,
    pub fenced: bool,
    /// Unacknowledged stream entries: (entry id, event, read by a consumer, lineage of the
    /// node that wrote it).
    pub stream: Vec<(u8, Ev, bool, u8)>,
    pub next_id: u8,
    /// The replication lineage: 0 before the fault, 1 on the node the fault left.
    pub lineage: u8,
}

impl Redis {
    pub fn apply(&mut self, w: &W) {
        match w {
            W::Claim(n, b) => {
                self.seq = *n;
                self.orders.push((*n, *b, St::Pending));
                self.push(Ev::Order(*n, *b));
            }
            W::Resolve(n, st) => {
                if let Some(o) = self.orders.iter_mut().find(|o| o.0 == *n) {
                    o.2 = *st;
                }
                self.push(Ev::Resolved(*n, *st));
            }
            W::Read(id) => {
                if let Some(e) = self.stream.iter_mut().find(|e| e.0 == *id) {
                    e.2 = true;
                }
            }
            W::Ack(id) => self.stream.retain(|e| e.0 != *id),
            W::Fence => self.fenced = true,
            W::Install(ledger) => {
                self.orders = ledger.clone();
                self.seq = ledger.iter().map(|o| o.0).max().unwrap_or(0);
                self.fenced = false;
                self.stream.clear();
            }
        }
    }

    fn push(&mut self, ev: Ev) {
        self.next_id += 1;
        self.stream.push((self.next_id, ev, false, self.lineage));
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    Failover,
    OlderSnapshot,
}

/// Which parts of the design the model runs.
#[derive(Clone, Copy, Debug)]
pub struct Design {
    pub fault: Fault,
    /// Wins and confirms are answered only once the replica has them (`--redis-wait-replicas`
    /// covering confirms); false: answered at once (confirms before e9e1758/88021f1).
    pub wait_replica: bool,
    /// The freshness check takes a gate out of service when it holds pending an order the
    /// ledger already resolved (8dc0968); false: it compares numbering only.
    pub check_resolutions: bool,
    /// The ledger refuses units beyond the total or the limit, and a second resolution.
    pub ledger_rules: bool,
    /// After a fault the gate serves nothing before the freshness check ran on the Redis the
    /// fault left (`fresh.rs`; on a Redis Cluster each campaign on its node's replication
    /// lineage, `lineage.rs`); false: a Redis Cluster before that check, serving at once.
    pub check_after_fault: bool,
    /// The check records in the ledger that the old lineage ends at the new node's last stream
    /// id, and the pipeline refuses (records as lost) an entry of the old lineage above it
    /// (`ledger/postgres/lineage.rs`, Redis Cluster only); false: writes whatever it read.
    pub refuse_left_lineage: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub primary: Redis,
    pub replica: Redis,
    /// Writes the primary made that the replica has not applied yet, oldest first.
    pub backlog: Vec<W>,
    pub snapshot: Option<Redis>,
    pub faulted: bool,
    pub checked: bool,
    /// Answers waiting for the replica: (true: won / false: confirmed, order number, writes
    /// the replica still has to apply before it has the answer's).
    pub waiting: Vec<(bool, u8, usize)>,
    pub won: Vec<u8>,
    /// Wins answered after the fault: (order number, buyer).
    pub won_after: Vec<(u8, u8)>,
    pub confirmed: Vec<u8>,
    /// Entries the consumer holds in memory: (entry id, event, lineage).
    pub consumer: Vec<(u8, Ev, u8)>,
    /// The stream id the old lineage ended at, recorded by the check after the fault.
    pub left_at: Option<u8>,
    pub ledger: Vec<(u8, u8, St)>,
    pub failed: Vec<u8>,
    pub tries: [u8; BUYERS as usize],
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    Claim(u8),
    Confirm(u8),
    Expire(u8),
    Replicate,
    Answer(u8),
    Read,
    Write(u8),
    Snapshot,
    Fault,
    FreshnessCheck,
    RebuildFenced,
}

pub struct Holds {
    pub design: Design,
}

pub const SAFETY: [&str; 5] = [
    "the ledger's live units never exceed the total",
    "a buyer's live units never exceed the limit",
    "a confirm answered 200 is never lost",
    "a won answer is never lost",
    "a won answered after the fault is that buyer's order",
];

impl Holds {
    /// A write to the primary, sent on to the replica.
    pub fn write(s: &mut State, w: W) {
        s.primary.apply(&w);
        s.backlog.push(w);
    }

    /// A write to the primary whose copy on the replica the model lets lag without bound (a
    /// consumer's read marks and acknowledgements): after a failover the promoted replica may
    /// deliver entries again, which the ledger absorbs as replays.
    pub fn write_unreplicated(s: &mut State, w: W) {
        s.primary.apply(&w);
    }

    pub fn answer(&self, s: &mut State, won: bool, n: u8) {
        if self.design.wait_replica {
            s.waiting.push((won, n, s.backlog.len()));
        } else {
            Self::answered(s, won, n);
        }
    }

    /// A win or a confirm answered to its client.
    pub fn answered(s: &mut State, won: bool, n: u8) {
        if !won {
            s.confirmed.push(n);
            return;
        }
        s.won.push(n);
        if s.faulted {
            if let Some(o) = s.primary.orders.iter().find(|o| o.0 == n) {
                s.won_after.push((n, o.1));
            }
        }
    }

    /// The pipeline's write of one event into PostgreSQL. A contradiction (an order number
    /// held for another buyer, a unit the rules refuse, a second resolution) is recorded and
    /// fences the campaign until it is rebuilt.
    ///
    /// Returns false for an entry refused as read from the lineage the check left: it is not
    /// acknowledged, since the node now serving never had it and an entry there may carry the
    /// same id.
    pub fn ledger_write(&self, s: &mut State, (id, ev, lineage): (u8, Ev, u8)) -> bool {
        if self.design.refuse_left_lineage && lineage == 0 && s.left_at.is_some_and(|b| id > b) {
            // Read from the old master, never on the node now serving: recorded as lost.
            if let Ev::Order(n, _) = ev {
                s.failed.push(n);
            }
            return false;
        }
        let rules = self.design.ledger_rules;
        let contradiction = match ev {
            Ev::Order(n, b) => match s.ledger.iter().find(|o| o.0 == n) {
                Some(o) => o.1 != b,
                None => {
                    let live = s.ledger.iter().filter(|o| o.2 != St::Expired);
                    let beyond =
                        live.clone().count() >= TOTAL as usize || live.clone().any(|o| o.1 == b);
                    if !(rules && beyond) {
                        s.ledger.push((n, b, St::Pending));
                        s.ledger.sort();
                    }
                    rules && beyond
                }
            },
            Ev::Resolved(n, st) => match s.ledger.iter_mut().find(|o| o.0 == n) {
                Some(o) if o.2 == St::Pending => {
                    o.2 = st;
                    false
                }
                // `UPDATE … WHERE state = 'pending'` changes nothing; the rules call a
                // different resolution a contradiction.
                Some(o) => rules && o.2 != st,
                None => false,
            },
        };
        if contradiction {
            let n = match ev {
                Ev::Order(n, _) | Ev::Resolved(n, _) => n,
            };
            s.failed.push(n);
            Self::write(s, W::Fence);
        }
        true
    }

    pub fn on_its_way(s: &State, ev: Ev) -> bool {
        s.primary.stream.iter().any(|e| e.1 == ev) || s.consumer.iter().any(|e| e.1 == ev)
    }
}
