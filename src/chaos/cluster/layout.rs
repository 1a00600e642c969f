//! How each deployment's processes are laid out: the embedded server with its data disk, fault
//! hook and clock, and the Redis of the scale-out deployments (one node behind the fault proxy,
//! a Sentinel-watched primary with replicas, or a Cluster of three masters with a replica
//! each). The seckill instances and the worker on top are the same for every scale-out
//! deployment (`super::Cluster::start`).

use std::path::Path;

use tokio::sync::Mutex;

use super::{Cluster, Fsync, ADMIN_TOKEN, RECLAIM_AFTER_MS};
use crate::chaos::disk::DataDisk;
use crate::chaos::proxy::Proxy;
use crate::chaos::schedule::{Deployment, Target};
use crate::chaos::servers::{postgres_spec, redis_spec};
use crate::chaos::{sentinel, shards};
use crate::testing::free_port;
use crate::testing::process::{Proc, Spec};

/// The admin token every seckill process of the campaign is started with.
pub(super) fn token() -> (String, String) {
    ("SECKILL_ADMIN_TOKEN".to_owned(), ADMIN_TOKEN.to_owned())
}

/// A process of this very binary (`serve`, `worker`), logging to `<root>/<name>.log`.
pub(super) fn seckill(
    exe: &Path,
    root: &Path,
    name: &str,
    args: Vec<String>,
    env: Vec<(String, String)>,
) -> Spec {
    Spec {
        name: name.to_owned(),
        program: exe.to_owned(),
        args,
        env,
        user: None,
        log: root.join(format!("{name}.log")),
    }
}

impl Cluster {
    pub(super) fn add(&mut self, t: Target, spec: Spec) {
        self.procs.insert(t, Mutex::new(Some(Proc::new(spec))));
    }

    /// The embedded server on its data disk, with the fsync-error flag and, for clock steps,
    /// libfaketime.
    pub(super) fn embedded(&mut self, exe: &Path, clock_steps: bool) -> anyhow::Result<()> {
        let root = self.dir.path().to_owned();
        let disk = DataDisk::new(&root)?;
        let data = disk.root().unwrap_or(&root).join("data");
        let port = free_port()?;
        let args = vec![
            "serve".into(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--data".into(),
            data.display().to_string(),
        ];
        // The fsync-error fault is the fault hook's flag on every machine.
        let io_flag = root.join("io-error");
        let mut faults = vec![format!("io_error_while={}", io_flag.display())];
        faults.extend(disk.fault_env());
        let mut env = vec![token(), ("SECKILL_FAULTS".to_owned(), faults.join(","))];
        // Without libfaketime the step is skipped and says why (`super::nemesis`).
        if clock_steps && crate::chaos::clock::library().is_ok() {
            let file = root.join("clock-offset");
            env.extend(crate::chaos::clock::env(&file)?);
            self.clock_file = Some(file);
        }
        self.io_error_flag = Some(io_flag);
        self.disk = Some(disk);
        self.add(
            Target::Instance(0),
            seckill(exe, &root, "instance-0", args, env),
        );
        self.procs.insert(Target::Disk, Mutex::new(None));
        self.ports.push(port);
        self.sqlite = Some(data.join("seckill.db"));
        Ok(())
    }

    /// The scale-out deployment's Redis processes; the `--redis` value of the instances and
    /// the worker, and the one of instance 0 (through the fault proxy on a single node).
    pub(super) async fn redis(
        &mut self,
        replicas: u8,
        fsync: Fsync,
    ) -> anyhow::Result<(String, String)> {
        let root = self.dir.path().to_owned();
        Ok(if self.deployment == Deployment::Cluster {
            let ports: Vec<u16> = (0..shards::NODES)
                .map(|_| free_port())
                .collect::<Result<_, _>>()?;
            let log = |name: &str| root.join(format!("{name}.log"));
            for (t, spec) in shards::specs(&root, &ports, fsync, log)? {
                self.add(t, spec);
            }
            let urls: Vec<String> = ports
                .iter()
                .map(|p| format!("redis://127.0.0.1:{p}"))
                .collect();
            self.shards = Some(ports);
            self.procs.insert(Target::Master, Mutex::new(None));
            (urls.join(","), urls.join(","))
        } else if self.deployment == Deployment::Sentinel {
            let ports = sentinel::Ports {
                nodes: (0..=replicas.max(1))
                    .map(|_| free_port())
                    .collect::<Result<_, _>>()?,
                sentinels: [free_port()?, free_port()?, free_port()?],
            };
            let log = |name: &str| root.join(format!("{name}.log"));
            for (t, spec) in sentinel::specs(&root, &ports, fsync, log)? {
                self.add(t, spec);
            }
            let urls = ports.urls();
            self.sentinel = Some(ports);
            self.procs.insert(Target::Primary, Mutex::new(None));
            self.procs.insert(Target::Replica, Mutex::new(None));
            (urls.clone(), urls)
        } else {
            self.redis_port = free_port()?;
            let spec = redis_spec(&root, self.redis_port, fsync)?;
            self.add(Target::Redis, spec);
            let proxy = Proxy::start(([127, 0, 0, 1], self.redis_port).into()).await?;
            let via_proxy = format!("redis://{}", proxy.addr());
            self.proxy = Some(proxy);
            self.procs.insert(Target::Link, Mutex::new(None));
            (format!("redis://127.0.0.1:{}", self.redis_port), via_proxy)
        })
    }

    /// PostgreSQL, the two seckill instances (instance 0 without a pipeline consumer, through
    /// `via_proxy`) and the worker, on the deployment's Redis.
    pub(super) fn scale_out(
        &mut self,
        exe: &Path,
        (redis, via_proxy): (&str, &str),
        wait_replicas: Option<u32>,
    ) -> anyhow::Result<()> {
        let root = self.dir.path().to_owned();
        self.pg_port = free_port()?;
        let spec = postgres_spec(&root, self.pg_port)?;
        self.add(Target::Postgres, spec);
        let pg = format!("postgres://postgres@127.0.0.1:{}/seckill", self.pg_port);
        self.pg_url = Some(pg.clone());
        let sentinel_args = match self.deployment {
            Deployment::Sentinel => {
                vec!["--redis-sentinel".to_owned(), sentinel::MASTER.to_owned()]
            }
            _ => vec![],
        };
        let deployment = self.deployment;
        let common = |redis: &str, extra: &[&str]| {
            let mut v: Vec<String> = vec![
                "--redis".into(),
                redis.to_owned(),
                "--postgres".into(),
                pg.clone(),
                "--reclaim-after-ms".into(),
                RECLAIM_AFTER_MS.to_string(),
            ];
            v.extend(sentinel_args.iter().cloned());
            // Refused with a Cluster (docs/SCALE_OUT.md).
            if let Some(n) = wait_replicas.filter(|_| deployment != Deployment::Cluster) {
                v.extend(["--redis-wait-replicas".to_owned(), n.to_string()]);
            }
            v.extend(extra.iter().map(|s| s.to_string()));
            v
        };
        for i in 0..2u8 {
            let port = free_port()?;
            let listen = format!("127.0.0.1:{port}");
            let mut args = vec!["serve".to_owned(), "--listen".to_owned(), listen];
            args.extend(if i == 0 {
                common(via_proxy, &["--no-worker"])
            } else {
                common(redis, &[])
            });
            let spec = seckill(exe, &root, &format!("instance-{i}"), args, vec![token()]);
            self.add(Target::Instance(i), spec);
            self.ports.push(port);
        }
        let mut args = vec!["worker".to_owned()];
        args.extend(common(redis, &[]));
        self.add(Target::Worker, seckill(exe, &root, "worker", args, vec![]));
        Ok(())
    }
}
