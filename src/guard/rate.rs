//! Rate limiting of claims: what is limited, and the trait each deployment implements.
//!
//! A claim is charged against up to four buckets: its user and its client IP, each globally
//! (the `serve` flags) and per campaign (`PUT /v1/campaigns/{id}/limits`). The IP buckets are
//! charged before the body is read, the user buckets once the user is known (and, with signed
//! identity, proven). Every bucket is a GCRA: one timestamp per key, no window edges, so
//! the fixed-window `INCR`+`EXPIRE` double burst cannot happen and there is no second command
//! whose loss leaves a key without expiry.
//!
//! [`RateLimiter`] is where deployments differ: the embedded one keeps the buckets in process
//! ([`super::gcra::LocalLimiter`]); the scale-out one must enforce the same arithmetic for all
//! instances in one Redis round trip (a single script that takes every bucket of a request or
//! none, with the server's `TIME` as the clock and `PEXPIRE` of each key set to its TAT).

use std::net::IpAddr;
use std::time::Duration;

use async_trait::async_trait;

use crate::domain::Rate;

/// Whose bucket is charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Subject<'a> {
    User(&'a str),
    Ip(IpAddr),
}

impl Subject<'_> {
    /// `user` or `ip`, for headers and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Subject::User(_) => "user",
            Subject::Ip(_) => "ip",
        }
    }
}

/// One bucket to charge: a subject, globally (`campaign: None`) or within one campaign.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    pub campaign: Option<&'a str>,
    pub subject: Subject<'a>,
    pub rate: Rate,
}

impl Check<'_> {
    /// The name of the limit, as shown in `RateLimit-Policy` and the metrics.
    pub fn label(&self) -> &'static str {
        match (self.campaign.is_some(), self.subject) {
            (true, Subject::User(_)) => "campaign_per_user",
            (true, Subject::Ip(_)) => "campaign_per_ip",
            (false, Subject::User(_)) => "global_per_user",
            (false, Subject::Ip(_)) => "global_per_ip",
        }
    }
}

/// A refused request: which limit, and when to come back.
#[derive(Debug, Clone, PartialEq)]
pub struct Limited {
    /// `campaign_per_user`, `global_per_ip`, … or `capacity` when the limiter's key table is
    /// full (see [`super::gcra`]).
    pub label: &'static str,
    pub rate: Option<Rate>,
    /// Earliest time the same request could pass.
    pub retry_after: Duration,
    /// Time until the bucket is full again.
    pub reset: Duration,
}

impl Limited {
    /// Whole seconds for `Retry-After` (at least 1: HTTP has no smaller unit).
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after)
    }

    pub fn reset_secs(&self) -> u64 {
        ceil_secs(self.reset)
    }
}

fn ceil_secs(d: Duration) -> u64 {
    (d.as_nanos().div_ceil(1_000_000_000) as u64).max(1)
}

#[async_trait]
pub trait RateLimiter: Send + Sync + 'static {
    /// Charges one request to every bucket in `checks`, all or nothing: when one refuses,
    /// none stays charged and the refusal names the limit that refused.
    async fn acquire(&self, checks: &[Check<'_>]) -> Result<(), Limited>;

    /// Live buckets forgotten because the table was full (a limiter whose keys expire on
    /// their own, like Redis's, forgets none).
    fn evicted(&self) -> u64 {
        0
    }
}
