//! TLS to PostgreSQL and Redis, against real servers with certificates made here by
//! `openssl`: a CA, a server certificate for `localhost` and 127.0.0.1, a client certificate,
//! and a second CA that signed none of them. The scale-out deployment serves over a
//! PostgreSQL that takes only TLS (`hostssl`, `sslmode=verify-full`) and a Redis TLS port
//! that demands a client certificate; the wrong CA, or no client certificate, is refused at
//! start with the reason. Through Sentinels reached over TLS, the primary they name is reached
//! over TLS too, before and after a failover; a Redis Cluster is reached over TLS on every
//! node its slot map names.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::helpers::TOKEN;
use crate::process::Proc;
use crate::servers::{free_port, pg, PgServer, RedisCluster, RedisServer, SentinelSetup};

struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn make() -> Certs {
        let certs = Certs {
            dir: tempfile::tempdir().unwrap(),
        };
        let d = certs.dir.path();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for ca in ["ca", "wrong-ca"] {
            openssl(
                d,
                &[
                    &["req", "-x509"][..],
                    &ec,
                    &["-days", "2", "-keyout", &format!("{ca}.key")],
                    &[
                        "-out",
                        &format!("{ca}.crt"),
                        "-subj",
                        &format!("/CN=seckill test {ca}"),
                    ],
                    &["-addext", "basicConstraints=critical,CA:TRUE"],
                    &["-addext", "keyUsage=critical,keyCertSign,cRLSign"],
                ]
                .concat(),
            );
        }
        // A Redis Cluster node dials its peers with its server certificate: it is a client too.
        for (who, usage) in [
            ("server", "serverAuth,clientAuth"),
            ("client", "clientAuth"),
        ] {
            std::fs::write(
                d.join(format!("{who}.ext")),
                format!(
                    "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
                     keyUsage=digitalSignature\nextendedKeyUsage={usage}\n"
                ),
            )
            .unwrap();
            openssl(
                d,
                &[
                    &["req"][..],
                    &ec,
                    &["-keyout", &format!("{who}.key")],
                    &["-out", &format!("{who}.csr"), "-subj", "/CN=localhost"],
                ]
                .concat(),
            );
            openssl(
                d,
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{who}.csr"),
                    "-CA",
                    "ca.crt",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &format!("{who}.crt"),
                    "-extfile",
                    &format!("{who}.ext"),
                ],
            );
        }
        certs
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl runs: install Debian's openssl package (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `seckill serve` with `args` that must fail to start: its exit within 60 s and its log.
fn refused(args: &[String]) -> String {
    let mut child = crate::child::seckill(&["serve"], &[])
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("seckill starts");
    let status = crate::servers::exit_within(&mut child, Duration::from_secs(60))
        .expect("seckill kept running with a certificate it must refuse");
    let mut log = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(!status.success(), "{log}");
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_out_runs_over_verified_tls_and_refuses_a_certificate_that_does_not_verify() {
    let certs = Certs::make();
    let p = |n: &str| certs.path(n).display().to_string();
    let pg = PgServer::start_tls(&certs.path("server.crt"), &certs.path("server.key"));
    let db = pg.fresh_db().await;
    let tls_port = free_port();
    let tls_port_s = tls_port.to_string();
    let (crt, key, ca) = (p("server.crt"), p("server.key"), p("ca.crt"));
    let _redis = RedisServer::start(&[
        "--tls-port",
        &tls_port_s,
        "--tls-cert-file",
        &crt,
        "--tls-key-file",
        &key,
        "--tls-ca-cert-file",
        &ca,
        "--tls-auth-clients",
        "yes",
    ]);
    let postgres = |ca: &str| format!("{db}?sslmode=verify-full&sslrootcert={ca}");
    let redis = format!("rediss://localhost:{tls_port}");
    let args = |pg_ca: &str, redis_ca: &str, client: bool| {
        let mut a: Vec<String> = vec![
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--admin-token".into(),
            TOKEN.into(),
            "--redis".into(),
            redis.clone(),
            "--postgres".into(),
            postgres(pg_ca),
            "--redis-ca-file".into(),
            redis_ca.to_owned(),
        ];
        if client {
            a.extend(["--redis-client-cert".into(), p("client.crt")]);
            a.extend(["--redis-client-key".into(), p("client.key")]);
        }
        a
    };

    // Both verified: a sale runs and its order reaches the ledger.
    let ok = args(&ca, &ca, true);
    let ok: Vec<&str> = ok.iter().map(String::as_str).collect();
    let server = Proc::spawn(&ok, &[]);
    let c = server.client();
    c.create_campaign(&json!({"id": "tls", "stock": 2}))
        .await
        .unwrap();
    match c.claim("tls", "u1", 1, None).await.unwrap() {
        seckill::bench::client::ClaimReply::Processed(a) => assert!(a.order_id.is_some(), "{a:?}"),
        other => panic!("{other:?}"),
    }
    crate::helpers::settle_url(&c).await;
    assert_orders(&c, "tls", 1).await;
    drop(server);

    // PostgreSQL's certificate checked against a CA that did not sign it.
    let log = refused(&args(&p("wrong-ca.crt"), &ca, true));
    assert!(
        log.contains("cannot connect to PostgreSQL")
            && log.contains("invalid peer certificate: UnknownIssuer"),
        "{log}"
    );
    // Redis's, likewise; and Redis without the client certificate it demands.
    let log = refused(&args(&ca, &p("wrong-ca.crt"), true));
    assert!(
        log.contains("cannot connect to Redis") && log.contains("UnknownIssuer"),
        "{log}"
    );
    let log = refused(&args(&ca, &ca, false));
    assert!(log.contains("cannot connect to Redis"), "{log}");
}

/// Asserts that the ledger holds `n` orders of `campaign`.
async fn assert_orders(c: &seckill::bench::client::Client, campaign: &str, n: usize) {
    let (s, orders) = c
        .admin(
            reqwest::Method::GET,
            &format!("/v1/campaigns/{campaign}/orders"),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        (s.as_u16(), orders["orders"].as_array().map(Vec::len)),
        (200, Some(n)),
        "{campaign}: {orders}"
    );
}

/// `CLIENT LIST` of the Redis whose plain port is `port`, once checked that no connection
/// came in on that port but the one asking.
fn only_the_asker_in_plain(port: u16) -> String {
    let clients = crate::servers::redis_raw(port, "CLIENT LIST").unwrap();
    let plain = format!("laddr=127.0.0.1:{port} ");
    let on_plain: Vec<&str> = clients.lines().filter(|l| l.contains(&plain)).collect();
    assert!(
        on_plain.len() == 1 && on_plain[0].contains("cmd=client|list"),
        "{clients}"
    );
    clients
}

/// The first claim of a new user on `campaign` that wins within 60 s (claims fail while the
/// gate looks for a new primary).
async fn a_claim_wins(c: &seckill::bench::client::Client, campaign: &str, prefix: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        assert!(Instant::now() < deadline, "no claim won within 60 s");
        if let Ok(seckill::bench::client::ClaimReply::Processed(a)) =
            c.claim(campaign, &format!("{prefix}-{i}"), 1, None).await
        {
            assert!(a.order_id.is_some(), "{a:?}");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_over_tls_name_a_primary_reached_over_tls_through_a_failover() {
    let certs = Certs::make();
    let (crt, key, ca) = (
        certs.path("server.crt"),
        certs.path("server.key"),
        certs.path("ca.crt"),
    );
    let mut redis = SentinelSetup::start_tls([&crt, &key, &ca]);
    let db = pg().fresh_db().await;
    let url = redis.sentinel_url();
    let ca = ca.display().to_string();
    // No replica is left after the failover (the old primary stays dead): claims must not
    // wait for one.
    let server = Proc::spawn(
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin-token",
            TOKEN,
            "--redis",
            &url,
            "--redis-sentinel",
            SentinelSetup::MASTER,
            "--redis-ca-file",
            &ca,
            "--redis-wait-replicas",
            "0",
            "--postgres",
            &db,
        ],
        &[],
    );
    let c = server.client();
    c.create_campaign(&json!({"id": "tls-sentinel", "stock": 10}))
        .await
        .unwrap();
    a_claim_wins(&c, "tls-sentinel", "before").await;
    crate::helpers::settle_url(&c).await;
    redis.wait_replicated();
    redis.kill_primary_and_fail_over();
    a_claim_wins(&c, "tls-sentinel", "after").await;
    crate::helpers::settle_url(&c).await;
    assert_orders(&c, "tls-sentinel", 2).await;
    // Every connection seckill made to the new primary came in on its TLS port: on the plain
    // port, only the connection asking.
    let clients = only_the_asker_in_plain(redis.replica.port);
    let plain = format!("laddr=127.0.0.1:{} ", redis.replica.port);
    // ...while seckill's own (not the Sentinel's, which it names) came in over TLS.
    assert!(
        clients
            .lines()
            .any(|l| l.contains("laddr=") && !l.contains(&plain) && !l.contains("name=sentinel-")),
        "{clients}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_is_reached_over_tls_on_every_node() {
    let certs = Certs::make();
    let (crt, key, ca) = (
        certs.path("server.crt"),
        certs.path("server.key"),
        certs.path("ca.crt"),
    );
    let (cluster, tls_ports) = RedisCluster::start_tls([&crt, &key, &ca]);
    let db = pg().fresh_db().await;
    let ca = ca.display().to_string();
    let mut args: Vec<String> = [
        "--listen",
        "127.0.0.1:0",
        "--admin-token",
        TOKEN,
        "--redis-ca-file",
        &ca,
        "--postgres",
        &db,
    ]
    .map(str::to_owned)
    .to_vec();
    for p in &tls_ports {
        args.extend(["--redis".to_owned(), format!("rediss://localhost:{p}")]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Proc::spawn(&args, &[]);
    let c = server.client();
    // Campaigns on several slots, so more than one node serves them.
    let ids: Vec<String> = (0..6).map(|i| format!("tls-cluster-{i}")).collect();
    for id in &ids {
        c.create_campaign(&json!({"id": id, "stock": 3}))
            .await
            .unwrap();
        a_claim_wins(&c, id, "u").await;
    }
    crate::helpers::settle_url(&c).await;
    for id in &ids {
        assert_orders(&c, id, 1).await;
    }
    // No connection of seckill's came in on a plain port: there, only the one asking.
    for n in &cluster.nodes {
        only_the_asker_in_plain(n.port);
    }
}
