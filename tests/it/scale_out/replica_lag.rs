//! The replica check a claim batch makes before it runs (`claims.lua`'s `in_sync`), on the
//! `INFO replication` lines Redis really writes.
//!
//! Redis at times lists a replica that acknowledged a moment ago with `lag=-1`. The check read
//! the lag as digits only, so such a replica did not count and the whole batch was refused 503
//! "fewer Redis replicas are in sync" — about 1% of claims with `--redis-wait-replicas 1` under
//! load (scripts/bench-wait-replicas.sh). The test runs the script's own lines, cut out of
//! claims.lua, on a real redis-server.

use crate::servers::{redis_raw, wait_until, RedisServer};

/// `in_sync` as claims.lua defines it, and a call of it on ARGV[1] (the spec) and ARGV[2]
/// (an `INFO replication` text, or empty to read the server's own).
fn script() -> String {
    let lua = include_str!("../../../src/engine/scale_out/lua/claims.lua");
    let begin = lua
        .find("-- in_sync begin")
        .expect("claims.lua marks in_sync's start");
    let end = lua
        .find("-- in_sync end")
        .expect("claims.lua marks in_sync's end");
    format!(
        "{}\nlocal info = ARGV[2]\nif info == '' then info = redis.call('INFO', 'replication') end\n\
         return in_sync(ARGV[1], info) and 1 or 0",
        &lua[begin..end]
    )
}

fn in_sync(con: &mut redis::Connection, spec: &str, info: &str) -> bool {
    let r: i64 = redis::cmd("EVAL")
        .arg(script())
        .arg(0)
        .arg(spec)
        .arg(info)
        .query(con)
        .unwrap();
    r == 1
}

fn line(state: &str, lag: &str) -> String {
    format!(
        "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
         slave0:ip=127.0.0.1,port=7001,state={state},offset=120,lag={lag}\r\n\
         master_repl_offset:120\r\n"
    )
}

#[test]
fn a_replica_acknowledging_this_second_counts() {
    let primary = RedisServer::start(&[]);
    let mut con = redis::Client::open(primary.url())
        .unwrap()
        .get_connection()
        .unwrap();
    assert!(
        in_sync(&mut con, "1", &line("online", "-1")),
        "a replica listed with lag=-1 acknowledged a moment ago: it is in sync"
    );
    assert!(in_sync(&mut con, "1", &line("online", "0")));
    assert!(in_sync(&mut con, "1", &line("online", "2")));
    assert!(
        !in_sync(&mut con, "1", &line("online", "3")),
        "silent for 3 s"
    );
    assert!(!in_sync(&mut con, "1", &line("wait_bgsave", "0")));
    assert!(in_sync(&mut con, "1 127.0.0.1:7001", &line("online", "-1")));
    assert!(
        !in_sync(&mut con, "1 127.0.0.1:7002", &line("online", "0")),
        "not among the promotable"
    );
    assert!(!in_sync(&mut con, "2", &line("online", "0")));

    // And on the INFO a real primary writes about its real replica.
    let primary_port = primary.port.to_string();
    let replica = RedisServer::start(&["--replicaof", "127.0.0.1", &primary_port]);
    wait_until("the replica is online", || {
        redis_raw(primary.port, "INFO replication").is_some_and(|i| i.contains("state=online"))
    });
    assert!(in_sync(&mut con, "1", ""));
    assert!(!in_sync(&mut con, "2", ""));
    drop(replica);
}
