//! Every metric seckill exports: name, kind, labels and meaning, in one table.
//!
//! The recorders are described from this table, the README's metrics table lists the same
//! rows (a unit test checks it) and the Grafana files under `deploy/` may only query names
//! that a live server exposes (an integration test checks that).

/// The kind of a metric, as Prometheus calls it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One exported metric family.
#[derive(Debug, Clone, Copy)]
pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static str,
    pub help: &'static str,
}

const fn f(name: &'static str, kind: Kind, labels: &'static str, help: &'static str) -> Family {
    Family {
        name,
        kind,
        labels,
        help,
    }
}

use Kind::{Counter, Gauge, Histogram};

pub const HTTP_DURATION: &str = "seckill_http_request_duration_seconds";
pub const CLAIMS: &str = "seckill_claims_total";
pub const ENGINE_CLAIMS: &str = "seckill_engine_claims_total";
pub const RATE_LIMITED: &str = "seckill_rate_limited_total";
pub const SHED: &str = "seckill_shed_total";
pub const RATE_KEYS_EVICTED: &str = "seckill_rate_keys_evicted_total";
pub const SHARE_REFUSED: &str = "seckill_client_share_refused_total";
pub const TIMEOUTS: &str = "seckill_timeouts_total";
pub const IDENTITY_REFUSED: &str = "seckill_identity_refused_total";
pub const IN_FLIGHT: &str = "seckill_in_flight";
pub const CLOCK_STEP: &str = "seckill_clock_step_seconds";
pub const CAMPAIGN_ENGINE_CLAIMS: &str = "seckill_campaign_engine_claims_total";
pub const CAMPAIGN_FAST_SOLD_OUT: &str = "seckill_campaign_fast_sold_out_total";
pub const CAMPAIGN_ADMISSION_REFUSED: &str = "seckill_campaign_admission_refused_total";
pub const CAMPAIGN_REMAINING: &str = "seckill_campaign_remaining";
pub const CAMPAIGN_PENDING: &str = "seckill_campaign_pending";
pub const CAMPAIGN_LABELS_OVERFLOW: &str = "seckill_campaign_labels_overflow";
pub const COMMIT_BATCH: &str = "seckill_group_commit_batch_size";
pub const COMMIT_DURATION: &str = "seckill_group_commit_duration_seconds";
pub const COMMIT_FAILURES: &str = "seckill_group_commit_failures_total";
pub const REDIS_SCRIPT_DURATION: &str = "seckill_redis_script_duration_seconds";
pub const PIPELINE_LAG: &str = "seckill_pipeline_lag";
pub const PIPELINE_BATCH: &str = "seckill_pipeline_batch_size";
pub const PIPELINE_INSERT_DURATION: &str = "seckill_pipeline_insert_duration_seconds";
pub const PIPELINE_REFUSED: &str = "seckill_pipeline_refused_total";
pub const REDIS_SETTINGS: &str = "seckill_redis_settings";
pub const REDIS_REFUSING: &str = "seckill_redis_refusing_claims";
pub const HOLDS_CONFIRMED: &str = "seckill_holds_confirmed_total";
pub const HOLDS_EXPIRED: &str = "seckill_holds_expired_total";
pub const HOLDS_LATENESS_SUM: &str = "seckill_holds_expiry_lateness_sum_seconds";
pub const HOLDS_LATENESS_MAX: &str = "seckill_holds_expiry_lateness_max_seconds";
pub const SINK_EVENTS: &str = "seckill_sink_events_total";
pub const SINK_BACKLOG: &str = "seckill_sink_backlog";
pub const SINK_ENABLED: &str = "seckill_sink_enabled";
pub const SINK_HOLDER: &str = "seckill_sink_holder";
pub const SINK_LAG: &str = "seckill_sink_lag_seconds";
pub const ROOM_JOINED: &str = "seckill_room_joined";
pub const ROOM_WAITING: &str = "seckill_room_waiting";
pub const ROOM_ADMITTED: &str = "seckill_room_admitted";
pub const ROOM_WAIT: &str = "seckill_room_estimated_wait_seconds";
pub const ROOM_TICKETS_REFUSED: &str = "seckill_room_tickets_refused_total";

/// Every family seckill itself records (process metrics come from `metrics-process`, see
/// [`PROCESS`]).
pub const FAMILIES: &[Family] = &[
    f(HTTP_DURATION, Histogram, "route, outcome",
      "Time from request to answer. Claims: outcome is the claim outcome or the error code; other routes: the status class (2xx, 4xx, 5xx)"),
    f(CLAIMS, Counter, "campaign, outcome",
      "Claim answers by campaign (known campaigns; `other` for unknown ids and beyond the label cap) and outcome"),
    f(ENGINE_CLAIMS, Counter, "", "Claims handed to the engine (all campaigns)"),
    f(RATE_LIMITED, Counter, "subject", "Claims refused 429 by a rate limit (user, ip; capacity is no longer used: a full table forgets old buckets)"),
    f(SHED, Counter, "", "Requests refused 503 by the in-flight bound"),
    f(RATE_KEYS_EVICTED, Counter, "",
      "Live rate-limit buckets forgotten because the table was full (--rate-max-keys; embedded): each only loosens one key's rate"),
    f(SHARE_REFUSED, Counter, "limit",
      "Requests (limit=in_flight, 503) and connections (limit=connections, closed at accept) refused because one client address held its whole share"),
    f(TIMEOUTS, Counter, "", "Requests answered 503 by the request timeout"),
    f(IDENTITY_REFUSED, Counter, "", "Claims refused 401 for their identity token"),
    f(IN_FLIGHT, Gauge, "", "Public requests in flight"),
    f(CLOCK_STEP, Gauge, "", "How far the system clock reads from the time seckill keeps (a step since start; 0 normally)"),
    f(CAMPAIGN_ENGINE_CLAIMS, Counter, "campaign", "Claims of the campaign handed to the engine"),
    f(CAMPAIGN_FAST_SOLD_OUT, Counter, "campaign", "Claims answered sold_out from memory"),
    f(CAMPAIGN_ADMISSION_REFUSED, Counter, "campaign", "Claims refused by the admission gate"),
    f(CAMPAIGN_REMAINING, Gauge, "campaign", "Remaining stock as this instance's stock board sees it"),
    f(CAMPAIGN_PENDING, Gauge, "campaign",
      "Units in pending orders (holds; campaigns with hold_seconds only; scale-out: the gate's count as this instance's sweeper last read it)"),
    f(CAMPAIGN_LABELS_OVERFLOW, Gauge, "",
      "Campaigns counted under campaign=\"other\" because the per-campaign label cap was reached"),
    f(COMMIT_BATCH, Histogram, "", "Ledger writes per group commit (embedded)"),
    f(COMMIT_DURATION, Histogram, "", "Time of one group commit, fsync included (embedded)"),
    f(COMMIT_FAILURES, Counter, "", "Group commits that failed (their claims answered 503)"),
    f(REDIS_SCRIPT_DURATION, Histogram, "script",
      "Round trip of one Lua script call to Redis (claim, claims, restock, status, release, ack)"),
    f(PIPELINE_LAG, Gauge, "", "Orders answered won and not yet in PostgreSQL (scale-out)"),
    f(PIPELINE_BATCH, Histogram, "", "Orders per pipeline insert transaction (scale-out)"),
    f(PIPELINE_INSERT_DURATION, Histogram, "", "Time of one pipeline insert transaction (scale-out)"),
    f(PIPELINE_REFUSED, Counter, "reason",
      "Orders answered won that the ledger did not take, each recorded in failed_orders (poison, reissued, contradiction, ledger_rule, lost; scale-out)"),
    f(REDIS_SETTINGS, Gauge, "maxmemory_policy, appendonly, appendfsync, source",
      "Redis settings the guarantees depend on (1 = current; scale-out)"),
    f(REDIS_REFUSING, Gauge, "", "1 while claims are refused for an evicting Redis (scale-out)"),
    f(HOLDS_CONFIRMED, Counter, "", "Pending orders confirmed (holds; scale-out: by this instance)"),
    f(HOLDS_EXPIRED, Counter, "", "Pending orders expired, their units returned (holds; scale-out: by this instance)"),
    f(HOLDS_LATENESS_SUM, Gauge, "",
      "Time from pay_by to the units being back, summed over expiries, seconds; only grows (holds; scale-out: this instance's)"),
    f(HOLDS_LATENESS_MAX, Gauge, "",
      "Longest time from pay_by to the units being back, seconds (holds; scale-out: this instance's)"),
    f(SINK_EVENTS, Counter, "sink, outcome",
      "Events of the feed by sink (webhook endpoint or NATS) and outcome: delivered, failed (an attempt, retried), parked (refused while others were taken, or behind such an event of its order), dead (an order's parked events given up), lost (removed by retention before delivery)"),
    f(SINK_BACKLOG, Gauge, "sink", "Events in the feed after the sink's cursor, as the instance delivering it last saw"),
    f(SINK_ENABLED, Gauge, "sink", "1 while the sink is enabled, 0 once disabled (a webhook endpoint that answered 410)"),
    f(SINK_HOLDER, Gauge, "sink", "1 while this instance holds the sink's lease and delivers it"),
    f(SINK_LAG, Histogram, "sink", "Time from an event's transition to its receiver taking it (2xx or JetStream's acknowledgement)"),
    f(ROOM_JOINED, Gauge, "campaign", "Users who joined the campaign's waiting room"),
    f(ROOM_WAITING, Gauge, "campaign", "Users in the waiting room not admitted yet (the pre-queue included)"),
    f(ROOM_ADMITTED, Gauge, "campaign", "Users admitted so far; its rate is the admissions per second"),
    f(ROOM_WAIT, Gauge, "campaign", "Time until the last user in line is admitted, seconds"),
    f(ROOM_TICKETS_REFUSED, Counter, "", "Claims refused 403 not_admitted for their ticket (missing, forged, another user's or campaign's, expired)"),
];

/// Process metrics (`metrics-process`): the ones the README and the alert rules rely on.
pub const PROCESS: &[Family] = &[
    f(
        "process_cpu_seconds_total",
        Counter,
        "",
        "CPU time of the process (user + system)",
    ),
    f(
        "process_resident_memory_bytes",
        Gauge,
        "",
        "Resident memory",
    ),
    f("process_open_fds", Gauge, "", "Open file descriptors"),
    f("process_max_fds", Gauge, "", "Descriptor limit"),
    f("process_threads", Gauge, "", "Threads of the process"),
    f(
        "process_start_time_seconds",
        Gauge,
        "",
        "Start time, Unix seconds",
    ),
];

/// Latency buckets (seconds): 50 µs to 10 s.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Batch-size buckets (items).
pub const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_readme_documents_every_metric() {
        let readme = include_str!("../../README.md");
        for fam in FAMILIES.iter().chain(PROCESS) {
            assert!(
                readme.contains(&format!("`{}`", fam.name)),
                "README lacks {}",
                fam.name
            );
        }
    }
}
