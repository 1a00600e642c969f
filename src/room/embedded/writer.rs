//! The one task that writes an embedded room's joins: a batch is timed under each room's
//! lock, written to SQLite in one transaction, and only then applied to memory and answered,
//! so a place is told only once it is on disk (the rules are in the parent module's docs).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::{now_us, Join, Room, Rooms, Shared, Shuffle, BATCH};
use crate::domain::Error;
use crate::ledger::{JoinRow, SqliteLedger, WriteFault};

/// A new member's row, its room and where its join sits in the batch.
struct Decided {
    row: JoinRow,
    room: Shared,
    pre: bool,
    join: usize,
}

/// Writes joins in batches, then makes them visible and answers them.
pub(super) async fn writer(
    ledger: Arc<SqliteLedger>,
    rooms: Arc<Rooms>,
    shuffle: Shuffle,
    mut rx: mpsc::Receiver<Join>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        let decided = decide(&rooms, &batch);
        let rows: Vec<JoinRow> = decided.iter().map(|d| d.row.clone()).collect();
        let mut saved = if rows.is_empty() {
            Ok(())
        } else {
            ledger.room_joins(&rows, false).await
        };
        if let Err(e) = &saved {
            tracing::error!(error = %format!("{e:#}"), joins = rows.len(), "waiting room joins: the write failed");
        }
        // Until the joins timed before `starts_at` are counted out below, no reader draws the
        // pre-queue: settling first means none draws it without rows a restart would replay.
        match &saved {
            Err(WriteFault::Unknown(_)) => {
                rooms.settling.store(true, Ordering::Release);
                for j in &mut batch {
                    if let Some(reply) = j.reply.take() {
                        let _ = reply.send(Err(outcome_unknown()));
                    }
                }
                settle(&ledger, &rows).await;
                saved = Ok(());
            }
            Err(WriteFault::Diverged(_)) => reread(&ledger, &batch, &decided, &shuffle).await,
            _ => {}
        }
        for d in &decided {
            let j = &batch[d.join];
            let mut room = d.room.lock();
            if d.pre {
                room.writing_pre -= 1;
            }
            if saved.is_ok() {
                let r = &d.row;
                room.apply(
                    &j.def,
                    r.user_id.as_str().into(),
                    r.seq,
                    r.joined_at,
                    j.score,
                );
            }
        }
        // The settled rows are in memory now: joins and reads of their users find them.
        rooms.settling.store(false, Ordering::Release);
        for j in batch.drain(..) {
            let Some(reply) = j.reply else { continue };
            let place = rooms
                .get(&j.def.campaign)
                .and_then(|r| r.lock().place(&j.def, &j.user, now_us()));
            let answer = match (place, &saved) {
                (Some(p), _) => Ok(p),
                (None, Err(_)) => Err(Error::not_committed("the join was not written")),
                (None, Ok(())) => Err(Error::Unavailable("the join was lost".into())),
            };
            let _ = reply.send(answer);
        }
    }
}

/// The pause between tries of a write or read that must succeed before the writer goes on:
/// 50 ms, doubling to 2 s, for as long as the disk keeps failing.
struct Pause(std::time::Duration);

impl Default for Pause {
    fn default() -> Pause {
        Pause(std::time::Duration::from_millis(50))
    }
}

impl Pause {
    async fn wait(&mut self) {
        tokio::time::sleep(self.0).await;
        self.0 = (self.0 * 2).min(std::time::Duration::from_secs(2));
    }
}

/// The answer to a join whose write's outcome is unknown: joining again is idempotent and
/// finds the place once the write is settled.
fn outcome_unknown() -> Error {
    Error::OutcomeUnknown(
        "the join's outcome is unknown (a disk error at its commit); join again: it finds \
         the place if the join was kept"
            .into(),
    )
}

/// Settles a write whose outcome is unknown by writing the same rows again (those already on
/// disk are skipped) until a commit succeeds, however long the disk takes. Reading the ledger
/// back would not do: after a failed fsync SQLite leaves the batch's frames in the WAL,
/// invisible to readers, and a restart's recovery may still replay them; only a later commit
/// overwrites them. Meanwhile no other join is written and, while the batch holds joins timed
/// before `starts_at`, no reader draws the pre-queue.
async fn settle(ledger: &SqliteLedger, rows: &[JoinRow]) {
    let mut pause = Pause::default();
    loop {
        match ledger.room_joins(rows, true).await {
            Ok(()) => {
                tracing::warn!(
                    joins = rows.len(),
                    "waiting room joins whose outcome was unknown written again and settled"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(error = %format!("{e:#}"), "waiting room joins not settled yet; writing them again");
                pause.wait().await;
            }
        }
    }
}

/// Each new member's row, timed under its room's lock; a user twice in the batch gets one.
fn decide(rooms: &Rooms, batch: &[Join]) -> Vec<Decided> {
    let mut out = Vec::new();
    let mut seen: HashMap<(&str, &str), ()> = HashMap::new();
    let mut seqs: HashMap<&str, i64> = HashMap::new();
    for (i, j) in batch.iter().enumerate() {
        if seen.insert((&j.def.campaign, &j.user), ()).is_some() {
            continue;
        }
        let shared = rooms.entry(&j.def.campaign);
        let mut room = shared.lock();
        if room.members.contains_key(j.user.as_str()) {
            continue;
        }
        let seq = seqs.entry(&j.def.campaign).or_insert(room.last_seq);
        *seq += 1;
        let before = room.writing_pre;
        let (seq, at) = room.decide(&j.def, now_us(), *seq);
        let pre = room.writing_pre > before;
        drop(room);
        out.push(Decided {
            row: JoinRow {
                campaign_id: j.def.campaign.clone(),
                user_id: j.user.clone(),
                seq,
                joined_at: at,
            },
            room: shared,
            pre,
            join: i,
        });
    }
    out
}

/// After the ledger refused a batch for rows it already holds (memory is behind the disk,
/// which settling every unknown outcome should make impossible), each room of the batch is
/// read again from the ledger, as a restart would replay it, until the read succeeds: memory
/// then holds exactly what the disk does, and the next batch is numbered after it.
async fn reread(ledger: &SqliteLedger, batch: &[Join], decided: &[Decided], shuffle: &Shuffle) {
    let mut done: Vec<&str> = Vec::new();
    for d in decided {
        let def = &batch[d.join].def;
        if done.contains(&def.campaign.as_str()) {
            continue;
        }
        done.push(&def.campaign);
        let mut pause = Pause::default();
        loop {
            let mut fresh = Room::default();
            let read = ledger
                .room_members_of(&def.campaign, |r| {
                    let score = shuffle(&r.campaign_id, &r.user_id);
                    fresh.apply(def, r.user_id.into(), r.seq, r.joined_at, score);
                    Ok(())
                })
                .await;
            match read {
                Ok(n) => {
                    tracing::warn!(campaign = %def.campaign, joined = n, "waiting room read again from the ledger, which held joins memory did not");
                    let old = {
                        let mut room = d.room.lock();
                        // The batch's joins timed before `starts_at` are counted out by the caller.
                        fresh.writing_pre = room.writing_pre;
                        std::mem::replace(&mut *room, fresh)
                    };
                    drop(old);
                    break;
                }
                Err(e) => {
                    tracing::error!(campaign = %def.campaign, error = %format!("{e:#}"), "waiting room could not be read again; trying again");
                    pause.wait().await;
                }
            }
        }
    }
}
