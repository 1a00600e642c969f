//! The opening's report: latency of joins, reads and claims, the room's fairness and pace, and
//! the verification, as text or one JSON document (`--json`).

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use super::check::Fairness;
use super::user::Tally;
use super::Params;
use crate::bench::report::{Latency, Verification};
use crate::bench::verify::Violation;
use crate::domain::RoomAnswer;

#[derive(Debug, Clone, Serialize)]
pub struct OpeningReport {
    pub url: String,
    pub campaign: String,
    pub scenario: &'static str,
    pub params: Params,
    /// From the first join to the last user done.
    pub seconds: f64,
    pub joins: u64,
    pub status_reads: u64,
    pub claims: u64,
    pub join_ms: Latency,
    pub status_ms: Latency,
    pub claim_ms: Latency,
    /// Outcomes of the admitted users' claims.
    pub outcomes: BTreeMap<String, u64>,
    /// Answers other than 200 to joins, reads and real claims, by status.
    pub non_200: BTreeMap<u16, u64>,
    pub transport_errors: u64,
    /// Users whose join or read failed every retry.
    pub gave_up: u64,
    pub room: Fairness,
    pub verification: Option<Verification>,
    /// With `--no-verify`: the room's checks, which need no ledger.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub room_violations: Vec<Violation>,
    /// Each user a join placed, and the admission it was told if it was, to read back later
    /// (the fault campaign does, once every fault is healed).
    #[serde(skip)]
    pub told: Vec<(String, Option<RoomAnswer>)>,
}

impl OpeningReport {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        url: String,
        campaign: String,
        params: Params,
        elapsed: Duration,
        tally: Tally,
        room: Fairness,
        verification: Option<Verification>,
        room_violations: Vec<Violation>,
    ) -> Self {
        Self {
            url,
            campaign,
            scenario: "opening",
            params,
            seconds: elapsed.as_secs_f64(),
            joins: tally.join.len(),
            status_reads: tally.status.len(),
            claims: tally.claim.len(),
            join_ms: Latency::of(&tally.join),
            status_ms: Latency::of(&tally.status),
            claim_ms: Latency::of(&tally.claim),
            outcomes: tally.outcomes,
            non_200: tally.refused,
            transport_errors: tally.transport_errors,
            gave_up: tally.gave_up,
            room,
            verification,
            room_violations,
            told: Vec::new(),
        }
    }

    /// Every violation found, of the ledger's invariants and of the room's.
    pub fn violations(&self) -> impl Iterator<Item = &Violation> {
        self.verification
            .iter()
            .flat_map(|v| v.violations.iter())
            .chain(self.room_violations.iter())
    }

    pub fn clean(&self) -> bool {
        self.violations().next().is_none()
    }

    pub fn write_json(&self, out: &mut dyn Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self)?;
        writeln!(out)
    }

    pub fn write_text(&self, out: &mut dyn Write) -> std::io::Result<()> {
        let p = &self.params;
        writeln!(
            out,
            "seckill bench: opening: {} units, {} users, room {}/s after a {:.1}s pre-queue, \
             {} in flight",
            p.stock, p.users, p.admit_per_second, p.prequeue_seconds, p.connections
        )?;
        writeln!(
            out,
            "Target:        {} campaign {}",
            self.url, self.campaign
        )?;
        writeln!(out, "Time taken:    {:.2}s", self.seconds)?;
        let lat = |l: &Latency| {
            format!(
                "p50 {:.2}  p90 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2} ms",
                l.p50, l.p90, l.p99, l.p999, l.max
            )
        };
        writeln!(
            out,
            "Joins:         {:>8}  {}",
            self.joins,
            lat(&self.join_ms)
        )?;
        writeln!(
            out,
            "Status reads:  {:>8}  {}",
            self.status_reads,
            lat(&self.status_ms)
        )?;
        writeln!(
            out,
            "Claims:        {:>8}  {}",
            self.claims,
            lat(&self.claim_ms)
        )?;
        writeln!(out, "Outcomes:      {:?}", self.outcomes)?;
        if !self.non_200.is_empty() || self.transport_errors > 0 || self.gave_up > 0 {
            writeln!(
                out,
                "Not 200:       {:?}, {} transport errors, {} users gave up",
                self.non_200, self.transport_errors, self.gave_up
            )?;
        }
        let r = &self.room;
        writeln!(
            out,
            "Room:          {} in the pre-queue ({} admitted), {} joined after the start ({} \
             admitted), {} sent before it and placed at once, {} read sold_out",
            r.prequeue_users,
            r.admitted_prequeue,
            r.later_users,
            r.admitted_later,
            r.straddling_start,
            r.sold_out_in_room
        )?;
        let rho = |x: Option<f64>| x.map_or("n/a".to_owned(), |x| format!("{x:+.3}"));
        writeln!(
            out,
            "Fairness:      rank correlation of admission with join order: pre-queue {}, \
             later joiners {}",
            rho(r.prequeue_rank_correlation),
            rho(r.later_rank_correlation)
        )?;
        writeln!(
            out,
            "Pace:          first admission {} ms after the start, at most {} in any second \
             (rate {}); per second: {:?}",
            r.first_admission_ms
                .map_or("n/a".to_owned(), |m| m.to_string()),
            r.max_admitted_in_one_second,
            p.admit_per_second,
            r.admitted_per_second
        )?;
        writeln!(
            out,
            "Door:          {} claims without a valid ticket, {} refused 403 not_admitted",
            r.cheat_claims, r.cheat_claims_refused_not_admitted
        )?;
        match &self.verification {
            None => writeln!(out, "Verification:  skipped (--no-verify)")?,
            Some(v) => writeln!(out, "Verification:  {}", v.ledger_summary())?,
        }
        let all: Vec<&Violation> = self.violations().collect();
        if all.is_empty() {
            writeln!(out, "Result:        every invariant held")?;
        } else {
            writeln!(out, "Result:        {} VIOLATIONS", all.len())?;
            for v in all.iter().take(50) {
                writeln!(out, "  [{:?}] {}", v.invariant, v.message)?;
            }
        }
        Ok(())
    }
}
