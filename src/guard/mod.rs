//! Guards: everything that turns a claim away cheaply, fairly and safely before the engine.
//!
//! A flash sale sends 100× more claims than it has units; most can never win. A claim passes,
//! in this order (cheapest and least trusting first):
//!
//! 0. **the body first** — a claim's body is read under its own short deadline before it
//!    takes any place, and one client address holds a bounded share of the places and of the
//!    connections ([`share`]): requests that have not arrived cannot crowd out those that have;
//! 1. **shedding** ([`shed`]) — global bound on public requests in flight + request timeout;
//! 2. **per-IP limits** ([`rate`], [`gcra`], [`client_ip`]) — before the body is decoded;
//! 3. body validation, then **signed identity** ([`identity`]) when a key is configured;
//! 4. **per-user limits** — only after the user is known (and proven, with identity on);
//! 5. **sold-out fast path** ([`soldout`]) — `sold_out` from memory once nothing is left;
//! 6. **admission gate** ([`admission`]) — at most k × remaining claims inside the engine.
//!
//! Only then does the engine see the claim. Every piece here is deployment-agnostic; the two
//! places where a scale-out deployment plugs in its own shared state are the
//! [`rate::RateLimiter`] trait and the writers of the [`soldout::StockBoard`].

pub mod admission;
pub mod args;
pub mod client_ip;
pub mod gcra;
pub mod identity;
pub mod metrics;
pub mod rate;
pub mod secret;
pub mod share;
pub mod shed;
pub mod soldout;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::domain::{CampaignLimits, Rate};
use admission::Admitted;
use client_ip::{ClientIpPolicy, TrustedProxy};
use identity::Identity;
use metrics::GuardMetrics;
use rate::{Check, Limited, RateLimiter, Subject};
use secret::Secret;
use share::Share;
use shed::Shedder;
use soldout::{StockBoard, StockEntry};

/// Guard settings of one instance (from the `serve` flags).
#[derive(Debug, Clone)]
pub struct GuardSettings {
    /// Claims per user id across all campaigns.
    pub per_user: Option<Rate>,
    /// Claims per client IP across all campaigns.
    pub per_ip: Option<Rate>,
    /// Most live rate-limit buckets kept in memory.
    pub max_rate_keys: usize,
    /// Admission gate factor; 0 turns the gate off.
    pub admission_k: u64,
    /// Most public requests in flight.
    pub max_in_flight: usize,
    pub request_timeout: Duration,
    /// Most public requests in flight per client address (IPv6: per /64); 0 = no limit.
    pub max_in_flight_per_ip: u32,
    /// Most open public connections per client address (IPv6: per /64); 0 = no limit.
    pub max_connections_per_ip: u32,
    /// Hold loopback peers to the per-address shares too (they are exempt by default).
    pub share_loopback: bool,
    /// How long a claim's body may take to arrive; it takes no place before it has.
    pub claim_body_timeout: Duration,
    pub trusted_proxies: Vec<TrustedProxy>,
    pub client_ip_header: String,
    /// HMAC key of signed user identities; `None` trusts `user_id`.
    pub user_signing_key: Option<Secret>,
}

impl Default for GuardSettings {
    fn default() -> Self {
        Self {
            per_user: None,
            per_ip: None,
            max_rate_keys: 1_000_000,
            admission_k: 0,
            max_in_flight: 4096,
            request_timeout: Duration::from_secs(10),
            max_in_flight_per_ip: 256,
            max_connections_per_ip: 256,
            share_loopback: false,
            claim_body_timeout: Duration::from_secs(2),
            trusted_proxies: Vec::new(),
            client_ip_header: "x-forwarded-for".into(),
            user_signing_key: None,
        }
    }
}

/// The admission gate refused a claim (503 `overloaded`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// The guards of one instance, shared by every request.
pub struct Guards {
    settings: GuardSettings,
    limiter: Arc<dyn RateLimiter>,
    campaign_limits: RwLock<HashMap<String, CampaignLimits>>,
    pub board: Arc<StockBoard>,
    pub identity: Option<Identity>,
    pub client_ip: ClientIpPolicy,
    pub shed: Shedder,
    /// Each client's share of the in-flight places.
    pub in_flight_share: Arc<Share>,
    /// Each client's share of the public listener's connections.
    pub connection_share: Arc<Share>,
    /// Places for claim bodies still arriving (as many as `--max-in-flight`).
    pub arriving: Arc<tokio::sync::Semaphore>,
    pub metrics: GuardMetrics,
}

impl Guards {
    /// Guards with the in-process rate limiter. `board` is the backend's stock board (an empty
    /// one when the backend publishes none: then no fast path and no admission gate).
    /// Must run inside a Tokio runtime (the limiter sweeps its table in the background).
    pub fn new(settings: GuardSettings, board: Arc<StockBoard>) -> anyhow::Result<Arc<Self>> {
        let limiter = gcra::LocalLimiter::new(settings.max_rate_keys);
        limiter.spawn_sweeper();
        Self::with_limiter(settings, board, limiter)
    }

    /// Guards over another [`RateLimiter`] (the scale-out deployment's shared one).
    pub fn with_limiter(
        settings: GuardSettings,
        board: Arc<StockBoard>,
        limiter: Arc<dyn RateLimiter>,
    ) -> anyhow::Result<Arc<Self>> {
        let identity = match &settings.user_signing_key {
            Some(key) => Some(Identity::new(key.clone()).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let client_ip = ClientIpPolicy::new(&settings.trusted_proxies, &settings.client_ip_header)
            .map_err(anyhow::Error::msg)?;
        let shed = Shedder::new(settings.max_in_flight, settings.request_timeout);
        let proxies: Vec<_> = settings.trusted_proxies.iter().map(|t| t.0).collect();
        let in_flight_share = Share::new(
            settings.max_in_flight_per_ip,
            settings.share_loopback,
            proxies.clone(),
        );
        let connection_share = Share::new(
            settings.max_connections_per_ip,
            settings.share_loopback,
            proxies,
        );
        // Claims whose bodies did not come with their heads, read at once: a bound on the
        // memory slow bodies hold (16 KiB each) that genuine claims never meet.
        let arriving = Arc::new(tokio::sync::Semaphore::new(settings.max_in_flight.max(1)));
        Ok(Arc::new(Self {
            settings,
            limiter,
            campaign_limits: RwLock::new(HashMap::new()),
            board,
            identity,
            client_ip,
            shed,
            in_flight_share,
            connection_share,
            arriving,
            metrics: GuardMetrics::default(),
        }))
    }

    pub fn settings(&self) -> &GuardSettings {
        &self.settings
    }

    /// Installs a campaign's limits (admin change or startup load).
    pub fn set_campaign_limits(&self, campaign: &str, limits: CampaignLimits) {
        let mut map = self.campaign_limits.write();
        if limits.is_empty() {
            map.remove(campaign);
        } else {
            map.insert(campaign.to_owned(), limits);
        }
    }

    /// Replaces every campaign's limits with `all` (a periodic re-read of the shared store).
    pub fn replace_campaign_limits(&self, all: Vec<(String, CampaignLimits)>) {
        let fresh: HashMap<String, CampaignLimits> =
            all.into_iter().filter(|(_, l)| !l.is_empty()).collect();
        let mut map = self.campaign_limits.write();
        if *map != fresh {
            *map = fresh;
        }
    }

    pub fn campaign_limits(&self, campaign: &str) -> CampaignLimits {
        self.campaign_limits
            .read()
            .get(campaign)
            .copied()
            .unwrap_or_default()
    }

    async fn charge(
        &self,
        campaign: &str,
        subject: Subject<'_>,
        global: Option<Rate>,
        local: Option<Rate>,
    ) -> Result<(), Limited> {
        if local.is_none() && global.is_none() {
            return Ok(()); // the common case: no allocation, no limiter call
        }
        let mut checks: Vec<Check<'_>> = Vec::with_capacity(2);
        if let Some(rate) = local {
            checks.push(Check {
                campaign: Some(campaign),
                subject,
                rate,
            });
        }
        if let Some(rate) = global {
            checks.push(Check {
                campaign: None,
                subject,
                rate,
            });
        }
        let result = self.limiter.acquire(&checks).await;
        if let Err(limited) = &result {
            self.metrics.rate_limited(limited.label);
        }
        result
    }

    /// Charges the client IP's buckets (global and this campaign's).
    pub async fn limit_ip(&self, campaign: &str, ip: IpAddr) -> Result<(), Limited> {
        let local = self.campaign_limits(campaign).per_ip;
        self.charge(campaign, Subject::Ip(ip), self.settings.per_ip, local)
            .await
    }

    /// Charges the user's buckets (global and this campaign's) — only for a campaign that may
    /// exist (`entry`: its board entry), so made-up campaign ids fill no table.
    pub async fn limit_user(
        &self,
        campaign: &str,
        entry: Option<&Arc<StockEntry>>,
        user: &str,
    ) -> Result<(), Limited> {
        let local = self.campaign_limits(campaign).per_user;
        let global = self.settings.per_user;
        if local.is_none() && (global.is_none() || !self.board.may_exist(campaign, entry)) {
            return Ok(());
        }
        self.charge(campaign, Subject::User(user), global, local)
            .await
    }

    /// True when the claim can be answered `sold_out` from memory (counted). `entry` is the
    /// campaign's entry on the board, if any.
    pub fn sold_out_fast(
        &self,
        entry: Option<&StockEntry>,
        user: &str,
        qty: u64,
        keyed: bool,
    ) -> bool {
        if keyed {
            return false;
        }
        let Some(entry) = entry else {
            return false;
        };
        let hit = entry.sold_out_for(user, qty, crate::domain::now());
        if hit {
            entry
                .counters
                .fast_sold_out
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        hit
    }

    /// Admission to the engine of a claim of the campaign whose board entry is `entry`:
    /// `Ok(place)` (hold it until the engine answers) or `Err(Refused)` to answer 503
    /// `overloaded`. Counts the engine call when admitted.
    pub fn admit(&self, entry: Option<&Arc<StockEntry>>) -> Result<Option<Admitted>, Refused> {
        use std::sync::atomic::Ordering::Relaxed;
        let place = match (entry, self.settings.admission_k) {
            (Some(e), k) if k > 0 => Some(admission::admit(e, k).ok_or(Refused)?),
            _ => None,
        };
        self.metrics.registry.engine_claims.increment(1);
        if let Some(e) = entry {
            e.counters.engine_claims.fetch_add(1, Relaxed);
        }
        Ok(place)
    }

    /// This instance's exposition followed by the process-wide series.
    pub fn render_metrics(&self) -> String {
        self.metrics.refresh(&self.board, self.shed.in_flight());
        self.metrics.shares_refused(
            self.in_flight_share.refused(),
            self.connection_share.refused(),
        );
        self.metrics.registry.render() + &crate::telemetry::process::render()
    }
}
