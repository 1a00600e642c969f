//! The figures of a campaign, summed over its schedules, and how they are printed: a line
//! per figure for the operator, and the same as one JSON document for CI and scripts.

use std::collections::BTreeMap;

use serde::Serialize;

/// The figures of a campaign.
#[derive(Debug, Default, Serialize)]
pub struct Totals {
    pub seed: u64,
    pub schedules: u64,
    pub faults: BTreeMap<String, u64>,
    pub faults_skipped: u64,
    /// Sentinel deployment: what the faults on the primary did (`after kill -9`,
    /// `SENTINEL FAILOVER`, `kill -9 without failover`).
    pub failovers: BTreeMap<String, u64>,
    /// How the embedded data disk was made full: a real tmpfs, or the injected fault.
    pub data_disk: Option<String>,
    /// Processes that exited on their own with status 1 (a dependency unreachable at start)
    /// and were started again, as a supervisor would.
    pub supervised_restarts: u64,
    pub claims: u64,
    pub won: u64,
    pub answers_503: u64,
    pub outcome_unknown: u64,
    pub no_answer: u64,
    /// Sentinel deployment: answered wins the ledger does not hold after a failover (also
    /// violations; counted apart to measure what an asynchronous replica costs).
    pub lost_to_failover: u64,
    /// Scale-out: answered wins a Redis restored from an older snapshot (or a Cluster replica
    /// promoted behind its master) took back, and wins answered in its window that the ledger
    /// refused (`failed_orders`); excused, not violations (`super::excuse`).
    pub lost_to_rewind: u64,
    pub refused_after_rewind: u64,
    pub confirms_lost_to_rewind: u64,
    /// Held orders: confirms answered 200, and how the orders ended.
    pub confirms_200: u64,
    pub confirmed: u64,
    pub expired: u64,
    /// Lock clients: leases granted, and stale holders' writes the resource refused.
    pub lock_grants: u64,
    pub stale_writes_refused: u64,
    /// Openings behind a waiting room run beside the storm, and the users they admitted.
    pub openings: u64,
    pub opening_admitted: u64,
    pub orders_checked: u64,
    pub violations: u64,
    pub seconds: f64,
    /// Each failing schedule: its replay line and findings.
    pub failures: Vec<String>,
}

/// Prints the totals (text, then JSON if asked).
pub fn print_totals(t: &Totals, json: bool) {
    println!(
        "campaign of seed {}: {} schedules in {:.0}s",
        t.seed, t.schedules, t.seconds
    );
    for (k, n) in &t.faults {
        println!("  faults {k:<24} {n}");
    }
    for (k, n) in &t.failovers {
        println!("  failovers {k:<21} {n}");
    }
    if let Some(how) = &t.data_disk {
        println!("  data disk full: {how}");
    }
    println!(
        "  faults skipped {}\n  supervised restarts {}\n  claims {}\n  won answers {}\n  503 answers {} (outcome unknown {})\n  \
         no answer {}\n  lost to failover {}\n  lost to a snapshot restore or Cluster failover {} (and {} refused by the ledger, {} confirms)\n  confirms answered 200 {}\n  orders confirmed {}\n  \
         orders expired {}\n  lock grants {}\n  stale lock writes refused {}\n  openings {} ({} admitted)\n  orders checked {}\n  \
         violations {}",
        t.faults_skipped,
        t.supervised_restarts,
        t.claims,
        t.won,
        t.answers_503,
        t.outcome_unknown,
        t.no_answer,
        t.lost_to_failover,
        t.lost_to_rewind,
        t.refused_after_rewind,
        t.confirms_lost_to_rewind,
        t.confirms_200,
        t.confirmed,
        t.expired,
        t.lock_grants,
        t.stale_writes_refused,
        t.openings,
        t.opening_admitted,
        t.orders_checked,
        t.violations
    );
    if json {
        match serde_json::to_string_pretty(t) {
            Ok(s) => println!("{s}"),
            Err(e) => tracing::error!(error = %e, "cannot print the totals as JSON"),
        }
    }
}
