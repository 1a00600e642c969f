//! A real `seckill` child process, for tests that kill, signal or restart it.

use std::path::Path;
use std::process::Child;
use std::sync::Arc;

use parking_lot::Mutex;
use seckill::bench::client::Client;

use crate::child;
use crate::helpers::TOKEN;

/// A `seckill serve` child process on a free port.
pub struct Proc {
    pub child: Child,
    pub url: String,
    /// stderr lines (the log).
    pub log: Arc<Mutex<Vec<String>>>,
    /// stdout lines (user-facing output, e.g. a generated admin token).
    pub stdout: Arc<Mutex<Vec<String>>>,
}

impl Proc {
    /// `seckill serve` on a free port with `data` as its data directory.
    pub fn start(data: &Path) -> Proc {
        let data = data.to_str().expect("utf-8 temp path");
        let args = [
            "--listen",
            "127.0.0.1:0",
            "--admin-token",
            TOKEN,
            "--data",
            data,
        ];
        Self::spawn(&args, &[])
    }

    /// `seckill serve <args>` with `env` set; waits for the line that gives its address.
    pub fn spawn(args: &[&str], env: &[(&str, &str)]) -> Proc {
        Self::spawn_limited(args, env, None)
    }

    /// [`Proc::spawn`] with `RLIMIT_NOFILE` (soft and hard) set to `nofile` in the child.
    pub fn spawn_limited(args: &[&str], env: &[(&str, &str)], nofile: Option<u64>) -> Proc {
        let mut cmd = child::seckill(&["serve"], env);
        cmd.args(args);
        if let Some(n) = nofile {
            use std::os::unix::process::CommandExt;
            let lim = libc::rlimit {
                rlim_cur: n as libc::rlim_t,
                rlim_max: n as libc::rlim_t,
            };
            // SAFETY: setrlimit is async-signal-safe; it runs in the child between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                        Ok(())
                    } else {
                        Err(std::io::Error::last_os_error())
                    }
                });
            }
        }
        let started = child::start(cmd, child::SERVING);
        Proc {
            child: started.child,
            url: started.url.expect("serve gives its address"),
            log: started.log,
            stdout: started.stdout,
        }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url, TOKEN)
    }

    pub fn signal(&self, sig: i32) {
        let rc = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(rc, 0, "signal delivered");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
