//! The guarantees, checked by the ledgers themselves at write time.
//!
//! The gate (the embedded engine's memory, or Redis) decides every claim, and for a long time
//! the ledger wrote down whatever it was handed: a gate that went back in time, a second
//! deployment on the same database or a bug sold the same units twice and the ledger took
//! them. Now each ledger refuses, in the transaction that would write it, a state the
//! guarantees forbid (PostgreSQL: migration 0007's triggers; SQLite: migration 0008's triggers and
//! constraints, and the writer's counts of each batch's new orders, `sqlite::live`):
//!
//! | rule | what it refuses |
//! | --- | --- |
//! | `campaign_live_within_total` | a campaign's live units (active, pending, confirmed) above its total |
//! | `holdings_within_limit` | a buyer's live units in a campaign above its per-user limit |
//! | `live_codes_pkey` | a code held by two live orders |
//! | `order_state_once` | an order leaving `pending` twice, or a final state changing (but active or confirmed → cancelled) |
//! | `order_fixed` | a change of an order's id, campaign, buyer, quantity or codes (PostgreSQL; SQLite's writer never issues one) |
//!
//! Totals and limits are checked where units are added, never where they go back: a ledger
//! oversold before the rules existed still starts, and can be cancelled back within its total.
//!
//! The scale-out pipeline handles a refusal as a contradiction between gate and ledger (the
//! buyer told `won` is recorded in `failed_orders`, the campaign fenced and rebuilt from the
//! ledger); the embedded engine re-reads its state from the ledger (`WriteFault::Diverged`).

/// The rules, by the constraint name their refusal carries.
pub const RULES: [&str; 5] = [
    "campaign_live_within_total",
    "holdings_within_limit",
    "live_codes_pkey",
    "order_state_once",
    "order_fixed",
];

/// The rule a database error names, when the ledger refused a write for one of the guarantees
/// (also through a [`WriteFault`](super::WriteFault), which keeps the error's text only).
pub fn refused_rule(e: &anyhow::Error) -> Option<&'static str> {
    let named = e
        .chain()
        .filter_map(|c| c.downcast_ref::<sqlx::Error>())
        .find_map(|e| e.as_database_error()?.constraint().map(str::to_owned));
    if let Some(rule) = named.and_then(|n| RULES.iter().copied().find(|r| *r == n)) {
        return Some(rule);
    }
    // SQLite names the rule in its message only (a trigger's RAISE, a CHECK constraint, the
    // writer's own refusal); PostgreSQL's messages name the constraint too.
    let text = format!("{e:#}");
    RULES.iter().copied().find(|r| text.contains(r))
}
