//! A sink's write on the embedded ledger cancelled midway (its delivery task aborted when the
//! sink is disabled or the server stops, an admin request dropped by its client) must not
//! leave the one writer connection inside a transaction: later writes would answer Ok and never
//! commit, and the next group commit — claims — would fail.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use seckill::ledger::sinks::{NewSink, Progress, SinkKind, SinkStore};
use seckill::ledger::{Ledger, SqliteLedger};

fn sink(id: &str) -> NewSink {
    NewSink {
        id: id.into(),
        kind: SinkKind::Webhook,
        target: "http://127.0.0.1:9/".into(),
        subject: None,
        secret: None,
        origin: "api",
        description: None,
    }
}

#[tokio::test]
async fn a_sink_write_cancelled_midway_leaves_the_writer_usable() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = SqliteLedger::open(dir.path(), false).await.unwrap();
    assert!(ledger.put_sink(&sink("whk_a"), 0, 1).await.unwrap());
    let (fence, _) = ledger
        .lease("whk_a", "me", 1, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("lease");
    // Poll advance once (it sends BEGIN IMMEDIATE to the connection's worker), then drop it,
    // as JoinHandle::abort does to a task pending there.
    {
        let p = Progress::default();
        let mut fut = pin!(ledger.advance("whk_a", fence, &p));
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Pending));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    // An admin adds an endpoint: answered Ok ...
    assert!(ledger.put_sink(&sink("whk_b"), 0, 2).await.unwrap());
    // ... the next claim batch is refused ...
    let claims = ledger.apply(&[]).await;
    // ... and the endpoint was never committed.
    let listed: Vec<String> = ledger
        .sinks()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert!(
        claims.is_ok() && listed.contains(&"whk_b".to_string()),
        "claims batch after the cancelled advance: {claims:?}; sinks committed: {listed:?}"
    );
}
