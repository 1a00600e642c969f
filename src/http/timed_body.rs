//! A request body that must arrive in full within a deadline.
//!
//! Without it a client could announce a large body (an admin restock of 256 MiB) and send one
//! byte a minute, holding the connection and a handler forever. The deadline runs from the
//! moment the request head is complete; when it passes, reading fails with [`BodyTimedOut`],
//! which the JSON extractors turn into 408 `request_timeout` (see `super::extract`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::Sleep;

/// The body did not arrive within the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimedOut(pub Duration);

pub struct TimedBody {
    inner: Incoming,
    /// When the body must be complete.
    due: tokio::time::Instant,
    /// The timer, armed only the first time the body is not already there: a claim's small
    /// body usually arrives with its head, and then no timer is ever created.
    deadline: Option<Pin<Box<Sleep>>>,
    limit: Duration,
}

impl TimedBody {
    pub fn new(inner: Incoming, limit: Duration) -> Self {
        Self {
            inner,
            due: tokio::time::Instant::now() + limit,
            deadline: None,
            limit,
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let due = self.due;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(due)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimedOut(self.limit).into()))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Whether `e` (or an error it wraps) is a [`BodyTimedOut`].
pub fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut err = Some(e);
    while let Some(e) = err {
        if e.is::<BodyTimedOut>() {
            return true;
        }
        err = e.source();
    }
    false
}
