//! A request for one connection of the link, not whichever it has now: a write that must land
//! on the server a `WAIT` just covered (the waiting room's marks, `src/room/redis.rs`) is
//! refused, unsent, once the link has moved on to another server.

use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::{moved_on, Link};

/// The link's connection of one generation, as a [`ConnectionLike`] (for scripts, which reload
/// themselves on `NOSCRIPT`): every request refused once the link moved on.
pub struct Pinned<'a> {
    pub link: &'a Link,
    pub generation: u64,
}

impl ConnectionLike for Pinned<'_> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.link.request_on(self.generation, cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        _: &'a Pipeline,
        _: usize,
        _: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async { Err(moved_on()) })
    }

    fn get_db(&self) -> i64 {
        self.link.db()
    }
}
