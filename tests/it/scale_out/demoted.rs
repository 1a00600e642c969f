//! A Redis demoted to a replica answers writes with `READONLY`, as a reply rather than an
//! error: the link must go down on it (and look for the primary again) instead of sending
//! every later write to the replica.

use seckill::redis_conn::{RedisConn, RedisTarget};

use crate::servers::{redis_raw, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readonly_reply_marks_the_link_down() {
    let node = RedisServer::start(&[]);
    let other = RedisServer::start(&[]);
    let conn = RedisConn::connect(&RedisTarget {
        urls: vec![node.url()],
        cluster: false,
        sentinel_master: None,
    })
    .await
    .unwrap();
    let link = conn
        .link()
        .expect("a single node goes through a link")
        .clone();
    let mut health = link.watch();
    let before = *health.borrow_and_update();
    assert!(before.up);
    link.request(redis::cmd("SET").arg("k").arg("1"))
        .await
        .unwrap();
    let demote = format!("REPLICAOF 127.0.0.1 {}", other.port);
    assert!(redis_raw(node.port, &demote).is_some_and(|r| r.starts_with("+OK")));
    let reply = link.request(redis::cmd("SET").arg("k").arg("2")).await;
    assert!(
        matches!(&reply, Ok(redis::Value::ServerError(e)) if e.code() == "READONLY"),
        "{reply:?}"
    );
    tokio::time::timeout(
        std::time::Duration::from_secs(5),
        health.wait_for(|h| h.generation > before.generation),
    )
    .await
    .expect("the link went down on READONLY")
    .unwrap();
}
