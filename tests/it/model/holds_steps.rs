//! The actions of the held-orders model (`holds.rs`) and the code each stands for
//! (docs/PROTOCOL.md).

use stateright::{Model, Property};

use super::holds::{Action, Ev, Fault, Holds, Redis, St, State, BUYERS, SAFETY, TOTAL, TRIES, W};

impl Model for Holds {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            primary: Redis::default(),
            replica: Redis::default(),
            backlog: vec![],
            snapshot: None,
            faulted: false,
            checked: true,
            waiting: vec![],
            won: vec![],
            won_after: vec![],
            confirmed: vec![],
            consumer: vec![],
            left_at: None,
            ledger: vec![],
            failed: vec![],
            tries: [0; BUYERS as usize],
        }]
    }

    fn actions(&self, s: &State, out: &mut Vec<Action>) {
        let p = &s.primary;
        let serving = s.checked && !p.fenced;
        for b in 0..BUYERS {
            let live = p.orders.iter().filter(|o| o.2 != St::Expired);
            if serving
                && live.clone().count() < TOTAL as usize
                && !live.clone().any(|o| o.1 == b)
                && s.tries[b as usize] < TRIES
            {
                out.push(Action::Claim(b));
            }
        }
        for o in p.orders.iter().filter(|o| serving && o.2 == St::Pending) {
            let asked = s.confirmed.contains(&o.0) || s.waiting.iter().any(|w| !w.0 && w.1 == o.0);
            if !asked {
                out.push(Action::Confirm(o.0));
            }
            out.push(Action::Expire(o.0));
        }
        if !s.backlog.is_empty() {
            out.push(Action::Replicate);
        }
        for (i, w) in s.waiting.iter().enumerate() {
            if w.2 == 0 {
                out.push(Action::Answer(i as u8));
            }
        }
        if p.stream.iter().any(|e| !e.2) {
            out.push(Action::Read);
        }
        // The consumer writes what it read in stream order (no consumer dies in this model,
        // so nothing is reclaimed out of order) and, with the wait, only once the replica has
        // the entry (the pipeline's own `WAIT`; entries share ids on primary and replica).
        if let Some((id, _, _)) = s.consumer.iter().min_by_key(|e| e.0) {
            if !self.design.wait_replica || *id <= s.replica.next_id {
                out.push(Action::Write(*id));
            }
        }
        if self.design.fault == Fault::OlderSnapshot && s.snapshot.is_none() {
            out.push(Action::Snapshot);
        }
        if !s.faulted && (self.design.fault == Fault::Failover || s.snapshot.is_some()) {
            out.push(Action::Fault);
        }
        if !s.checked {
            out.push(Action::FreshnessCheck);
        }
        if p.fenced && p.stream.is_empty() {
            out.push(Action::RebuildFenced);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Claim(b) => {
                s.tries[b as usize] += 1;
                let n = s.primary.seq + 1;
                Self::write(&mut s, W::Claim(n, b));
                self.answer(&mut s, true, n);
            }
            Action::Confirm(n) => {
                Self::write(&mut s, W::Resolve(n, St::Confirmed));
                self.answer(&mut s, false, n);
            }
            Action::Expire(n) => Self::write(&mut s, W::Resolve(n, St::Expired)),
            Action::Replicate => {
                let w = s.backlog.remove(0);
                s.replica.apply(&w);
                for a in &mut s.waiting {
                    a.2 = a.2.saturating_sub(1);
                }
            }
            Action::Answer(i) => {
                let (won, n, _) = s.waiting.remove(i as usize);
                Self::answered(&mut s, won, n);
            }
            Action::Read => {
                let &(id, ev, _, lineage) = s.primary.stream.iter().find(|e| !e.2)?;
                Self::write_unreplicated(&mut s, W::Read(id));
                s.consumer.push((id, ev, lineage));
            }
            Action::Write(id) => {
                let at = s.consumer.iter().position(|e| e.0 == id)?;
                let (id, ev, lineage) = s.consumer.remove(at);
                if self.ledger_write(&mut s, (id, ev, lineage)) {
                    Self::write_unreplicated(&mut s, W::Ack(id));
                }
            }
            Action::Snapshot => s.snapshot = Some(s.primary.clone()),
            Action::Fault => {
                let back = match self.design.fault {
                    // Sentinel promotes the replica; the old primary is gone.
                    Fault::Failover => s.replica.clone(),
                    // Redis restarts from the snapshot; the replica resyncs from it.
                    Fault::OlderSnapshot => s.snapshot.clone()?,
                };
                // The pipeline's wait fails for entries the promoted replica never had: they
                // are not written (they stay in no stream: the old primary is gone).
                if self.design.wait_replica {
                    s.consumer.retain(|e| e.0 <= back.next_id);
                }
                let back = Redis { lineage: 1, ..back };
                s.primary = back.clone();
                s.replica = back;
                s.backlog.clear();
                // Answers still waiting for the replica are 503 "outcome unknown".
                s.waiting.clear();
                s.faulted = true;
                s.checked = !self.design.check_after_fault;
            }
            Action::FreshnessCheck => {
                if self.design.refuse_left_lineage {
                    s.left_at = Some(s.primary.next_id);
                }
                let hi = s.ledger.iter().map(|o| o.0).max().unwrap_or(0);
                let behind = s.primary.seq < hi;
                let resolved_here = self.design.check_resolutions
                    && s.primary.orders.iter().any(|o| {
                        o.2 == St::Pending
                            && s.ledger.iter().any(|l| l.0 == o.0 && l.2 != St::Pending)
                    });
                if behind || resolved_here {
                    if s.primary.stream.is_empty() {
                        let ledger = s.ledger.clone();
                        Self::write(&mut s, W::Install(ledger));
                    } else {
                        Self::write(&mut s, W::Fence);
                    }
                }
                s.checked = true;
            }
            Action::RebuildFenced => {
                let ledger = s.ledger.clone();
                Self::write(&mut s, W::Install(ledger));
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(SAFETY[0], |_, s: &State| {
                s.ledger.iter().filter(|o| o.2 != St::Expired).count() <= TOTAL as usize
            }),
            Property::always(SAFETY[1], |_, s: &State| {
                (0..BUYERS).all(|b| {
                    s.ledger
                        .iter()
                        .filter(|o| o.1 == b && o.2 != St::Expired)
                        .count()
                        <= 1
                })
            }),
            Property::always(SAFETY[2], |_, s: &State| {
                s.confirmed.iter().all(|n| {
                    s.ledger.iter().any(|o| o.0 == *n && o.2 == St::Confirmed)
                        || Self::on_its_way(s, Ev::Resolved(*n, St::Confirmed))
                })
            }),
            Property::always(SAFETY[3], |_, s: &State| {
                s.won.iter().all(|n| {
                    s.ledger.iter().any(|o| o.0 == *n)
                        || s.failed.contains(n)
                        || s.primary
                            .stream
                            .iter()
                            .any(|e| matches!(e.1, Ev::Order(m, _) if m == *n))
                        || s.consumer
                            .iter()
                            .any(|e| matches!(e.1, Ev::Order(m, _) if m == *n))
                })
            }),
            Property::always(SAFETY[4], |_, s: &State| {
                s.won_after.iter().all(|&(n, b)| {
                    s.ledger.iter().any(|o| o.0 == n && o.1 == b)
                        || Self::on_its_way(s, Ev::Order(n, b))
                })
            }),
            Property::sometimes("a confirm answered 200", |_, s: &State| {
                !s.confirmed.is_empty()
            }),
            Property::sometimes("a fault after a confirm", |_, s: &State| {
                s.faulted && !s.confirmed.is_empty()
            }),
        ]
    }
}
