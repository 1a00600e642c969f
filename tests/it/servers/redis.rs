//! Throwaway redis-server instances: single node and three-master Cluster, with or without
//! TLS (the Sentinel setup is in `sentinel.rs`).

use std::path::Path;
use std::time::Duration;

use seckill::testing::process::Proc;
use seckill::testing::servers;

use super::{exit_within, free_port, redis_raw, start, wait_until};

/// A redis-server on a free port with its own directory.
pub struct RedisServer {
    pub port: u16,
    proc: Proc,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// A plain server (no persistence) unless `args` say otherwise.
    pub fn start(args: &[&str]) -> RedisServer {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = dir.path().join("redis.log");
        let r = RedisServer {
            port,
            proc: start(servers::redis_spec(
                "redis-server",
                dir.path(),
                port,
                args,
                log,
            )),
            dir,
        };
        r.wait_ready();
        r
    }

    /// With AOF persistence fsynced on every write.
    pub fn start_aof() -> RedisServer {
        Self::start(&["--appendonly", "yes", "--appendfsync", "always"])
    }

    fn wait_ready(&self) {
        let port = self.port;
        wait_until("redis-server", || {
            redis_raw(port, "PING").is_some_and(|r| r.starts_with("+PONG"))
        });
    }

    /// The server's working directory (its `dump.rdb` and AOF live here).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The last `n` lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        super::tail(&self.dir.path().join("redis.log"), n)
    }

    /// kill -9, then start again on the same port and directory.
    pub fn kill_and_restart(&mut self) {
        self.kill_9();
        self.start_again();
    }

    /// Sends `sig` (SIGSTOP, SIGCONT) to the running server.
    pub fn signal(&self, sig: i32) {
        self.proc.signal(sig);
    }

    /// kill -9; returns once the process is gone.
    pub fn kill_9(&mut self) {
        self.proc.stop_blocking(libc::SIGKILL);
    }

    /// Starts a killed server again on the same port and directory; returns once it answers
    /// PING (its AOF loaded).
    pub fn start_again(&mut self) {
        assert!(!self.proc.is_running(), "the server is still running");
        self.proc.start().expect("redis-server starts again");
        self.wait_ready();
    }
}

/// Three Redis Cluster masters on loopback ports (with or without a replica each), slots spread
/// by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> RedisCluster {
        Self::start_with(&[])
    }

    /// With `extra` redis-server flags on every node (e.g. AOF).
    pub fn start_with(extra: &[&str]) -> RedisCluster {
        Self::create(Self::nodes(3, "5000", extra))
    }

    /// Three masters whose clients and cluster bus speak TLS with `files` (certificate, key,
    /// CA), created over TLS: the slot map names their TLS ports, which this returns. Their
    /// plain ports stay open for the test's own checks only.
    pub fn start_tls(files: [&Path; 3]) -> (RedisCluster, Vec<u16>) {
        let files = paths(files);
        let tls_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let nodes = Self::nodes_with(3, "5000", |i| {
            let port = tls_ports[i];
            let mut flags = flags(&tls_settings(port, &files));
            // The bus port named explicitly: with a plain and a TLS port, Redis 7.0 would put
            // it next to the plain one while peers look for it next to the TLS one.
            flags.extend(["--tls-cluster", "yes", "--cluster-port"].map(str::to_owned));
            flags.push((port + 10_000).to_string());
            flags
        });
        let mut cmd = servers::cluster_create(&tls_ports, 0).unwrap_or_else(|e| panic!("{e:#}"));
        cmd.args(["--tls", "--cacert", &files[2]]);
        (Self::join(cmd, nodes), tls_ports)
    }

    /// `n` cluster-enabled servers with this node timeout (ms) and `extra` flags.
    fn nodes(n: usize, timeout_ms: &str, extra: &[&str]) -> Vec<RedisServer> {
        Self::nodes_with(n, timeout_ms, |_| {
            extra.iter().map(|f| f.to_string()).collect()
        })
    }

    /// `n` cluster-enabled servers with this node timeout (ms), node `i` with `extra(i)` flags.
    fn nodes_with(
        n: usize,
        timeout_ms: &str,
        extra: impl Fn(usize) -> Vec<String>,
    ) -> Vec<RedisServer> {
        (0..n)
            .map(|i| {
                let extra = extra(i);
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    timeout_ms,
                ];
                args.extend(extra.iter().map(String::as_str));
                RedisServer::start(&args)
            })
            .collect()
    }

    /// Three masters that announce `announce[i]` as their client port (a proxy in front of
    /// each, say): the slot map every cluster client reads names those ports. `started` gets
    /// the nodes' own ports before the cluster is created (through the announced ports).
    pub fn start_announcing(announce: [u16; 3], started: impl FnOnce(&[u16])) -> RedisCluster {
        let nodes = Self::nodes(announce.len(), "5000", &[]);
        for (n, port) in nodes.iter().zip(announce) {
            for set in [
                format!("CONFIG SET cluster-announce-port {port}"),
                format!("CONFIG SET cluster-announce-bus-port {}", n.port + 10000),
            ] {
                let r = redis_raw(n.port, &set).unwrap_or_default();
                assert!(r.starts_with("+OK"), "{set}: {r}");
            }
        }
        started(&nodes.iter().map(|n| n.port).collect::<Vec<_>>());
        Self::create(nodes)
    }

    /// Three masters, each with one replica (six nodes, `--cluster-replicas 1`), a node timeout
    /// of 1 s, and `extra` flags on every node; returns once every replica's link is up.
    pub fn start_with_replicas(extra: &[&str]) -> RedisCluster {
        let cluster = Self::create_with(Self::nodes(6, "1000", extra), 1);
        for n in &cluster.nodes {
            let port = n.port;
            wait_until("every replica's link", || {
                redis_raw(port, "INFO replication").is_some_and(|r| {
                    r.contains("role:master") || r.contains("master_link_status:up")
                })
            });
        }
        cluster
    }

    /// The node serving the slot of `key` and its replica, as indexes into `nodes`.
    pub fn serving(&self, key: &str) -> (usize, usize) {
        let port = self.nodes[0].port;
        let slot: u16 = redis_raw(port, &format!("CLUSTER KEYSLOT {key}"))
            .and_then(|r| r.trim().trim_start_matches(':').parse().ok())
            .expect("CLUSTER KEYSLOT");
        let text = redis_raw(port, "CLUSTER NODES").expect("CLUSTER NODES");
        let lines: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() >= 8)
            .collect();
        let port_of = |f: &[&str]| -> u16 {
            let addr = f[1].split('@').next().unwrap();
            addr.rsplit(':').next().unwrap().parse().unwrap()
        };
        let covers = |range: &str| {
            let mut ends = range
                .split('-')
                .map(|s| s.parse::<u16>().unwrap_or(u16::MAX));
            let lo = ends.next().unwrap_or(u16::MAX);
            let hi = ends.next().unwrap_or(lo);
            lo <= slot && slot <= hi
        };
        let master = lines
            .iter()
            .find(|f| f[2].contains("master") && f[8..].iter().any(|r| covers(r)))
            .expect("a master serves the slot");
        let replica = lines
            .iter()
            .find(|f| f[3] == master[0])
            .expect("the master has a replica");
        let index = |p: u16| self.nodes.iter().position(|n| n.port == p).unwrap();
        (index(port_of(master)), index(port_of(replica)))
    }

    fn create(nodes: Vec<RedisServer>) -> RedisCluster {
        Self::create_with(nodes, 0)
    }

    fn create_with(nodes: Vec<RedisServer>, replicas: u8) -> RedisCluster {
        let ports: Vec<u16> = nodes.iter().map(|n| n.port).collect();
        let cmd = servers::cluster_create(&ports, replicas).unwrap_or_else(|e| panic!("{e:#}"));
        Self::join(cmd, nodes)
    }

    /// Runs `create` (`redis-cli --cluster create` over `nodes`) and waits for the cluster.
    fn join(mut create: std::process::Command, nodes: Vec<RedisServer>) -> RedisCluster {
        use std::process::Stdio;
        // redis-cli waits for the nodes to join for as long as it takes: bounded here.
        let mut child = create
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("redis-cli runs");
        assert!(
            exit_within(&mut child, Duration::from_secs(120)).is_some(),
            "the cluster's nodes did not join within 120 s"
        );
        let out = child.wait_with_output().expect("redis-cli's output");
        assert!(out.status.success(), "cluster create failed: {out:?}");
        for n in &nodes {
            let port = n.port;
            wait_until("the Redis Cluster", || {
                redis_raw(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
        }
        RedisCluster { nodes }
    }

    /// The seed URLs, as `--redis` takes them.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }
}

/// `files` (certificate, key, CA) as the paths redis-server is given.
pub(super) fn paths(files: [&Path; 3]) -> [String; 3] {
    files.map(|p| p.display().to_string())
}

/// The settings of a redis-server or Sentinel serving TLS on `port` with `files`: clients need
/// no certificate of their own, and replication goes over TLS too.
pub(super) fn tls_settings(port: u16, files: &[String; 3]) -> [(&'static str, String); 6] {
    [
        ("tls-port", port.to_string()),
        ("tls-cert-file", files[0].clone()),
        ("tls-key-file", files[1].clone()),
        ("tls-ca-cert-file", files[2].clone()),
        ("tls-auth-clients", "no".to_owned()),
        ("tls-replication", "yes".to_owned()),
    ]
}

/// `settings` as redis-server flags.
pub(super) fn flags(settings: &[(&str, String)]) -> Vec<String> {
    settings
        .iter()
        .flat_map(|(setting, value)| [format!("--{setting}"), value.clone()])
        .collect()
}
