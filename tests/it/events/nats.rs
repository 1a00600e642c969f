//! The NATS JetStream sink (docs/EVENTS.md "NATS"): against a real `nats-server -js` killed
//! -9 mid-storm and restarted 12 s later, the stream ends up holding every event of the feed exactly
//! once by id, each as the feed shows it, on the subject of its type.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::webhooks::{feed_of, ids};
use crate::helpers::App;

/// A `nats-server` with JetStream on a free port, its store in a directory of its own.
struct NatsServer {
    port: u16,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl NatsServer {
    fn start() -> NatsServer {
        let mut s = NatsServer {
            port: seckill::testing::free_port().expect("a free port"),
            dir: tempfile::tempdir().expect("temp dir"),
            child: None,
        };
        s.run();
        s
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn run(&mut self) {
        let bin = seckill::testing::find_binary("nats-server").unwrap_or_else(|e| {
            panic!("{e:#}: the NATS tests need nats-server (apt-get install nats-server)")
        });
        let child = Command::new(bin)
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn kill_9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    #[allow(dead_code)]
    fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill_9();
    }
}

/// Every message of `stream`: (Nats-Msg-Id, subject, payload).
async fn stream_messages(url: &str, stream: &str) -> Vec<(String, String, Value)> {
    let client = async_nats::connect(url).await.expect("connects to NATS");
    let js = async_nats::jetstream::new(client);
    let mut s = js.get_stream(stream).await.expect("the stream exists");
    let last = s.info().await.unwrap().state.last_sequence;
    let mut out = Vec::new();
    for seq in 1..=last {
        let Ok(m) = s.get_raw_message(seq).await else {
            continue;
        };
        let id = m
            .headers
            .get(async_nats::header::NATS_MESSAGE_ID)
            .expect("every message carries Nats-Msg-Id")
            .to_string();
        let body: Value = serde_json::from_slice(&m.payload).expect("a JSON event");
        out.push((id, m.subject.to_string(), body));
    }
    out
}

#[tokio::test]
async fn the_stream_holds_every_event_once_across_a_nats_server_kill() {
    let mut nats = NatsServer::start();
    let url = nats.url();
    let app = App::spawn_with(|cfg| {
        cfg.delivery.nats = Some(url.clone());
        cfg.delivery.nats_subject = "shop.events".into();
        cfg.delivery.nats_stream = "SHOP".into();
    })
    .await;
    let client = app.client.clone();
    let storm = tokio::spawn(async move {
        let started = Instant::now();
        let mut n = 0;
        while started.elapsed() < Duration::from_secs(18) {
            let c = format!("n{n}");
            n += 1;
            client
                .create_campaign(
                    &json!({"id": c, "stock": 20, "per_user_limit": 1, "hold_seconds": 60}),
                )
                .await
                .expect("campaign created");
            let claims = (0..25).map(|i| {
                let (client, c) = (client.clone(), c.clone());
                async move { client.claim(&c, &format!("u{i}"), 1, None).await }
            });
            futures::future::join_all(claims).await;
        }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    nats.kill_9();
    // Down longer than a publish waits for its acknowledgement (10 s): the publisher fails,
    // reconnects and publishes again what JetStream may or may not have stored.
    tokio::time::sleep(Duration::from_secs(12)).await;
    nats.run();
    storm.await.unwrap();
    let feed = feed_of(&app.client).await;
    let want = ids(&feed);
    let deadline = Instant::now() + Duration::from_secs(60);
    let got = loop {
        let got = stream_messages(&url, "SHOP").await;
        if got.len() >= want.len() || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let mut by_id: HashMap<&str, (&str, &Value)> = HashMap::new();
    for (id, subject, body) in &got {
        assert!(
            by_id.insert(id, (subject, body)).is_none(),
            "{id} twice in the stream"
        );
    }
    assert_eq!(got.len(), want.len(), "the stream holds each event once");
    for e in &feed {
        let id = e["id"].as_str().unwrap();
        let (subject, body) = by_id
            .get(id)
            .unwrap_or_else(|| panic!("{id} not in the stream"));
        assert_eq!(*body, e, "{id} as the feed shows it");
        assert_eq!(
            *subject,
            format!("shop.events.{}", e["type"].as_str().unwrap())
        );
    }
    // The kill was felt: publishing failed while the server was down, and went on after.
    let metrics = crate::guards::metrics(&app.admin_url()).await;
    let failed = metrics
        .lines()
        .find(|l| l.starts_with("seckill_sink_events_total") && l.contains("outcome=\"failed\""))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(
        failed > 0.0,
        "no publish failed while nats-server was down:\n{metrics}"
    );
    app.stop().await;
}
