//! One campaign of the scale-out deployment as a state machine: `TOTAL` units, `BUYERS`
//! buyers with a per-user limit of one, each buyer claiming at most `TRIES` times, at most one
//! RDB snapshot, one restore of it, and one consumer crash. Small bounds, every interleaving.

use stateright::{Model, Property};

pub const TOTAL: u8 = 2;
pub const BUYERS: u8 = 3;
pub const TRIES: u8 = 2;

/// The parts of the design the model can switch, to show which part closes the hole.
#[derive(Clone, Copy, Debug)]
pub struct Design {
    /// The freshness check fences a stale gate whose stream still holds orders until the
    /// pipeline drained it, then rebuilds it (`drop_stale.lua` → 2, `fence.lua` 'drop');
    /// false: it rebuilds from the ledger at once (907f9e7).
    pub fence_stale_with_stream: bool,
    /// The ledger refuses a unit beyond the total or the limit (migrations 0007/0008);
    /// false: it writes whatever it is handed (907f9e7).
    pub ledger_rules: bool,
}

impl Design {
    pub const BEFORE: Design = Design {
        fence_stale_with_stream: false,
        ledger_rules: false,
    };
    pub const NOW: Design = Design {
        fence_stale_with_stream: true,
        ledger_rules: true,
    };
}

/// The claim gate in Redis: `{c:<id>}:meta` (remaining, fenced), `:users`, `:seq`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Gate {
    pub remaining: u8,
    /// Bit `b` set: buyer `b` holds a unit.
    pub holders: u8,
    pub seq: u8,
    pub fenced: bool,
}

/// An order in the stream `{c:<id>}:orders`: its number, its buyer, and whether a consumer
/// read it (it is in the group's pending entries list).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct Entry {
    pub seq: u8,
    pub buyer: u8,
    pub read: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    pub gate: Gate,
    pub stream: Vec<Entry>,
    /// Entries a live consumer holds in memory, to write.
    pub consumer: Vec<(u8, u8)>,
    /// Redis's RDB snapshot: the gate and the stream when it was taken.
    pub snapshot: Option<(Gate, Vec<Entry>)>,
    pub restored: bool,
    pub crashed: bool,
    /// Claims go through only on a link the freshness check passed (`conn.rs`, gated).
    pub checked: bool,
    /// PostgreSQL `orders`: (order number, buyer), all live.
    pub ledger: Vec<(u8, u8)>,
    /// PostgreSQL `failed_orders`: wins the ledger refused.
    pub failed: Vec<(u8, u8)>,
    pub tries: [u8; BUYERS as usize],
    /// A restore happened while the stream held an order a consumer had read.
    pub restored_with_read_order: bool,
    /// A fenced gate was rebuilt from the ledger.
    pub rebuilt_after_fence: bool,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// `claims.lua`: a claim that wins (rejections change nothing and are left out).
    Claim(u8),
    /// `XREADGROUP` by the consumer: the oldest unread entry.
    Read,
    /// `XAUTOCLAIM`: an entry read by a consumer that died, taken over.
    Reclaim(u8),
    /// The pipeline writes a held entry into the ledger and acknowledges it (`XACK`).
    Write(u8),
    /// The consumer process dies: what it held in memory is gone, its entries stay pending.
    CrashConsumer,
    /// Redis saves an RDB snapshot.
    Snapshot,
    /// Redis is killed and restarts from that snapshot.
    RestoreSnapshot,
    /// `fresh.rs`: the gate's numbering compared with the ledger's, after the reconnect.
    FreshnessCheck,
    /// The pipeline rebuilds a fenced campaign whose stream is drained (`install.lua`).
    RebuildFenced,
}

pub struct Protocol {
    pub design: Design,
}

impl Protocol {
    pub fn small(design: Design) -> Self {
        Protocol { design }
    }

    fn rebuild_from_ledger(s: &mut State) {
        s.gate = Gate {
            remaining: TOTAL.saturating_sub(s.ledger.len() as u8),
            holders: s.ledger.iter().fold(0, |h, (_, b)| h | 1 << b),
            seq: s.ledger.iter().map(|(n, _)| *n).max().unwrap_or(0),
            fenced: false,
        };
    }
}

/// The properties checked in every reachable state.
pub const SAFETY: [&str; 2] = [
    "the ledger's live units never exceed the total",
    "a buyer's live units never exceed the limit",
];

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            gate: Gate {
                remaining: TOTAL,
                holders: 0,
                seq: 0,
                fenced: false,
            },
            stream: vec![],
            consumer: vec![],
            snapshot: None,
            restored: false,
            crashed: false,
            checked: true,
            ledger: vec![],
            failed: vec![],
            tries: [0; BUYERS as usize],
            restored_with_read_order: false,
            rebuilt_after_fence: false,
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let g = &s.gate;
        for b in 0..BUYERS {
            if s.checked
                && !g.fenced
                && g.remaining > 0
                && g.holders & (1 << b) == 0
                && s.tries[b as usize] < TRIES
            {
                out.push(Action::Claim(b));
            }
        }
        if s.stream.iter().any(|e| !e.read) {
            out.push(Action::Read);
        }
        for e in &s.stream {
            if e.read && !s.consumer.contains(&(e.seq, e.buyer)) {
                out.push(Action::Reclaim(e.seq));
            }
        }
        for (n, _) in &s.consumer {
            out.push(Action::Write(*n));
        }
        if !s.crashed && !s.consumer.is_empty() {
            out.push(Action::CrashConsumer);
        }
        if s.snapshot.is_none() {
            out.push(Action::Snapshot);
        }
        if s.snapshot.is_some() && !s.restored {
            out.push(Action::RestoreSnapshot);
        }
        if !s.checked {
            out.push(Action::FreshnessCheck);
        }
        if g.fenced && s.stream.is_empty() {
            out.push(Action::RebuildFenced);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Claim(b) => {
                s.tries[b as usize] += 1;
                s.gate.remaining -= 1;
                s.gate.holders |= 1 << b;
                s.gate.seq += 1;
                s.stream.push(Entry {
                    seq: s.gate.seq,
                    buyer: b,
                    read: false,
                });
            }
            Action::Read => {
                let e = s.stream.iter_mut().find(|e| !e.read)?;
                e.read = true;
                s.consumer.push((e.seq, e.buyer));
            }
            Action::Reclaim(n) => {
                let e = s.stream.iter().find(|e| e.seq == n && e.read)?;
                s.consumer.push((e.seq, e.buyer));
            }
            Action::Write(n) => {
                let at = s.consumer.iter().position(|(m, _)| *m == n)?;
                let (n, b) = s.consumer.remove(at);
                self.write(&mut s, n, b);
                // XACK: the entry leaves the stream of the Redis the consumer now talks to.
                s.stream.retain(|e| !(e.seq == n && e.buyer == b));
                s.consumer.retain(|o| *o != (n, b));
            }
            Action::CrashConsumer => {
                s.consumer.clear();
                s.crashed = true;
            }
            Action::Snapshot => s.snapshot = Some((s.gate.clone(), s.stream.clone())),
            Action::RestoreSnapshot => {
                let (gate, stream) = s.snapshot.clone()?;
                s.restored_with_read_order = stream.iter().any(|e| e.read);
                s.gate = gate;
                s.stream = stream;
                s.restored = true;
                s.checked = false;
            }
            Action::FreshnessCheck => {
                let ledger_hi = s.ledger.iter().map(|(n, _)| *n).max().unwrap_or(0);
                if s.gate.seq < ledger_hi {
                    if self.design.fence_stale_with_stream && !s.stream.is_empty() {
                        s.gate.fenced = true;
                    } else {
                        Self::rebuild_from_ledger(&mut s);
                    }
                }
                s.checked = true;
            }
            Action::RebuildFenced => {
                Self::rebuild_from_ledger(&mut s);
                s.rebuilt_after_fence = true;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SAFETY[0], |_, s: &State| s.ledger.len() <= TOTAL as usize),
            Property::always(SAFETY[1], |_, s: &State| {
                (0..BUYERS).all(|b| s.ledger.iter().filter(|(_, x)| *x == b).count() <= 1)
            }),
            Property::sometimes(
                "a restore while the stream holds a read order",
                |_, s: &State| s.restored_with_read_order,
            ),
            Property::sometimes(
                "a fenced gate rebuilt from the drained ledger",
                |_, s: &State| s.rebuilt_after_fence,
            ),
            Property::sometimes("the ledger refuses an order", |_, s: &State| {
                !s.failed.is_empty()
            }),
        ]
    }
}

impl Protocol {
    /// The pipeline's insert (`ON CONFLICT DO NOTHING` for a replay of the very same order).
    /// An order number the ledger holds for another order, or (with the rules) a unit beyond
    /// the total or the limit, is refused: the buyer told `won` is recorded in `failed_orders`
    /// and the campaign fenced, to be rebuilt once its stream is drained.
    fn write(&self, s: &mut State, n: u8, b: u8) {
        if let Some((_, held)) = s.ledger.iter().find(|(m, _)| *m == n) {
            if *held != b {
                s.failed.push((n, b));
                s.gate.fenced = true;
            }
            return;
        }
        let beyond = s.ledger.len() >= TOTAL as usize || s.ledger.iter().any(|(_, x)| *x == b);
        if self.design.ledger_rules && beyond {
            s.failed.push((n, b));
            s.gate.fenced = true;
            return;
        }
        s.ledger.push((n, b));
        s.ledger.sort();
    }
}
