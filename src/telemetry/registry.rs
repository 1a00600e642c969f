//! One server instance's metrics: its own Prometheus recorder behind the `metrics` facade.
//!
//! Each instance owns a recorder (not the global one) so two servers in one process — the
//! tests, `seckill demo` — never mix their counts. Everything on the claim path is a handle
//! registered up front: the claim-latency histograms per outcome, the guard counters, and one
//! [`CampaignSeries`] per campaign, attached to the campaign's stock-board entry the first
//! time it is claimed. **Label cardinality is bounded**: only campaigns on the stock board
//! (created by an admin) get a `campaign` label, at most [`MAX_CAMPAIGN_LABELS`] of them;
//! unknown ids and campaigns beyond the cap share `campaign="other"`; no user id or IP is
//! ever a label. A flood of made-up ids therefore adds no series and no memory.

use std::collections::HashMap;
use std::sync::Arc;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusHandle, PrometheusRecorder};
use parking_lot::Mutex;

use super::catalog::{self, Kind};
use super::claims::{self, CampaignSeries, ClaimEnd};

/// Most campaigns with a `campaign` label of their own, per instance.
pub const MAX_CAMPAIGN_LABELS: usize = 1000;

/// The label value shared by unknown campaign ids and campaigns beyond the cap.
pub const OTHER: &str = "other";

const META: Metadata<'static> = Metadata::new("seckill", Level::INFO, None);

/// An instance's recorder and its pre-registered handles.
pub struct Registry {
    recorder: PrometheusRecorder,
    handle: Arc<PrometheusHandle>,
    /// `seckill_http_request_duration_seconds{route="claim", outcome}`, by outcome index.
    claim_latency: [Histogram; claims::N],
    pub engine_claims: Counter,
    pub rate_limited_user: Counter,
    pub rate_limited_ip: Counter,
    pub rate_limited_capacity: Counter,
    pub shed: Counter,
    pub rate_keys_evicted: Counter,
    pub share_refused_requests: Counter,
    pub share_refused_connections: Counter,
    pub timeouts: Counter,
    pub identity_refused: Counter,
    pub in_flight: Gauge,
    labels_overflow: Gauge,
    campaigns: Mutex<HashMap<String, Arc<CampaignSeries>>>,
    other: Arc<CampaignSeries>,
    cap: usize,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::with_cap(MAX_CAMPAIGN_LABELS)
    }

    /// A registry giving at most `cap` campaigns a label of their own.
    pub fn with_cap(cap: usize) -> Self {
        let recorder = super::builder().build_recorder();
        let handle = Arc::new(recorder.handle());
        super::keep_up(&handle);
        for fam in catalog::FAMILIES {
            let (name, help) = (fam.name.into(), fam.help.into());
            match fam.kind {
                Kind::Counter => recorder.describe_counter(name, None, help),
                Kind::Gauge => recorder.describe_gauge(name, None, help),
                Kind::Histogram => recorder.describe_histogram(name, None, help),
            }
        }
        let counter =
            |name: &'static str| recorder.register_counter(&Key::from_static_name(name), &META);
        let subject = |who: &'static str| {
            let labels = vec![Label::from_static_parts("subject", who)];
            recorder.register_counter(&Key::from_parts(catalog::RATE_LIMITED, labels), &META)
        };
        let share = |limit: &'static str| {
            let labels = vec![Label::from_static_parts("limit", limit)];
            recorder.register_counter(&Key::from_parts(catalog::SHARE_REFUSED, labels), &META)
        };
        let claim_latency = std::array::from_fn(|i| {
            let labels = vec![
                Label::from_static_parts("route", "claim"),
                Label::from_static_parts("outcome", claims::label(i)),
            ];
            recorder.register_histogram(&Key::from_parts(catalog::HTTP_DURATION, labels), &META)
        });
        let other = Arc::new(series(&recorder, OTHER.to_owned()));
        Self {
            claim_latency,
            engine_claims: counter(catalog::ENGINE_CLAIMS),
            rate_limited_user: subject("user"),
            rate_limited_ip: subject("ip"),
            rate_limited_capacity: subject("capacity"),
            shed: counter(catalog::SHED),
            rate_keys_evicted: counter(catalog::RATE_KEYS_EVICTED),
            share_refused_requests: share("in_flight"),
            share_refused_connections: share("connections"),
            timeouts: counter(catalog::TIMEOUTS),
            identity_refused: counter(catalog::IDENTITY_REFUSED),
            in_flight: recorder.register_gauge(&Key::from_static_name(catalog::IN_FLIGHT), &META),
            labels_overflow: recorder.register_gauge(
                &Key::from_static_name(catalog::CAMPAIGN_LABELS_OVERFLOW),
                &META,
            ),
            campaigns: Mutex::new(HashMap::new()),
            other,
            cap,
            recorder,
            handle,
        }
    }

    /// Records one claim's answer time.
    pub fn claim_answered(&self, end: ClaimEnd, seconds: f64) {
        self.claim_latency[end.index()].record(seconds);
    }

    /// The series of campaign `id` (a campaign on the stock board): its own label while fewer
    /// than [`MAX_CAMPAIGN_LABELS`] campaigns have one, else `other`. Called once per campaign
    /// and instance (the result is kept on the board entry).
    pub fn campaign(&self, id: &str) -> Arc<CampaignSeries> {
        let mut map = self.campaigns.lock();
        if let Some(s) = map.get(id) {
            return s.clone();
        }
        if map.len() >= self.cap {
            return self.other.clone();
        }
        let s = Arc::new(series(&self.recorder, id.to_owned()));
        map.insert(id.to_owned(), s.clone());
        s
    }

    /// The series of claims whose campaign is not on the board (unknown ids).
    pub fn other(&self) -> &Arc<CampaignSeries> {
        &self.other
    }

    /// Whether `series` is the shared `other` series.
    pub fn is_other(&self, series: &Arc<CampaignSeries>) -> bool {
        Arc::ptr_eq(series, &self.other)
    }

    /// Sets how many campaigns on the board have no label of their own.
    pub fn set_overflow(&self, campaigns: usize) {
        self.labels_overflow.set(campaigns as f64);
    }

    /// A gauge or counter keyed by campaign, set at scrape time (not on the claim path).
    pub fn campaign_gauge(&self, name: &'static str, id: &str) -> Gauge {
        self.recorder.register_gauge(&campaign_key(name, id), &META)
    }

    pub fn campaign_counter(&self, name: &'static str, id: &str) -> Counter {
        self.recorder
            .register_counter(&campaign_key(name, id), &META)
    }

    /// A series set at scrape time with arbitrary (bounded) labels.
    pub fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &META)
    }

    /// A counter set at scrape time from a count kept elsewhere (`absolute`).
    pub fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &META)
    }

    /// A request-latency histogram of a route other than claims (the middleware's; the set of
    /// route templates and status classes is finite).
    pub fn route_latency(&self, route: String, class: &'static str) -> Histogram {
        let labels = vec![
            Label::new("route", route),
            Label::from_static_parts("outcome", class),
        ];
        self.recorder
            .register_histogram(&Key::from_parts(catalog::HTTP_DURATION, labels), &META)
    }

    /// This instance's exposition.
    pub fn render(&self) -> String {
        self.handle.run_upkeep();
        self.handle.render()
    }
}

fn campaign_key(name: &'static str, id: &str) -> Key {
    Key::from_parts(name, vec![Label::new("campaign", id.to_owned())])
}

fn series(recorder: &PrometheusRecorder, campaign: String) -> CampaignSeries {
    CampaignSeries {
        by_outcome: std::array::from_fn(|i| {
            let labels = vec![
                Label::new("campaign", campaign.clone()),
                Label::from_static_parts("outcome", claims::label(i)),
            ];
            recorder.register_counter(&Key::from_parts(catalog::CLAIMS, labels), &META)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaigns_beyond_the_cap_share_other() {
        let r = Registry::with_cap(3);
        let end = ClaimEnd::outcome(crate::domain::Outcome::Won);
        for i in 0..50 {
            r.campaign(&format!("c{i}")).count(end);
        }
        r.campaign("c0").count(end);
        let text = r.render();
        let series = text
            .lines()
            .filter(|l| l.starts_with(catalog::CLAIMS) && l.contains("outcome=\"won\""))
            .count();
        assert_eq!(series, 4, "three campaigns and other:\n{text}");
        let won = |c: &str| {
            let s = format!("{}{{campaign=\"{c}\",outcome=\"won\"}}", catalog::CLAIMS);
            super::super::exposition::sample(&text, &s)
        };
        assert_eq!(won("c0"), Some(2.0));
        assert_eq!(won("other"), Some(47.0));
        assert_eq!(won("c40"), None);
    }
}
