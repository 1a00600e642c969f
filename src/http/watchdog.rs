//! The clock of one connection: how long it may sit without a request in progress.
//!
//! A connection is in one of three phases. `Idle`: just accepted, or every response was
//! sent, and no byte of a next request has come; it gets the idle keep-alive timeout. `Head`:
//! the first byte of a request arrived and its head is not complete yet; it gets the head
//! timeout. `Busy`: a request is being served; no connection deadline (the body timeout and
//! the routes' own timeouts apply). [`watch`] resolves when the deadline of the current phase
//! passes, and the connection is then dropped (the socket closes): nothing is in flight on it
//! at that moment, so nothing is lost.
//!
//! The head clock starts at the first byte, not at accept: a client on a busy machine may
//! connect well before it gets to write, and is then no different from an idle keep-alive
//! connection (a silent connection still goes after the idle timeout, or sooner when the
//! connection cap needs room). hyper's own `header_read_timeout` is not used: it also runs
//! while a keep-alive connection waits for its next request, so idle and head timeouts could
//! not be set apart.
//!
//! A keep-alive connection in a claim storm changes phase three times per request, so the
//! clock must not cost a timer per request. The watcher keeps one timer armed at a deadline
//! that is never later than the real one; a phase change wakes it only when it moves the real
//! deadline *earlier* than the armed one (an eviction, a head after a long idle). Otherwise the
//! timer fires at the armed time, finds the real deadline later, and re-arms once: at most one
//! timer operation per timeout period and connection, whatever the request rate.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
enum Phase {
    Head(Instant),
    Busy(usize),
    Idle(Instant),
    Evicted,
}

/// Why a connection was closed by its clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    Head,
    Idle,
    /// Closed to make room for a new connection at the connection cap.
    Evicted,
}

struct State {
    phase: Phase,
    /// When the watcher's timer fires; `None` while it waits without one (a busy connection).
    armed: Option<Instant>,
}

pub struct Clock {
    state: Mutex<State>,
    changed: Notify,
    head: Duration,
    idle: Duration,
}

impl Clock {
    /// A clock for a connection accepted now: idle until its first byte.
    pub fn new(head: Duration, idle: Duration) -> Arc<Self> {
        Arc::new(Self {
            state: Mutex::new(State {
                phase: Phase::Idle(Instant::now()),
                armed: None,
            }),
            changed: Notify::new(),
            head,
            idle,
        })
    }

    /// Enters `phase`; wakes the watcher only if the deadline moved before its armed timer.
    fn set(&self, st: &mut State, phase: Phase) -> bool {
        st.phase = phase;
        match (self.deadline_of(phase), st.armed) {
            (Some((at, _)), Some(armed)) if at >= armed => false,
            (None, _) => false,
            _ => true,
        }
    }

    /// Bytes arrived: on an idle connection they start the next request's head.
    fn saw_bytes(&self) {
        let mut st = self.state.lock();
        if let Phase::Idle(_) = st.phase {
            let wake = self.set(&mut st, Phase::Head(Instant::now()));
            drop(st);
            if wake {
                self.changed.notify_one();
            }
        }
    }

    /// A request head is complete; the returned guard ends the request when dropped (hyper
    /// drops the response body once it is written, or the connection with it).
    pub fn begin(self: &Arc<Self>) -> InFlight {
        let mut st = self.state.lock();
        let phase = match st.phase {
            Phase::Busy(n) => Phase::Busy(n + 1),
            Phase::Evicted => Phase::Evicted,
            _ => Phase::Busy(1),
        };
        st.phase = phase; // no deadline while busy: the armed timer, if any, finds that out
        InFlight(self.clone())
    }

    fn end(&self) {
        let mut st = self.state.lock();
        let wake = match st.phase {
            Phase::Busy(n) if n > 1 => self.set(&mut st, Phase::Busy(n - 1)),
            Phase::Busy(_) => self.set(&mut st, Phase::Idle(Instant::now())),
            _ => false,
        };
        drop(st);
        if wake {
            self.changed.notify_one();
        }
    }

    /// Closes the connection if no request has been in progress on it for `min_wait`; false
    /// if one is, or the connection is younger than that.
    pub fn evict(&self, min_wait: Duration) -> bool {
        let mut st = self.state.lock();
        match st.phase {
            Phase::Head(since) | Phase::Idle(since) if since.elapsed() >= min_wait => {}
            _ => return false,
        }
        st.phase = Phase::Evicted;
        drop(st);
        self.changed.notify_one();
        true
    }

    fn deadline_of(&self, phase: Phase) -> Option<(Instant, Expired)> {
        match phase {
            Phase::Evicted => Some((Instant::now(), Expired::Evicted)),
            Phase::Head(since) => Some((since + self.head, Expired::Head)),
            Phase::Idle(since) => Some((since + self.idle, Expired::Idle)),
            Phase::Busy(_) => None,
        }
    }

    /// The current deadline, recorded as the one the watcher arms.
    fn arm(&self) -> Option<(Instant, Expired)> {
        let mut st = self.state.lock();
        let d = self.deadline_of(st.phase);
        st.armed = d.map(|(at, _)| at);
        d
    }
}

/// Resolves when the connection's current phase outlives its timeout.
pub async fn watch(clock: Arc<Clock>) -> Expired {
    let timer = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(timer);
    loop {
        let changed = clock.changed.notified();
        match clock.arm() {
            None => changed.await,
            Some((at, why)) => {
                if at <= Instant::now() {
                    return why;
                }
                timer.as_mut().reset(at);
                tokio::select! {
                    _ = timer.as_mut() => {}
                    _ = changed => {}
                }
            }
        }
    }
}

/// One request in progress on a connection.
pub struct InFlight(Arc<Clock>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// A socket that tells its clock when bytes arrive.
pub struct Watched<S> {
    inner: S,
    clock: Arc<Clock>,
}

impl<S> Watched<S> {
    pub fn new(inner: S, clock: Arc<Clock>) -> Self {
        Self { inner, clock }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.saw_bytes();
        }
        res
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The request counts as in progress until hyper has written (and dropped) the body.
pub(super) fn ends_with(
    resp: axum::response::Response,
    in_flight: InFlight,
) -> axum::response::Response {
    resp.map(|b| axum::body::Body::new(EndsWith(b, in_flight)))
}

/// A response body that holds its request's [`InFlight`] until dropped.
struct EndsWith(axum::body::Body, #[allow(dead_code)] InFlight);

impl hyper::body::Body for EndsWith {
    type Data = bytes::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, axum::Error>>> {
        std::pin::Pin::new(&mut self.0).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.0.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn idle_then_head_then_busy_then_idle() {
        let clock = Clock::new(Duration::from_secs(2), Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(watch(clock.clone()).await, Expired::Idle);
        assert_eq!(t0.elapsed(), Duration::from_secs(5));

        let clock = Clock::new(Duration::from_secs(2), Duration::from_secs(5));
        clock.saw_bytes();
        let t0 = Instant::now();
        assert_eq!(watch(clock.clone()).await, Expired::Head);
        assert_eq!(t0.elapsed(), Duration::from_secs(2));

        let clock = Clock::new(Duration::from_secs(2), Duration::from_secs(5));
        let req = clock.begin();
        let w = tokio::spawn(watch(clock.clone()));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!w.is_finished(), "a busy connection has no deadline");
        let t1 = Instant::now();
        drop(req);
        assert_eq!(w.await.unwrap(), Expired::Idle);
        assert_eq!(t1.elapsed(), Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn a_storm_of_requests_never_trips_the_lazily_armed_timer() {
        let clock = Clock::new(Duration::from_secs(2), Duration::from_secs(5));
        let w = tokio::spawn(watch(clock.clone()));
        // 20 s of back-to-back requests, each 1 ms: ten head periods, four idle periods.
        for _ in 0..10_000 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            clock.saw_bytes();
            let req = clock.begin();
            tokio::time::sleep(Duration::from_millis(1)).await;
            drop(req);
            assert!(!w.is_finished(), "expired while requests kept coming");
        }
        let t1 = Instant::now();
        assert_eq!(w.await.unwrap(), Expired::Idle);
        assert_eq!(
            t1.elapsed(),
            Duration::from_secs(5),
            "idle counted from the last answer"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_byte_on_an_idle_connection_starts_the_head_clock() {
        let clock = Clock::new(Duration::from_secs(2), Duration::from_secs(60));
        drop(clock.begin());
        let w = tokio::spawn(watch(clock.clone()));
        tokio::time::sleep(Duration::from_secs(10)).await;
        let t1 = Instant::now();
        clock.saw_bytes();
        assert_eq!(w.await.unwrap(), Expired::Head);
        assert_eq!(t1.elapsed(), Duration::from_secs(2));
    }
}
