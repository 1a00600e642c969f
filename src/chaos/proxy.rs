//! A TCP fault proxy between one scale-out instance and Redis: the network partition nemesis.
//!
//! Killing redis-server tests a Redis that is gone for everyone; a sale also meets a network
//! that fails for *one* instance while the others carry on: a switch port that stops
//! forwarding, a route that loses one direction, a congested link, a load balancer that cuts
//! every connection. seckill chaos points instance 0's `--redis` at this proxy and switches
//! its [`Mode`] on the schedule:
//!
//! - [`Mode::Pass`]: bytes go through as they arrive;
//! - [`Mode::Blackhole`]: nothing is read from either side and no connection is accepted
//!   (they wait in the listen backlog): bytes are held, as a silent partition holds them in
//!   TCP's buffers, and flow again when the mode changes;
//! - [`Mode::Stall`]: one direction's packets are lost, the other passes. TCP retransmits
//!   lost packets, so the bytes of that direction are held and flow again, in order, when the
//!   fault ends; a stream that stays open never has a hole. (Discarding them instead made a
//!   stream no TCP connection can have: every later Redis reply was read as the answer to
//!   another request.) The instance's own heartbeat decides whether it waits or reconnects;
//! - [`Mode::Latency`]: every chunk waits a random time in the range before it is written, in
//!   each direction, order kept;
//! - [`Proxy::reset`]: every proxied connection is closed at once (new ones are accepted).
//!
//! It runs inside the `seckill chaos` process on tokio; it needs no privileges (no iptables).

use std::net::SocketAddr;
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// A direction of the proxied traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the client (the seckill instance) to the upstream (Redis).
    Up,
    /// From the upstream (Redis) to the client.
    Down,
}

/// What the proxy does with the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Blackhole,
    /// The packets of this direction are lost: its bytes wait until the mode changes.
    Stall(Dir),
    /// Each chunk waits a random time in `min..=max` before it is written.
    Latency {
        min: Duration,
        max: Duration,
    },
}

/// A running proxy; it stops (closing every connection) when dropped.
pub struct Proxy {
    addr: SocketAddr,
    mode: watch::Sender<Mode>,
    resets: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (mode, _) = watch::channel(Mode::Pass);
        let (resets, _) = watch::channel(0u64);
        let task = tokio::spawn(accept(
            listener,
            upstream,
            mode.subscribe(),
            resets.subscribe(),
        ));
        Ok(Proxy {
            addr,
            mode,
            resets,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set(&self, mode: Mode) {
        tracing::info!(?mode, "fault proxy mode");
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Closes every connection proxied so far.
    pub fn reset(&self) {
        tracing::info!("fault proxy closes every connection");
        self.resets.send_modify(|n| *n += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.resets.send_modify(|n| *n += 1);
    }
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    mut mode: watch::Receiver<Mode>,
    resets: watch::Receiver<u64>,
) {
    loop {
        if !open(&mut mode).await {
            return;
        }
        let client = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "fault proxy accept");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let (mode, mut reset) = (mode.clone(), resets.clone());
        reset.mark_unchanged();
        tokio::spawn(async move {
            let Ok(server) = TcpStream::connect(upstream).await else {
                return; // Upstream down: the client sees its connection closed.
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            // Either direction ending, or a reset, closes both sockets.
            tokio::select! {
                _ = pump(cr, sw, Dir::Up, mode.clone()) => {}
                _ = pump(sr, cw, Dir::Down, mode) => {}
                _ = reset.changed() => {}
            }
        });
    }
}

/// Waits while the mode is a blackhole; false when the proxy is gone.
async fn open(mode: &mut watch::Receiver<Mode>) -> bool {
    mode.wait_for(|m| *m != Mode::Blackhole).await.is_ok()
}

/// Waits while `dir` is held (a blackhole, or that direction stalled); false when the proxy
/// is gone.
async fn open_for(mode: &mut watch::Receiver<Mode>, dir: Dir) -> bool {
    mode.wait_for(|m| *m != Mode::Blackhole && *m != Mode::Stall(dir))
        .await
        .is_ok()
}

async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    dir: Dir,
    mut mode: watch::Receiver<Mode>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !open_for(&mut mode, dir).await {
            return Ok(());
        }
        let n = from.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        // A blackhole or stall that began while this chunk was read holds it until it ends.
        if !open_for(&mut mode, dir).await {
            return Ok(());
        }
        let current = *mode.borrow();
        if let Mode::Latency { min, max } = current {
            let wait = rand::thread_rng().gen_range(min..=max);
            tokio::time::sleep(wait).await;
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// An echo server; returns its address.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn roundtrip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        got
    }

    #[tokio::test]
    async fn bytes_pass_and_latency_is_added() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        assert_eq!(roundtrip(&mut s, &big).await, big);

        let t = Instant::now();
        roundtrip(&mut s, b"ping").await;
        let fast = t.elapsed();
        p.set(Mode::Latency {
            min: Duration::from_millis(100),
            max: Duration::from_millis(150),
        });
        let t = Instant::now();
        assert_eq!(roundtrip(&mut s, b"ping").await, b"ping");
        let slow = t.elapsed();
        // One chunk each way, each delayed 100–150 ms.
        assert!(slow >= Duration::from_millis(200), "{slow:?}");
        assert!(fast < Duration::from_millis(100), "{fast:?}");
    }

    #[tokio::test]
    async fn blackhole_holds_then_delivers() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut s = TcpStream::connect(p.addr()).await.unwrap();
        roundtrip(&mut s, b"hello").await;
        p.set(Mode::Blackhole);
        tokio::time::sleep(Duration::from_millis(20)).await;
        s.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_millis(500), s.read_exact(&mut got)).await;
        assert!(r.is_err(), "a blackhole let bytes through");
        // A new connection is not served either.
        let mut s2 = TcpStream::connect(p.addr()).await.unwrap();
        s2.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_millis(300), s2.read_exact(&mut one)).await;
        assert!(r.is_err(), "a blackhole served a new connection");
        p.set(Mode::Pass);
        s.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"held");
        s2.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"x");
    }

    #[tokio::test]
    async fn stall_holds_one_direction_then_delivers_it() {
        let upstream = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let p = Proxy::start(upstream.local_addr().unwrap()).await.unwrap();
        let mut c = TcpStream::connect(p.addr()).await.unwrap();
        let (mut u, _) = upstream.accept().await.unwrap();
        stalled(&p, Dir::Up, &mut c, &mut u).await;
        stalled(&p, Dir::Down, &mut u, &mut c).await;
    }

    /// Stalls `dir` (bytes `from` -> `to`): they are held while the other direction passes,
    /// then arrive whole and in order, before what follows.
    async fn stalled(p: &Proxy, dir: Dir, from: &mut TcpStream, to: &mut TcpStream) {
        p.set(Mode::Stall(dir));
        tokio::time::sleep(Duration::from_millis(20)).await;
        from.write_all(b"held").await.unwrap();
        to.write_all(b"ok").await.unwrap();
        let mut b = [0u8; 2];
        from.read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"ok", "{dir:?}");
        let mut got = [0u8; 4];
        let r = tokio::time::timeout(Duration::from_millis(300), to.read_exact(&mut got));
        assert!(
            r.await.is_err(),
            "a stalled direction let bytes through: {dir:?}"
        );
        p.set(Mode::Pass);
        from.write_all(b"next").await.unwrap();
        let mut all = [0u8; 8];
        to.read_exact(&mut all).await.unwrap();
        assert_eq!(&all, b"heldnext", "{dir:?}");
    }

    #[tokio::test]
    async fn reset_closes_every_connection() {
        let p = Proxy::start(echo().await).await.unwrap();
        let mut a = TcpStream::connect(p.addr()).await.unwrap();
        let mut b = TcpStream::connect(p.addr()).await.unwrap();
        roundtrip(&mut a, b"a").await;
        roundtrip(&mut b, b"b").await;
        p.reset();
        for s in [&mut a, &mut b] {
            let mut buf = [0u8; 1];
            let n = tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf))
                .await
                .expect("closed promptly")
                .unwrap_or(0);
            assert_eq!(n, 0, "the connection is still open");
        }
        // New connections are served.
        let mut c = TcpStream::connect(p.addr()).await.unwrap();
        assert_eq!(roundtrip(&mut c, b"c").await, b"c");
    }
}
