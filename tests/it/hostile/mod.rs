//! Hostile and broken clients: stalled heads beyond the descriptor limit, idle keep-alive
//! connections, bodies that never finish, and one user flooding fresh Idempotency-Keys.

mod idempotency;
mod slow_bodies;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::helpers::{App, TOKEN};
use crate::process::Proc;

/// Resident memory of process `pid`, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Sends `request` on `s` and reads one response; returns (status, body).
fn exchange(s: &mut TcpStream, request: &str) -> (u16, String) {
    s.write_all(request.as_bytes()).expect("request sent");
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).expect("response read");
        assert!(n > 0, "connection closed before a full response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        let Some(end) = text.find("\r\n\r\n") else {
            continue;
        };
        let len = text[..end]
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        if buf.len() >= end + 4 + len {
            let status = text[9..12].parse().expect("status code");
            return (status, text[end + 4..end + 4 + len].to_owned());
        }
    }
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: seckill\r\n\r\n")
}

/// Waits until the server closes `s` (EOF or reset); returns how long that took, or None if
/// it is still open after `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        let left = within.checked_sub(start.elapsed())?;
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(start.elapsed()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return None
            }
            Err(e) => panic!("reading a stalled connection: {e}"),
        }
    }
}

/// More stalled connections (a request line and one header, then nothing) than the server
/// has descriptors: a normal client is still answered at once, every stalled connection is
/// closed by the head timeout or to make room, and the cap is logged once.
#[test]
fn stalled_connections_beyond_the_descriptor_limit_lock_nobody_out() {
    const NOFILE: u64 = 256;
    const STALLED: usize = 400;
    let head = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let proc = Proc::spawn_limited(
        &[
            "--listen",
            "127.0.0.1:0",
            "--admin-token",
            TOKEN,
            "--data",
            dir.path().to_str().unwrap(),
            "--head-timeout-ms",
            "2000",
        ],
        &[],
        Some(NOFILE),
    );
    let addr = proc.url.trim_start_matches("http://").to_owned();
    let limit_line = proc
        .log
        .lock()
        .iter()
        .find(|l| l.contains("RLIMIT_NOFILE"))
        .cloned()
        .expect("the descriptor limit is logged");
    assert!(
        limit_line.contains(&format!("soft={NOFILE}")) && limit_line.contains("hard=256"),
        "{limit_line}"
    );

    let mut stalled: Vec<TcpStream> = (0..STALLED)
        .map(|i| {
            let mut s = TcpStream::connect(&addr).expect("connect");
            let line = format!("POST /v1/campaigns/c{i}/claims HTTP/1.1\r\nHost: seckill\r\n");
            s.write_all(line.as_bytes()).expect("partial head sent");
            s
        })
        .collect();
    // Stalled clients keep waiting (only connections waiting for a quarter of the head
    // timeout are closed to make room).
    std::thread::sleep(head / 2);

    let start = Instant::now();
    let mut normal = TcpStream::connect(&addr).expect("a normal client connects");
    normal
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (status, _) = exchange(&mut normal, &get("/healthz"));
    let answered = start.elapsed();
    assert_eq!(status, 200);
    eprintln!("normal client answered after {answered:?} with {STALLED} stalled connections, RLIMIT_NOFILE {NOFILE}");
    assert!(
        answered < head,
        "a normal client waited {answered:?}, longer than the head timeout"
    );

    for (i, s) in stalled.iter_mut().enumerate() {
        if closed_within(s, head * 3).is_none() {
            panic!("stalled connection {i} still open after {:?}", head * 3);
        }
    }
    eprintln!(
        "all {STALLED} stalled connections closed, {:?} after the normal client",
        start.elapsed()
    );
    let caps = proc
        .log
        .lock()
        .iter()
        .filter(|l| l.contains("connection cap reached"))
        .count();
    assert_eq!(caps, 1, "the cap is logged once, not once per connection");

    // And the server still serves afterwards.
    let mut again = TcpStream::connect(&addr).unwrap();
    assert_eq!(exchange(&mut again, &get("/healthz")).0, 200);
}

/// A keep-alive connection is served again while it is used and closed once it idles past
/// the idle timeout; so is a connection that opens and sends nothing; a request head that
/// starts and never ends is closed by the head timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_connections_are_closed() {
    let app = App::spawn_with(|c| {
        c.conn.idle_timeout_ms = 1_000;
        c.conn.head_timeout_ms = 2_000;
    })
    .await;
    let addr = app.admin_url().trim_start_matches("http://").to_owned();
    tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        for _ in 0..3 {
            assert_eq!(exchange(&mut s, &get("/healthz")).0, 200);
            std::thread::sleep(Duration::from_millis(500));
        }
        let idle = closed_within(&mut s, Duration::from_secs(10))
            .expect("an idle keep-alive connection is closed");
        assert!(
            idle >= Duration::from_millis(300) && idle < Duration::from_secs(5),
            "idle connection closed after {idle:?} (+500 ms already idle), timeout 1 s"
        );

        let mut silent = TcpStream::connect(&addr).unwrap();
        let took = closed_within(&mut silent, Duration::from_secs(10))
            .expect("a silent connection is closed");
        assert!(
            took >= Duration::from_millis(800) && took < Duration::from_secs(5),
            "silent connection closed after {took:?}, idle timeout 1 s"
        );

        // A head that starts after 500 ms of silence: the head clock (2 s) runs from its
        // first byte, so the connection outlives the idle timeout.
        let mut slow = TcpStream::connect(&addr).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        slow.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
        let took = closed_within(&mut slow, Duration::from_secs(10))
            .expect("an unfinished head is closed");
        assert!(
            took >= Duration::from_millis(1_700) && took < Duration::from_secs(6),
            "unfinished head closed {took:?} after its first byte, head timeout 2 s"
        );
    })
    .await
    .unwrap();
}

/// An admin upload whose body never finishes answers 408 after the body timeout and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfinished_admin_body_times_out() {
    let app = App::spawn_with(|c| c.conn.body_timeout_ms = 1_000).await;
    let addr = app.admin_url().trim_start_matches("http://").to_owned();
    let (status, body, took) = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let start = Instant::now();
        let head = format!(
            "POST /v1/campaigns HTTP/1.1\r\nHost: seckill\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{\"id\": \"slow\", "
        );
        let (status, body) = exchange(&mut s, &head);
        (status, body, start.elapsed())
    })
    .await
    .unwrap();
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("request_timeout"), "{body}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    let (code, _) = app
        .admin(reqwest::Method::GET, "/v1/campaigns/slow", None)
        .await;
    assert_eq!(code, 404, "nothing was created");
}
