//! Throwaway primary + replica + Sentinel, with or without TLS.

use std::path::Path;
use std::time::Duration;

use seckill::testing::process::Proc;
use seckill::testing::servers;

use super::redis::{flags, paths, tls_settings, RedisServer};
use super::{free_port, redis_raw, start, wait_until};

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
    dir: tempfile::TempDir,
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
    pub fn start_tls(files: [&Path; 3]) -> SentinelSetup {
        Self::build(&[], Some(files))
    }

    fn build(priorities: &[u32], tls: Option<[&Path; 3]>) -> SentinelSetup {
        let tls_ports = tls.map(|_| [free_port(), free_port(), free_port()]);
        let tls = tls.map(paths);
        // What node `i` (primary, replica, Sentinel) is given to serve TLS, if it does.
        let settings = |i: usize| match (&tls, tls_ports) {
            (Some(files), Some(ports)) => tls_settings(ports[i], files).to_vec(),
            _ => vec![],
        };
        let (primary_tls, replica_tls) = (flags(&settings(0)), flags(&settings(1)));
        fn strs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        let aof = ["--appendonly", "yes", "--appendfsync", "always"];
        let primary = RedisServer::start(&[&aof[..], &strs(&primary_tls)].concat());
        // The port replicas and the Sentinel reach the primary on.
        let primary_port = tls_ports.map_or(primary.port, |t| t[0]).to_string();
        let mut replica_args = aof.to_vec();
        replica_args.extend(["--replicaof", "127.0.0.1", &primary_port]);
        let replica = RedisServer::start(&[&replica_args[..], &strs(&replica_tls)].concat());
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
        for (setting, value) in settings(2) {
            conf.push_str(&format!("{setting} {value}\n"));
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
            dir,
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

    /// What every server and the Sentinel say of replication, with the tails of their logs:
    /// printed when a failover test fails, to tell why.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let servers = [&self.primary, &self.replica]
            .into_iter()
            .chain(&self.others);
        for (i, r) in servers.enumerate() {
            let info = redis_raw(r.port, "INFO replication").unwrap_or_else(|| "down".into());
            out.push_str(&format!(
                "--- server {i} (port {}): {info}\n{}\n",
                r.port,
                r.log_tail(25)
            ));
        }
        let replicas = redis_raw(
            self.sentinel_port,
            &format!("SENTINEL replicas {}", Self::MASTER),
        )
        .unwrap_or_default();
        out.push_str(&format!(
            "--- sentinel: {replicas}\n{}\n",
            super::tail(&self.dir.path().join("sentinel.log"), 40)
        ));
        out
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
