//! `ack.lua` given ids this stream's group never delivered: a consumer acknowledging what it
//! read from a Redis that has since been replaced (a Cluster failover, a restore from a
//! snapshot). The entries nobody has read yet must stay: before, the floor of the trim was the
//! newest id given, so a stale id above them trimmed them away, and the orders they carried
//! never reached the ledger.

use redis::AsyncCommands;

use seckill::engine::scale_out::{Keys, RedisConn, RedisTarget, Scripts, GROUP};

use crate::servers::RedisServer;

#[tokio::test]
async fn an_id_this_group_never_delivered_trims_nothing() {
    let server = RedisServer::start(&[]);
    let target = RedisTarget {
        urls: vec![server.url()],
        cluster: false,
        sentinel_master: None,
    };
    let mut conn = RedisConn::connect(&target).await.unwrap();
    let scripts = Scripts::default();
    scripts.load(&mut conn).await.unwrap();
    let stream = Keys::new("s").orders();
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(&stream)
        .arg(GROUP)
        .arg("0")
        .arg("MKSTREAM")
        .query_async(&mut conn)
        .await
        .unwrap();
    for i in 1..=3u64 {
        let _: String = conn
            .xadd(&stream, format!("{i}-0"), &[("order", i)])
            .await
            .unwrap();
    }
    // Entry 1 is delivered and acknowledged; 2 and 3 are not read yet.
    super::read_as(&mut conn, &stream, "c1", 1).await;
    let ids = |v: &[&str]| -> Vec<(String, u64)> { v.iter().map(|i| (i.to_string(), 1)).collect() };
    assert_eq!(
        scripts.ack(&mut conn, "s", &ids(&["1-0"])).await.unwrap(),
        1
    );
    // A stale acknowledgement, above the unread entries.
    assert_eq!(
        scripts.ack(&mut conn, "s", &ids(&["9-0"])).await.unwrap(),
        0
    );
    let left: usize = conn.xlen(&stream).await.unwrap();
    assert_eq!(left, 2, "the unread entries 2 and 3 were trimmed away");
    // Read and acknowledged as usual, they go.
    super::read_as(&mut conn, &stream, "c1", 10).await;
    assert_eq!(
        scripts
            .ack(&mut conn, "s", &ids(&["2-0", "3-0"]))
            .await
            .unwrap(),
        2
    );
    let left: usize = conn.xlen(&stream).await.unwrap();
    assert_eq!(left, 0);
}
