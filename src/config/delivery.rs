//! Settings of event delivery (`--webhook`, `--nats`): where the feed goes and how hard a
//! failing receiver is retried. Endpoints added through `/v1/webhooks` carry their own URL
//! and secret and share the retry settings.

use std::time::Duration;

use clap::Args;

use crate::guard::secret::Secret;

#[derive(Debug, Clone, Args)]
pub struct DeliveryArgs {
    /// Deliver every event to this URL as a signed Standard Webhooks POST (repeatable; the
    /// environment variable takes a comma-separated list). Needs --webhook-secret.
    #[arg(
        long = "webhook",
        env = "SECKILL_WEBHOOKS",
        value_delimiter = ',',
        value_name = "URL"
    )]
    pub webhooks: Vec<String>,

    /// The signing secret of the --webhook endpoints, `whsec_` + base64 of 24–64 random bytes
    /// (`openssl rand -base64 32`).
    #[arg(long, env = "SECKILL_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<Secret>,

    /// How long a refused event is retried (exponential backoff with jitter) before it and its
    /// order's later events are set aside as dead letters, which can be replayed
    /// (`POST /v1/webhooks/{id}/replay`); an endpoint refusing everything that long is disabled.
    #[arg(long, env = "SECKILL_WEBHOOK_MAX_AGE", default_value = "24h", value_parser = crate::duration::parse)]
    pub webhook_max_age: Duration,

    /// The longest wait between two attempts of one event.
    #[arg(long, env = "SECKILL_WEBHOOK_MAX_BACKOFF", default_value = "5m", value_parser = crate::duration::parse)]
    pub webhook_max_backoff: Duration,

    /// How long one attempt may take, answer included.
    #[arg(long, env = "SECKILL_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = crate::duration::parse)]
    pub webhook_timeout: Duration,

    /// Requests in flight per endpoint at most (events of one order are always sent one after
    /// the other, in the feed's order).
    #[arg(long, env = "SECKILL_WEBHOOK_CONCURRENCY", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub webhook_concurrency: u32,

    /// Publish every event to this NATS server's JetStream (`nats://host:4222`).
    #[arg(long, env = "SECKILL_NATS", value_name = "URL")]
    pub nats: Option<String>,

    /// Subject prefix of the NATS sink: an event goes to `PREFIX.<type>`, e.g.
    /// `seckill.order.won`.
    #[arg(long, env = "SECKILL_NATS_SUBJECT", default_value = "seckill")]
    pub nats_subject: String,

    /// The JetStream stream holding `PREFIX.>`, created if missing.
    #[arg(long, env = "SECKILL_NATS_STREAM", default_value = "SECKILL")]
    pub nats_stream: String,
}

impl Default for DeliveryArgs {
    fn default() -> Self {
        Self {
            webhooks: Vec::new(),
            webhook_secret: None,
            webhook_max_age: Duration::from_secs(24 * 3600),
            webhook_max_backoff: Duration::from_secs(300),
            webhook_timeout: Duration::from_secs(10),
            webhook_concurrency: 8,
            nats: None,
            nats_subject: "seckill".to_owned(),
            nats_stream: "SECKILL".to_owned(),
        }
    }
}
