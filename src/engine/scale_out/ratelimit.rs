//! The scale-out rate limiter: the guards' GCRA buckets kept in Redis, so a limit holds for
//! the sum of all instances and not per instance.
//!
//! One request is one script call (`lua/ratelimit.lua`): every bucket of the request is
//! checked, then all are charged or none, on the Redis server's clock (`TIME`), and every key
//! is written with `PX` equal to its TAT, so no bucket key ever lives without a TTL and a key
//! that expired is exactly a full bucket (nothing is lost when Redis evicts or expires it).
//!
//! **Redis Cluster**: a script may only touch keys of one slot, so every limiter key carries
//! the hash tag `{rl}` and all buckets live in one slot (on one primary). Each key is a short
//! string with a TTL of at most one burst window, so the memory is small; the cost is that the
//! limiter's load is not spread across the cluster's primaries.
//!
//! When Redis cannot be reached the request is let through (fail open) and logged: the rate
//! limits protect the engine from abuse, the claim itself still goes through the gate, which
//! answers 503 on its own when Redis is down.

use std::time::Duration;

use async_trait::async_trait;
use redis::Script;

use crate::guard::rate::{Check, Limited, RateLimiter, Subject};
use crate::redis_conn::RedisConn;

pub struct RedisLimiter {
    conn: RedisConn,
    script: Script,
}

impl RedisLimiter {
    pub fn new(conn: RedisConn) -> Self {
        Self {
            conn,
            script: Script::new(include_str!("lua/ratelimit.lua")),
        }
    }

    /// Loads the script into Redis's script cache (it is reloaded on NOSCRIPT anyway).
    pub async fn load(&self) -> redis::RedisResult<()> {
        self.script
            .prepare_invoke()
            .load_async(&mut self.conn.clone())
            .await?;
        Ok(())
    }
}

/// The Redis key of one bucket: `{rl}:<scope>:<subject>`. The user id is length-prefixed and
/// the scope is `g` (global) or `c<len>:<campaign>`, so no two buckets share a key.
pub fn bucket_key(check: &Check<'_>) -> String {
    let scope = match check.campaign {
        Some(c) => format!("c{}:{c}", c.len()),
        None => "g".to_owned(),
    };
    match check.subject {
        Subject::User(u) => format!("{{rl}}:{scope}:u{}:{u}", u.len()),
        Subject::Ip(ip) => format!("{{rl}}:{scope}:ip:{ip}"),
    }
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

#[async_trait]
impl RateLimiter for RedisLimiter {
    async fn acquire(&self, checks: &[Check<'_>]) -> Result<(), Limited> {
        if checks.is_empty() {
            return Ok(());
        }
        let mut inv = self.script.prepare_invoke();
        for check in checks {
            let t = micros(check.rate.emission_interval());
            inv.key(bucket_key(check))
                .arg(t)
                .arg(t.saturating_mul(check.rate.burst));
        }
        let answer: Result<Vec<i64>, _> = inv.invoke_async(&mut self.conn.clone()).await;
        let answer = match answer {
            Ok(a) => a,
            Err(e) if crate::redis_conn::link::surely_not_executed(&e) => {
                // Redis is down: the link logged it once; the gate refuses the claim anyway.
                tracing::debug!(error = %e, "rate limiter unreachable; request let through");
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(error = %e, "rate limiter unreachable; request let through");
                return Ok(());
            }
        };
        match answer.as_slice() {
            [0] => Ok(()),
            [i, retry, reset] => {
                let check = checks
                    .get((*i as usize).saturating_sub(1))
                    .unwrap_or(&checks[0]);
                Err(Limited {
                    label: check.label(),
                    rate: Some(check.rate),
                    retry_after: Duration::from_micros((*retry).max(0) as u64),
                    reset: Duration::from_micros((*reset).max(0) as u64),
                })
            }
            other => {
                tracing::warn!(
                    ?other,
                    "unexpected rate limiter answer; request let through"
                );
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::Rate;

    #[test]
    fn keys_are_distinct_and_share_one_slot() {
        let rate: Rate = "5/s".parse().unwrap();
        let c = |campaign, subject| Check {
            campaign,
            subject,
            rate,
        };
        let keys = [
            bucket_key(&c(Some("sale"), Subject::User("a:b"))),
            bucket_key(&c(Some("sale:a"), Subject::User("b"))),
            bucket_key(&c(None, Subject::User("a:b"))),
            bucket_key(&c(Some("sale"), Subject::Ip("10.0.0.1".parse().unwrap()))),
        ];
        assert_eq!(keys[0], "{rl}:c4:sale:u3:a:b");
        for (i, k) in keys.iter().enumerate() {
            assert!(k.starts_with("{rl}:"));
            assert!(keys[i + 1..].iter().all(|o| o != k), "{k} twice");
        }
    }
}
