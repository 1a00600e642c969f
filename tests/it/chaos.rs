//! The short fault campaign CI runs on every push: `seckill chaos` with a fixed seed, two
//! schedules on each of embedded and scale-out (two instances, a worker, redis-server with AOF
//! and PostgreSQL), with held orders, payers and lock clients in the workload, every fault
//! really injected, zero violations; then one seeded schedule for each fault of the other
//! deployments and nemeses: Sentinel failovers, a lost replica, Redis restored from a
//! snapshot, the server's clock stepped, Cluster failovers behind the ledger.
//!
//! The long campaign (`docs/RELIABILITY.md`) is the same command with more schedules.

use std::process::Command;

use serde_json::Value;

/// Runs `seckill chaos ARGS --json`, requires it to succeed, and returns its JSON totals and
/// its standard output (for failure messages).
fn chaos(args: &[&str]) -> (Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .arg("chaos")
        .args(args)
        .arg("--json")
        .env("RUST_LOG", "warn")
        .output()
        .expect("seckill chaos runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the campaign failed ({}):\n{stdout}\n{stderr}\n{}",
        out.status,
        why(&stdout, &stderr)
    );
    let json = &stdout[stdout.rfind("\n{\n").expect("the JSON totals") + 1..];
    let t: Value = serde_json::from_str(json).expect("totals are JSON");
    (t, stdout)
}

/// The lines that say why a campaign failed (its violations and the schedule they fell in, or
/// the error it stopped on), repeated last: CI keeps only the tail of a failure's output.
fn why(stdout: &str, stderr: &str) -> String {
    let mut lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("schedule ") || l.contains("VIOLATION") || l.contains("orders: "))
        .collect();
    lines.extend(
        stderr
            .lines()
            .filter(|l| l.starts_with("Error") || l.contains("error:"))
            .take(5),
    );
    format!("why the campaign failed:\n{}", lines.join("\n"))
}

/// Requires the campaign to have found no violation; on failure its output is followed by the
/// lines that say why.
fn no_violations(t: &Value, stdout: &str) {
    assert!(
        t["violations"] == 0,
        "{} violations:\n{stdout}\n{}",
        t["violations"],
        why(stdout, "")
    );
}

/// Requires the totals' `group` (`faults`, `failovers`) to count each of `kinds` at least
/// once, so a change of the generator cannot quietly drop a fault from a seed.
fn counted(t: &Value, group: &str, kinds: &[&str]) {
    let counts = t[group].as_object().expect("counts by kind");
    for kind in kinds {
        assert!(
            counts.get(*kind).and_then(Value::as_u64).unwrap_or(0) > 0,
            "seed {} no longer produces {group} {kind}: {counts:?}",
            t["seed"]
        );
    }
}

/// Seed 1065's first two schedules per deployment: between them, kill -9 of the embedded
/// server, a full disk, fsync errors at the embedded ledger's commits, kill -9 of redis-server
/// and PostgreSQL, Redis restored from a snapshot taken seconds earlier, and network faults
/// between instance 0 and Redis (connections reset, each
/// direction's bytes dropped) — checked below, so a change of the generator cannot quietly
/// drop them. Every schedule holds its orders for payers who confirm some of them near the
/// deadline, and runs lock clients beside the storm; the second runs an opening behind a
/// waiting room too: confirms, expiries, lock grants and admissions are checked to have
/// happened.
#[test]
fn short_campaign_finds_no_violation() {
    let (t, stdout) = chaos(&[
        "--seed",
        "1065",
        "--schedules",
        "2",
        "--storm",
        "10s",
        "--faults",
        "4",
    ]);
    no_violations(&t, &stdout);
    assert_eq!(t["schedules"], 4, "{stdout}");
    for counted in [
        "won",
        "orders_checked",
        // Requests cut off by the faults: the faults really hit the servers.
        "no_answer",
        "confirms_200",
        "expired",
        "lock_grants",
        // Schedule 1 runs an opening behind a waiting room beside the storm, on both
        // deployments; its users were admitted through the faults.
        "openings",
        "opening_admitted",
    ] {
        assert!(t[counted].as_u64().unwrap() > 0, "no {counted}: {stdout}");
    }
    // Which full disk ran (a real tmpfs as root, else the injected SQLITE_FULL) is reported.
    eprintln!("data disk full: {}", t["data_disk"]);
    assert!(t["data_disk"].is_string(), "{stdout}");
    counted(
        &t,
        "faults",
        &[
            "kill -9 instance-0",
            "snapshot redis-snapshot",
            "disk full data-disk",
            "fsync error data-disk",
            "kill -9 redis-server",
            "kill -9 postgres",
            "reset redis-link",
            "drop instance->redis redis-link",
            "drop redis->instance redis-link",
        ],
    );
}

/// The Sentinel deployment (a primary, three sentinels; both instances and the worker find
/// the primary through them): seed 4's first schedule has two replicas, kills the primary (the
/// sentinels promote a replica, the old primary comes back as a replica of it) and later hands
/// it over with `SENTINEL FAILOVER`. With the default `--redis-wait-replicas 1`, no answered
/// win may be lost to either and no invariant may break.
#[test]
fn sentinel_failovers_lose_no_win() {
    let (t, stdout) = chaos(&[
        "--deployment",
        "sentinel",
        "--only",
        "redis-primary",
        "--seed",
        "4",
        "--schedules",
        "1",
        "--storm",
        "20s",
        "--faults",
        "2",
    ]);
    no_violations(&t, &stdout);
    assert_eq!(t["lost_to_failover"], 0, "{stdout}");
    assert!(t["won"].as_u64().unwrap() > 0, "{stdout}");
    counted(&t, "failovers", &["after kill -9", "SENTINEL FAILOVER"]);
}

/// The faults on a replica, with one replica and the default `--redis-wait-replicas 1`: seed
/// 7's first schedule kills it -9 and then cuts its replication link again and again. Nothing
/// can be sold or confirmed meanwhile (claims answer 503); afterwards the sale goes on, and no
/// invariant may break.
#[test]
fn a_lost_replica_breaks_no_promise() {
    let (t, stdout) = chaos(&[
        "--deployment",
        "sentinel",
        "--only",
        "redis-replica",
        "--seed",
        "7",
        "--schedules",
        "1",
        "--storm",
        "15s",
        "--faults",
        "0",
    ]);
    no_violations(&t, &stdout);
    assert!(
        stdout.contains("Redis: a primary and 1 replica\n"),
        "{stdout}"
    );
    assert!(t["won"].as_u64().unwrap() > 0, "{stdout}");
    assert!(t["answers_503"].as_u64().unwrap() > 0, "{stdout}");
    counted(
        &t,
        "faults",
        &["kill -9 redis-replica", "partition redis-replica"],
    );
}

/// Redis sent back in time: seed 7's second scale-out schedule with only that fault (`--only
/// redis-snapshot --storm 20s --faults 0`): a code campaign with held orders and payers, lock
/// clients, a snapshot taken 2.25 s in, and 3.5 s later PostgreSQL stalled, redis-server and
/// the worker killed -9 and Redis started from the snapshot, hundreds of wins and confirms
/// answered in between. Nothing may be oversold or handed out twice, and only the answers the
/// restore can take back (`src/chaos/excuse.rs`) are excused.
#[test]
fn a_redis_restored_from_a_snapshot_breaks_no_promise() {
    let (t, stdout) = chaos(&[
        "--deployment",
        "scale-out",
        "--only",
        "redis-snapshot",
        "--seed",
        "7",
        "--first",
        "1",
        "--schedules",
        "1",
        "--storm",
        "20s",
        "--faults",
        "0",
    ]);
    no_violations(&t, &stdout);
    assert!(t["won"].as_u64().unwrap() > 0, "{stdout}");
    assert!(t["confirms_200"].as_u64().unwrap() > 0, "{stdout}");
    counted(&t, "faults", &["snapshot redis-snapshot"]);
    assert!(
        stdout.contains("Redis serving the snapshot"),
        "the restore did not happen: {stdout}"
    );
}

/// The embedded server's wall clock stepped by minutes under load (libfaketime; the test
/// script installs Debian's `faketime`): forward in seed 7's second embedded schedule (+261 s
/// for 2.9 s) and back in seed 4's third (−146 s for 3.4 s), both with held orders, payers
/// confirming near the deadline and lock clients. Every confirm answer is held to `pay_by` on
/// the test's own clock, and no lease may be granted while another runs. When the engine
/// read the wall clock, the forward step expired held orders up to 1.2 s before their
/// `pay_by` and granted a lock lease while the one before it ran (`src/clock.rs`).
#[test]
fn a_stepped_server_clock_moves_no_deadline() {
    for (seed, first) in [("7", "1"), ("4", "2")] {
        let (t, stdout) = chaos(&[
            "--deployment",
            "embedded",
            "--only",
            "server-clock",
            "--seed",
            seed,
            "--first",
            first,
            "--schedules",
            "1",
            "--faults",
            "0",
        ]);
        no_violations(&t, &stdout);
        assert!(t["confirms_200"].as_u64().unwrap() > 0, "{stdout}");
        assert!(t["expired"].as_u64().unwrap() > 0, "{stdout}");
        assert!(t["lock_grants"].as_u64().unwrap() > 0, "{stdout}");
        counted(&t, "faults", &["clock step server-clock"]);
        assert!(
            stdout.contains("the server's clock read"),
            "the step did not happen: {stdout}"
        );
    }
}

/// The Redis Cluster deployment (three masters with a replica each, two instances and a
/// worker): seed 15's first schedule with only faults on the master serving the campaign —
/// twice killed -9 a moment after its replica was frozen and cut off (the replica promoted
/// misses the master's last writes), then a graceful `CLUSTER FAILOVER` — with held orders,
/// payers and lock clients. Nothing answered after a promotion may be lost or contradicted:
/// before the lineage check (`src/engine/scale_out/lineage.rs`) the promoted replica reissued
/// order ids and confirmed orders the ledger held expired (seed 11, schedule 2).
#[test]
fn cluster_failovers_behind_the_ledger_break_no_promise() {
    let (t, stdout) = chaos(&[
        "--deployment",
        "cluster",
        "--only",
        "redis-master",
        "--seed",
        "15",
        "--schedules",
        "1",
        "--storm",
        "20s",
        "--faults",
        "3",
    ]);
    no_violations(&t, &stdout);
    assert!(t["won"].as_u64().unwrap() > 0, "{stdout}");
    assert!(t["confirms_200"].as_u64().unwrap() > 0, "{stdout}");
    assert!(t["lock_grants"].as_u64().unwrap() > 0, "{stdout}");
    counted(&t, "faults", &["lagging kill -9 redis-master"]);
    counted(&t, "failovers", &["after kill -9"]);
    // The hand-over is drawn last; on a loaded machine the two kills' promotions and settling
    // can push it past the fault window, where it is skipped (the long run in
    // docs/RELIABILITY.md injects it 8 times). The seed must still draw it.
    assert!(
        stdout.contains("CLUSTER FAILOVER redis-master, then"),
        "seed 15 no longer draws a CLUSTER FAILOVER: {stdout}"
    );
}
