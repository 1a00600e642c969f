//! Server processes a test or the fault campaign can kill, freeze, thaw and start again.
//!
//! Tests and the fault campaign are only worth what their faults are: SIGKILL of the real
//! `seckill serve`, `seckill worker`, redis-server and PostgreSQL processes, SIGSTOP for
//! longer than any lease. Each [`Proc`] remembers how it was started (program, arguments,
//! environment, user, log file) so it can be started again on the same port and directory.
//!
//! Every child is spawned by a dedicated thread that waits on it, with a parent-death signal
//! set on that thread, so no server outlives the test or the campaign, even if that process is
//! killed. PostgreSQL refuses to run as root; as root its processes run as `postgres`.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use anyhow::Context;

/// How long a stop waits for the process to exit.
const STOP_WAIT: Duration = Duration::from_secs(60);

/// How to (re)start one server process.
#[derive(Debug, Clone)]
pub struct Spec {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    /// (uid, gid) to run as.
    pub user: Option<(u32, u32)>,
    pub log: PathBuf,
}

/// A server process under the control of a test or the campaign.
pub struct Proc {
    pub spec: Spec,
    running: Option<Running>,
    stopped: bool,
}

struct Running {
    pid: u32,
    /// Behind a mutex so a fixture holding a `Proc` can be shared between threads.
    exited: Mutex<mpsc::Receiver<ExitStatus>>,
}

impl Running {
    fn wait(self, timeout: Duration) {
        let exited = self.exited.into_inner().unwrap_or_else(|e| e.into_inner());
        let _ = exited.recv_timeout(timeout);
    }
}

impl Proc {
    pub fn new(spec: Spec) -> Proc {
        Proc {
            spec,
            running: None,
            stopped: false,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().map(|r| r.pid)
    }

    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Starts the process (appending to its log).
    pub fn start(&mut self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.running.is_none(),
            "{} is already running",
            self.spec.name
        );
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)
            .with_context(|| format!("log file {}", self.spec.log.display()))?;
        if let Some((uid, gid)) = self.spec.user {
            std::os::unix::fs::chown(&self.spec.log, Some(uid), Some(gid))?;
        }
        let mut cmd = Command::new(&self.spec.program);
        cmd.args(&self.spec.args)
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: a kill takes the server with all its children (the
            // PostgreSQL backends), as when a container or machine dies.
            .process_group(0);
        let user = self.spec.user;
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if let Some((uid, gid)) = user {
                    if libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let (pid_tx, pid_rx) = mpsc::channel();
        let (exit_tx, exited) = mpsc::channel();
        std::thread::spawn(move || match cmd.spawn() {
            Ok(mut child) => {
                let _ = pid_tx.send(Ok(child.id()));
                if let Ok(status) = child.wait() {
                    let _ = exit_tx.send(status);
                }
            }
            Err(e) => {
                let _ = pid_tx.send(Err(e));
            }
        });
        let pid = pid_rx
            .recv()
            .context("the spawning thread died")?
            .with_context(|| format!("cannot start {}", self.spec.program.display()))?;
        self.running = Some(Running {
            pid,
            exited: Mutex::new(exited),
        });
        self.stopped = false;
        Ok(())
    }

    pub fn signal(&self, sig: i32) {
        if let Some(r) = &self.running {
            // SAFETY: kill(2) on the group of a pid this process spawned and has not reaped.
            unsafe { libc::kill(-(r.pid as i32), sig) };
        }
    }

    /// SIGKILL and wait until the process is gone (a no-op if it is not running).
    pub async fn kill(&mut self) {
        self.stop_with(libc::SIGKILL).await;
    }

    /// Sends `sig` (after a SIGCONT if it was frozen) and waits up to 60 s for the exit.
    pub async fn stop_with(&mut self, sig: i32) {
        if let Some(r) = self.send_stop(sig) {
            let _ = tokio::task::spawn_blocking(move || r.wait(STOP_WAIT)).await;
        }
    }

    /// [`Proc::stop_with`] for a caller outside the runtime (a synchronous test fixture, a
    /// `Drop`): blocks the thread until the process is gone.
    pub fn stop_blocking(&mut self, sig: i32) {
        if let Some(r) = self.send_stop(sig) {
            r.wait(STOP_WAIT);
        }
    }

    fn send_stop(&mut self, sig: i32) -> Option<Running> {
        let r = self.running.take()?;
        // SAFETY: as in `signal`.
        unsafe { libc::kill(-(r.pid as i32), sig) };
        if self.stopped && sig != libc::SIGKILL {
            unsafe { libc::kill(-(r.pid as i32), libc::SIGCONT) };
        }
        self.stopped = false;
        Some(r)
    }

    /// SIGSTOP: the process freezes with its sockets open, as a long GC pause or a stalled VM.
    pub fn freeze(&mut self) {
        if self.running.is_some() {
            self.signal(libc::SIGSTOP);
            self.stopped = true;
        }
    }

    pub fn thaw(&mut self) {
        if self.stopped {
            self.signal(libc::SIGCONT);
            self.stopped = false;
        }
    }

    /// Whether the process died on its own (not killed by the campaign).
    pub fn exited_by_itself(&mut self) -> Option<ExitStatus> {
        let running = self.running.as_ref()?;
        let status = running
            .exited
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .try_recv()
            .ok()?;
        self.running = None;
        Some(status)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            // SAFETY: as in `signal`.
            unsafe { libc::kill(-(r.pid as i32), libc::SIGKILL) };
            r.wait(Duration::from_secs(10));
        }
    }
}
