//! The lock scripts (`lua/*.lua`, each with a KEYS/ARGV header) and their keys.
//!
//! Both keys of a name carry the hash tag `{name}`, so on a Cluster they live in one slot and
//! one script sees holder and fence counter together. Names follow the campaign id rules
//! (`[A-Za-z0-9_-]`), so they cannot contain a brace.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script};

pub struct LockScripts {
    acquire: Script,
    extend: Script,
    release: Script,
    raise: Script,
}

impl Default for LockScripts {
    fn default() -> Self {
        Self {
            acquire: Script::new(include_str!("lua/acquire.lua")),
            extend: Script::new(include_str!("lua/extend.lua")),
            release: Script::new(include_str!("lua/release.lua")),
            raise: Script::new(include_str!("lua/raise.lua")),
        }
    }
}

fn holder(name: &str) -> String {
    format!("seckill:lock:{{{name}}}:holder")
}

fn fence(name: &str) -> String {
    format!("seckill:lock:{{{name}}}:fence")
}

/// What `acquire.lua` answered.
pub enum Acquired {
    Granted { fence: u64 },
    Held { pttl_ms: u64 },
}

impl LockScripts {
    pub async fn acquire<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: &str,
        ttl_ms: u64,
        owner: &str,
    ) -> RedisResult<Acquired> {
        let (granted, value, _): (i64, i64, i64) = self
            .acquire
            .key(holder(name))
            .key(fence(name))
            .arg(token)
            .arg(ttl_ms)
            .arg(owner)
            .invoke_async(conn)
            .await?;
        Ok(if granted == 1 {
            Acquired::Granted {
                fence: value as u64,
            }
        } else {
            Acquired::Held {
                pttl_ms: value.max(0) as u64,
            }
        })
    }

    /// The holder's fence when extended, `None` when `token` does not hold the lock.
    pub async fn extend<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: &str,
        ttl_ms: u64,
    ) -> RedisResult<Option<u64>> {
        let fence: i64 = self
            .extend
            .key(holder(name))
            .arg(token)
            .arg(ttl_ms)
            .invoke_async(conn)
            .await?;
        Ok((fence > 0).then_some(fence as u64))
    }

    pub async fn release<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: &str,
    ) -> RedisResult<bool> {
        let n: i64 = self
            .release
            .key(holder(name))
            .arg(token)
            .invoke_async(conn)
            .await?;
        Ok(n == 1)
    }

    /// Redlock's write-back: true when this node now holds the grant's fence.
    pub async fn raise<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        name: &str,
        token: &str,
        fence_value: u64,
    ) -> RedisResult<bool> {
        let n: i64 = self
            .raise
            .key(holder(name))
            .key(fence(name))
            .arg(token)
            .arg(fence_value)
            .invoke_async(conn)
            .await?;
        Ok(n == 1)
    }
}
