//! The `serve` flags of the guards (each with its `SECKILL_*` environment variable).
//!
//! Everything is off or generous by default, so `seckill serve` with no flags behaves like a
//! plain service; the README lists recommended settings for a real sale.

use std::time::Duration;

use clap::Args;

use super::client_ip::TrustedProxy;
use super::secret::Secret;
use super::GuardSettings;
use crate::domain::Rate;

#[derive(Debug, Clone, Args)]
pub struct GuardArgs {
    /// Claims per user id across all campaigns, e.g. 5/s or 20/m;burst=5 (off if unset).
    #[arg(long, env = "SECKILL_RATE_PER_USER")]
    pub rate_per_user: Option<Rate>,

    /// Claims per client IP across all campaigns, e.g. 50/s (off if unset).
    #[arg(long, env = "SECKILL_RATE_PER_IP")]
    pub rate_per_ip: Option<Rate>,

    /// Most rate-limit buckets kept in memory; beyond it the least recently charged are forgotten.
    #[arg(long, env = "SECKILL_RATE_MAX_KEYS", default_value_t = 1_000_000)]
    pub rate_max_keys: usize,

    /// Admission gate: at most K × remaining claims of a campaign in the engine at once
    /// (0 = off; 2 to 4 recommended for a sale).
    #[arg(long, env = "SECKILL_ADMISSION_K", default_value_t = 0)]
    pub admission_k: u64,

    /// Most public requests (claims, campaign views) in flight; beyond it 503 at once.
    #[arg(long, env = "SECKILL_MAX_IN_FLIGHT", default_value_t = 4096)]
    pub max_in_flight: usize,

    /// Most public requests in flight from one client address (IPv6: one /64); beyond it 503
    /// at once (0 = no limit). Loopback peers are exempt: put --trusted-proxy behind a proxy.
    #[arg(long, env = "SECKILL_MAX_IN_FLIGHT_PER_IP", default_value_t = 256)]
    pub max_in_flight_per_ip: u32,

    /// Most open public connections from one client address (IPv6: one /64); beyond it a new
    /// connection is closed at once (0 = no limit). Loopback peers are exempt.
    #[arg(long, env = "SECKILL_MAX_CONNECTIONS_PER_IP", default_value_t = 256)]
    pub max_connections_per_ip: u32,

    /// Hold loopback peers to the per-address limits too (for tests of the limits).
    #[arg(long, hide = true)]
    pub share_loopback: bool,

    /// Milliseconds a claim's body (at most 16 KiB) has to arrive after its head; then 408.
    /// A claim takes no in-flight place until its body is there.
    #[arg(long, env = "SECKILL_CLAIM_BODY_TIMEOUT_MS", default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub claim_body_timeout_ms: u64,

    /// Request timeout of public routes, in milliseconds (503 `overloaded` when it fires).
    #[arg(long, env = "SECKILL_REQUEST_TIMEOUT_MS", default_value_t = 10_000)]
    pub request_timeout_ms: u64,

    /// Proxies (IPs or CIDRs, comma-separated) whose client-IP header is believed.
    #[arg(long, env = "SECKILL_TRUSTED_PROXY", value_delimiter = ',')]
    pub trusted_proxy: Vec<TrustedProxy>,

    /// Header a trusted proxy puts the client IP in.
    #[arg(
        long,
        env = "SECKILL_CLIENT_IP_HEADER",
        default_value = "x-forwarded-for"
    )]
    pub client_ip_header: String,

    /// HMAC-SHA256 key of signed user identities (X-Seckill-User). When set, every claim
    /// needs a valid token for its user_id; when unset, user_id is trusted.
    #[arg(long, env = "SECKILL_USER_SIGNING_KEY", hide_env_values = true)]
    pub user_signing_key: Option<Secret>,
}

impl Default for GuardArgs {
    fn default() -> Self {
        let d = GuardSettings::default();
        Self {
            rate_per_user: d.per_user,
            rate_per_ip: d.per_ip,
            rate_max_keys: d.max_rate_keys,
            admission_k: d.admission_k,
            max_in_flight: d.max_in_flight,
            request_timeout_ms: d.request_timeout.as_millis() as u64,
            max_in_flight_per_ip: d.max_in_flight_per_ip,
            max_connections_per_ip: d.max_connections_per_ip,
            share_loopback: d.share_loopback,
            claim_body_timeout_ms: d.claim_body_timeout.as_millis() as u64,
            trusted_proxy: d.trusted_proxies,
            client_ip_header: d.client_ip_header,
            user_signing_key: d.user_signing_key,
        }
    }
}

impl GuardArgs {
    pub fn settings(&self) -> GuardSettings {
        GuardSettings {
            per_user: self.rate_per_user,
            per_ip: self.rate_per_ip,
            max_rate_keys: self.rate_max_keys,
            admission_k: self.admission_k,
            max_in_flight: self.max_in_flight,
            request_timeout: Duration::from_millis(self.request_timeout_ms.max(1)),
            max_in_flight_per_ip: self.max_in_flight_per_ip,
            max_connections_per_ip: self.max_connections_per_ip,
            share_loopback: self.share_loopback,
            claim_body_timeout: Duration::from_millis(self.claim_body_timeout_ms.max(1)),
            trusted_proxies: self.trusted_proxy.clone(),
            client_ip_header: self.client_ip_header.clone(),
            user_signing_key: self.user_signing_key.clone(),
        }
    }
}
