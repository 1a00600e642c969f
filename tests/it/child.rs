//! The one way the tests start a real `seckill` child process: spawn it, read its log (stderr)
//! until the line that says it is ready, and keep collecting its log and its standard output
//! in the background. `process.rs` (crash tests), `guards/` and `scale_out/procs.rs` wrap it
//! with the flags each needs.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

/// The line `seckill serve` (and `seckill baseline`) logs once it accepts requests.
pub const SERVING: &str = "listening on http://";
/// The line `seckill worker` logs once its pipeline runs.
pub const WORKING: &str = "seckill worker running";

/// A started child: its process, the address after its ready line (`http://…`, none for a
/// worker), its log and its standard output so far.
pub struct Started {
    pub child: Child,
    pub url: Option<String>,
    pub log: Arc<Mutex<Vec<String>>>,
    pub stdout: Arc<Mutex<Vec<String>>>,
    /// Ends when the process closes its stderr (it exited).
    pub log_reader: JoinHandle<()>,
}

/// Spawns `cmd` (the `seckill` binary with its arguments) with its output piped and waits for
/// the log line containing `ready`; fails the test with the log if the child exits first.
pub fn start(mut cmd: Command, ready: &str) -> Started {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the seckill binary starts");
    let stdout = Arc::new(Mutex::new(Vec::new()));
    let sink = stdout.clone();
    let out = BufReader::new(child.stdout.take().expect("piped")).lines();
    std::thread::spawn(move || out.map_while(Result::ok).for_each(|l| sink.lock().push(l)));
    let mut lines = BufReader::new(child.stderr.take().expect("piped")).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let url = loop {
        let Some(Ok(line)) = lines.next() else {
            panic!("seckill exited before {ready:?}: {:?}", log.lock());
        };
        log.lock().push(line.clone());
        if let Some(at) = line.find(ready) {
            break line[at + ready.len()..]
                .split_whitespace()
                .next()
                .filter(|_| ready == SERVING)
                .map(|addr| format!("http://{addr}"));
        }
    };
    let sink = log.clone();
    let log_reader = std::thread::spawn(move || {
        lines
            .map_while(Result::ok)
            .for_each(|l| sink.lock().push(l))
    });
    Started {
        child,
        url,
        log,
        stdout,
        log_reader,
    }
}

/// `seckill <args>` as a command (`RUST_LOG=info` unless `env` says otherwise).
pub fn seckill(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_seckill"));
    cmd.args(args)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied());
    cmd
}
