//! kill -9 of a holder (`seckill lock run` extending its lease): the lock stays taken until
//! the TTL of the last extension has passed, and is free after it — on Redis and on an
//! embedded server over HTTP.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use seckill::lock::{Attempt, Locks};

use super::{held, redis_locks};
use crate::helpers::{App, TOKEN};
use crate::servers::{wait_until, RedisServer};

const TTL_MS: u64 = 2000;

async fn kill_holder(locks: Locks, target: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 60", pidfile.display());
    let mut holder = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["lock", "run", "k9", "--ttl", &format!("{TTL_MS}ms")])
        .args(target)
        .args(["--", "sh", "-c", &script])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the holder's command", || {
        std::fs::read_to_string(&pidfile).is_ok_and(|s| s.ends_with('\n'))
    });
    // Let it extend at least once, then kill it without warning.
    tokio::time::sleep(Duration::from_millis(TTL_MS / 2)).await;
    holder.kill().unwrap();
    let killed = Instant::now();
    holder.wait().unwrap();
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    unsafe { libc::kill(-pid, libc::SIGKILL) };

    // The last extension was at most TTL/3 ago: the lease lasts at least 2/3 TTL more.
    while killed.elapsed() < Duration::from_millis(TTL_MS * 2 / 3 - 150) {
        held(&locks, "k9").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // …and no longer than a TTL.
    tokio::time::sleep(Duration::from_millis(TTL_MS + 100).saturating_sub(killed.elapsed())).await;
    match locks
        .acquire("k9", "next", Duration::from_secs(5), Duration::ZERO)
        .await
        .unwrap()
    {
        Attempt::Granted(l) => locks.release("k9", &l.token).await.unwrap(),
        Attempt::Held { .. } => panic!("still held {:?} after kill -9", killed.elapsed()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_on_redis_frees_the_lock_after_its_ttl() {
    let r = RedisServer::start(&[]);
    let locks = redis_locks(&[r.url()], None).await;
    kill_holder(locks, &["--redis", &r.url()]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_on_an_embedded_server_frees_the_lock_after_its_ttl() {
    let app = App::spawn_with(|_| {}).await;
    let url = app.admin_url();
    let locks = Locks::new(std::sync::Arc::new(seckill::lock::http::HttpLocks::new(
        &url, TOKEN,
    )));
    kill_holder(locks, &["--url", &url, "--admin-token", TOKEN]).await;
}
