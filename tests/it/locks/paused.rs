//! The paused holder (Kleppmann's scenario): `seckill lock run` holds a lock on Redis and its
//! command is about to write to PostgreSQL with its fence. The holder is SIGSTOPped past its
//! TTL, another client acquires (higher fence) and writes; the first holder's command is
//! SIGCONTed and sends its write with the old fence: PostgreSQL refuses it, the job's effect
//! lands once. Then the `lock run` process itself resumes, sees the lease lost and exits 74.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{fenced_db, grant, redis_locks};
use crate::servers::{wait_until, RedisServer};

/// The fenced write: a payout row only if the fence check of `job_fences` passes.
const WRITE: &str = "WITH f AS (INSERT INTO job_fences (job, fence) VALUES ('payout', $FENCE) \
     ON CONFLICT (job) DO UPDATE SET fence = EXCLUDED.fence \
     WHERE job_fences.fence <= EXCLUDED.fence RETURNING fence) \
     INSERT INTO payouts (fence) SELECT fence FROM f";

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_write_after_its_lease_passed_on() {
    let redis = RedisServer::start(&[]);
    let (pg_url, pool) = fenced_db().await;
    sqlx::query("CREATE TABLE payouts (fence BIGINT NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let psql = crate::servers::find_binary("psql");
    let script = format!(
        "echo \"$SECKILL_LOCK_FENCE $$\" > {d}/ready.tmp && mv {d}/ready.tmp {d}/ready; \
         while [ ! -e {d}/go ]; do sleep 0.01; done; \
         {psql} '{pg_url}' -v ON_ERROR_STOP=1 -At -c \"{write}\" > {d}/result.tmp 2>&1; \
         mv {d}/result.tmp {d}/result",
        psql = psql.display(),
        write = WRITE.replace("$FENCE", "$SECKILL_LOCK_FENCE"),
    );
    let mut holder = Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args([
            "lock",
            "run",
            "payout",
            "--ttl",
            "1s",
            "--redis",
            &redis.url(),
        ])
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let ready = dir.path().join("ready");
    wait_until("the holder to start its command", || ready.exists());
    let line = read(&ready);
    let mut parts = line.split_whitespace();
    let fence_a: u64 = parts.next().unwrap().parse().unwrap();
    let command_pgid: i32 = parts.next().unwrap().parse().unwrap();

    // Pause the whole holder (lease keeper and command) past its TTL.
    unsafe {
        libc::kill(holder.id() as i32, libc::SIGSTOP);
        libc::kill(-command_pgid, libc::SIGSTOP);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Another client gets the lock with a higher fence and does the job.
    let locks = redis_locks(&[redis.url()], None).await;
    let b = grant(&locks, "payout", Duration::from_secs(30)).await;
    assert!(b.fence > fence_a, "fence {} after {fence_a}", b.fence);
    let wrote = sqlx::query(sqlx::AssertSqlSafe(
        WRITE.replace("$FENCE", &b.fence.to_string()),
    ))
    .execute(&pool)
    .await
    .unwrap();
    assert_eq!(wrote.rows_affected(), 1, "the current holder's write lands");

    // The paused command wakes up and sends its write with the old fence.
    std::fs::write(dir.path().join("go"), "").unwrap();
    unsafe { libc::kill(-command_pgid, libc::SIGCONT) };
    let result = dir.path().join("result");
    wait_until("the stale write to be answered", || result.exists());
    assert!(
        read(&result).contains("INSERT 0 0"),
        "the stale write must be refused: {}",
        read(&result)
    );

    // The lease keeper resumes: the lease is lost, it says so.
    unsafe { libc::kill(holder.id() as i32, libc::SIGCONT) };
    let started = Instant::now();
    let status = loop {
        if let Some(s) = holder.try_wait().unwrap() {
            break s;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "holder exits");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(74), "lease lost → exit 74");

    let rows: Vec<i64> = sqlx::query_scalar("SELECT fence FROM payouts")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        rows,
        vec![b.fence as i64],
        "the job's effect is applied once"
    );
    let mut conn = pool.acquire().await.unwrap();
    let highest = seckill::lock::fenced::highest(&mut conn, "payout")
        .await
        .unwrap();
    assert_eq!(highest, Some(b.fence));
    assert!(
        !seckill::lock::fenced::check_and_set(&mut conn, "payout", fence_a)
            .await
            .unwrap(),
        "the Rust check refuses the old fence too"
    );
    locks.release("payout", &b.token).await.unwrap();
}
