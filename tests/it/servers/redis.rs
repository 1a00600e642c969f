//! Throwaway redis-server instances: single node, three-master Cluster, primary + replica +
//! Sentinel.

use std::time::Duration;

use seckill::testing::process::Proc;
use seckill::testing::servers;

use super::{free_port, redis_raw, start, wait_until};

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
    /// CA), created over TLS: the slot map names their TLS ports, whose ports it returns. Their plain ports stay open for the test's own checks only.
    pub fn start_tls(files: [&std::path::Path; 3]) -> (RedisCluster, Vec<u16>) {
        let files: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        let tls_ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
        let nodes: Vec<RedisServer> = tls_ports
            .iter()
            .map(|t| {
                // The bus port named explicitly: with a plain and a TLS port, Redis 7.0 would
                // put it next to the plain one while peers look for it next to the TLS one.
                let bus = (t + 10_000).to_string();
                let t = t.to_string();
                RedisServer::start(&[
                    "--cluster-port",
                    &bus,
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                    "--tls-port",
                    &t,
                    "--tls-cert-file",
                    &files[0],
                    "--tls-key-file",
                    &files[1],
                    "--tls-ca-cert-file",
                    &files[2],
                    "--tls-auth-clients",
                    "no",
                    "--tls-cluster",
                    "yes",
                    "--tls-replication",
                    "yes",
                ])
            })
            .collect();
        let mut cmd = servers::cluster_create(&tls_ports, 0).unwrap_or_else(|e| panic!("{e:#}"));
        cmd.args(["--tls", "--cacert", &files[2]]);
        // redis-cli waits for the nodes to join for as long as it takes: bounded here.
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-cli runs");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("the TLS cluster's nodes did not join within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(status.success(), "cluster create failed: {status:?}");
        for n in &nodes {
            let port = n.port;
            wait_until("the Redis Cluster", || {
                redis_raw(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
        }
        (RedisCluster { nodes }, tls_ports)
    }

    /// `n` cluster-enabled servers with this node timeout (ms) and `extra` flags.
    fn nodes(n: usize, timeout_ms: &str, extra: &[&str]) -> Vec<RedisServer> {
        (0..n)
            .map(|_| {
                let mut args = vec![
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    timeout_ms,
                ];
                args.extend_from_slice(extra);
                RedisServer::start(&args)
            })
            .collect()
    }

    /// Three masters that announce `announce[i]` as their client port (a proxy in front of
    /// each, say): the slot map every cluster client reads names those ports. `started` gets
    /// the nodes' own ports before the cluster is created (through the announced ports).
    pub fn start_announcing(announce: [u16; 3], started: impl FnOnce(&[u16])) -> RedisCluster {
        let nodes: Vec<RedisServer> = announce
            .iter()
            .map(|_| {
                RedisServer::start(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "5000",
                ])
            })
            .collect();
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
        let mut cmd = servers::cluster_create(&ports, replicas).unwrap_or_else(|e| panic!("{e:#}"));
        let out = cmd.output().expect("redis-cli runs");
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

/// A primary, one replica and one Sentinel watching them as `mymaster`.
pub struct SentinelSetup {
    pub primary: RedisServer,
    pub replica: RedisServer,
    /// Further replicas ([`SentinelSetup::start_with`]), in the order of their priorities.
    pub others: Vec<RedisServer>,
    pub sentinel_port: u16,
    /// The TLS ports of primary, replica and Sentinel ([`SentinelSetup::start_tls`]).
    tls_ports: Option<[u16; 3]>,
    _sentinel: Proc,
    _dir: tempfile::TempDir,
}

impl SentinelSetup {
    pub const MASTER: &'static str = "mymaster";

    pub fn start() -> SentinelSetup {
        Self::start_with(&[])
    }

    /// With one further replica per entry of `priorities` (its `replica-priority`; 0 = never
    /// promoted).
    pub fn start_with(priorities: &[u32]) -> SentinelSetup {
        Self::build(priorities, None)
    }

    /// Primary, replica and Sentinel serving TLS with `files` (certificate, key, CA) on ports
    /// of their own, replicating and monitoring over TLS: the Sentinel names the primary by its
    /// TLS port, and [`SentinelSetup::sentinel_url`] is the Sentinel's TLS port. Their plain
    /// ports stay open for the test's own checks only.
    pub fn start_tls(files: [&std::path::Path; 3]) -> SentinelSetup {
        Self::build(&[], Some(files))
    }

    fn build(priorities: &[u32], tls: Option<[&std::path::Path; 3]>) -> SentinelSetup {
        let tls_ports = tls.map(|_| [free_port(), free_port(), free_port()]);
        let files: Vec<String> = tls
            .iter()
            .flatten()
            .map(|p| p.display().to_string())
            .collect();
        let ports: Vec<String> = tls_ports.iter().flatten().map(u16::to_string).collect();
        // What a node serving TLS on port `i` adds to its flags.
        let tls_args = |i: usize| -> Vec<&str> {
            match tls {
                None => vec![],
                Some(_) => vec![
                    "--tls-port",
                    &ports[i],
                    "--tls-cert-file",
                    &files[0],
                    "--tls-key-file",
                    &files[1],
                    "--tls-ca-cert-file",
                    &files[2],
                    "--tls-auth-clients",
                    "no",
                    "--tls-replication",
                    "yes",
                ],
            }
        };
        let aof = ["--appendonly", "yes", "--appendfsync", "always"];
        let primary = RedisServer::start(&[&aof[..], &tls_args(0)].concat());
        // The port replicas and the Sentinel reach the primary on.
        let primary_port = tls_ports.map_or(primary.port, |t| t[0]).to_string();
        let mut replica_args = aof.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
        let replica = RedisServer::start(&[&replica_args[..], &tls_args(1)].concat());
        let others: Vec<RedisServer> = priorities
            .iter()
            .map(|p| {
                let p = p.to_string();
                let mut args = replica_args.clone();
                args.extend(["--replica-priority", &p]);
                RedisServer::start(&args)
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndir {{dir}}\n\
             sentinel monitor {m} 127.0.0.1 {primary_port} 1\n\
             sentinel down-after-milliseconds {m} 1000\n\
             sentinel failover-timeout {m} 5000\n",
            m = Self::MASTER
        );
        if tls.is_some() {
            conf.push_str(&format!(
                "tls-port {}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
                 tls-auth-clients no\ntls-replication yes\n",
                ports[2], files[0], files[1], files[2]
            ));
        }
        let log = dir.path().join("sentinel.log");
        let spec = servers::conf_spec(
            dir.path(),
            "sentinel",
            ("sentinel.conf", conf),
            &["--sentinel"],
            log,
        );
        let sentinel = start(spec);
        let replica_port = tls_ports.map_or(replica.port, |t| t[1]).to_string();
        let ports: Vec<String> = others.iter().map(|r| r.port.to_string()).collect();
        wait_until("the Sentinel to see the replicas", || {
            redis_raw(port, &format!("SENTINEL replicas {}", Self::MASTER)).is_some_and(|r| {
                r.contains(&replica_port) && ports.iter().all(|p| r.contains(p.as_str()))
            })
        });
        SentinelSetup {
            primary,
            replica,
            others,
            sentinel_port: port,
            tls_ports,
            _sentinel: sentinel,
            _dir: dir,
        }
    }

    pub fn sentinel_url(&self) -> String {
        match self.tls_ports {
            None => format!("redis://127.0.0.1:{}", self.sentinel_port),
            Some(t) => format!("rediss://localhost:{}", t[2]),
        }
    }

    /// Waits until the replica has everything the primary acknowledged.
    pub fn wait_replicated(&self) {
        // The replica's first full sync can take seconds on a loaded machine; each WAIT
        // stays under the raw client's read timeout.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let reply = redis_raw(self.primary.port, "WAIT 1 2000").unwrap_or_default();
            if reply.starts_with(":1") {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the replica did not catch up within 60 s: {reply:?}"
            );
        }
    }

    /// kill -9 of the primary; returns once the Sentinel promoted the replica.
    pub fn kill_primary_and_fail_over(&mut self) {
        self.primary.kill_9();
        let replica_port = self.tls_ports.map_or(self.replica.port, |t| t[1]);
        let replica_port = replica_port.to_string();
        let port = self.sentinel_port;
        wait_until("the Sentinel failover", || {
            redis_raw(
                port,
                &format!("SENTINEL get-master-addr-by-name {}", Self::MASTER),
            )
            .is_some_and(|r| r.contains(&replica_port))
        });
    }
}
