//! A small typed client of the seckill HTTP API, used by `demo`, the bench and tests.

use std::time::Duration;

use anyhow::{bail, Context};
use reqwest::StatusCode;
use serde_json::Value;

use crate::domain::{CampaignView, ClaimAnswer, EventQuery, Order, OrderPage};

/// What a claim request came back with.
#[derive(Debug, Clone)]
pub enum ClaimReply {
    /// 200: the claim was processed.
    Processed(ClaimAnswer),
    /// 4xx/5xx: refused, with the error body.
    Refused(StatusCode, Value),
}

impl ClaimReply {
    /// A 503 that says the claim may have been processed (the ledger failed mid-commit):
    /// like a lost answer, its order may exist.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, ClaimReply::Refused(_, body) if body["error"]["outcome"] == "unknown")
    }
}

#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// How long a read after the storm may be refused: a deployment coming back from a fault
/// answers 503 (retry later) for a moment.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(30);

impl Client {
    pub fn new(base: &str, admin_token: &str) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(4096)
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(60))
            .build()
            .expect("the HTTP client has a valid static configuration");
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            token: admin_token.to_owned(),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The underlying HTTP client, for requests this type has no method for.
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// An admin request with the bearer token; returns status and JSON body.
    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        self.admin_keyed(method, path, body, None).await
    }

    /// [`Client::admin`] with an optional `Idempotency-Key`.
    pub async fn admin_keyed(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
        key: Option<&str>,
    ) -> anyhow::Result<(StatusCode, Value)> {
        let mut req = self
            .http
            .request(method, self.url(path))
            .bearer_auth(&self.token);
        if let Some(k) = key {
            req = req.header("Idempotency-Key", k);
        }
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("request to {path} failed"))?;
        let status = resp.status();
        let body = resp.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }

    /// One read of the event feed (`GET /v1/events`); returns status and JSON body.
    pub async fn events(&self, query: &EventQuery) -> anyhow::Result<(StatusCode, Value)> {
        let resp = self
            .http
            .get(self.url("/v1/events"))
            .query(query)
            .bearer_auth(&self.token)
            .send()
            .await
            .context("reading the event feed failed")?;
        let status = resp.status();
        Ok((status, resp.json().await.unwrap_or(Value::Null)))
    }

    pub async fn create_campaign(&self, spec: &Value) -> anyhow::Result<CampaignView> {
        let (status, body) = self
            .admin(reqwest::Method::POST, "/v1/campaigns", Some(spec))
            .await?;
        if status != StatusCode::CREATED {
            bail!("creating the campaign answered {status}: {body}");
        }
        Ok(serde_json::from_value(body)?)
    }

    pub async fn campaign(&self, id: &str) -> anyhow::Result<CampaignView> {
        let resp = self
            .http
            .get(self.url(&format!("/v1/campaigns/{id}")))
            .send()
            .await?;
        let status = resp.status();
        if status != StatusCode::OK {
            bail!(
                "GET campaign {id} answered {status}: {}",
                resp.text().await.unwrap_or_default()
            );
        }
        Ok(resp.json().await?)
    }

    /// [`Client::campaign`], read again while the deployment refuses it for up to `within`: a
    /// deployment coming back from a fault may answer 503 (retry later) for a moment.
    pub async fn campaign_within(
        &self,
        id: &str,
        within: std::time::Duration,
    ) -> anyhow::Result<CampaignView> {
        let deadline = std::time::Instant::now() + within;
        loop {
            match self.campaign(id).await {
                Ok(v) => return Ok(v),
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::debug!(error = %format!("{e:#}"), "reading the campaign failed; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
            }
        }
    }

    pub async fn claim(
        &self,
        campaign: &str,
        user: &str,
        qty: u64,
        idempotency_key: Option<&str>,
    ) -> Result<ClaimReply, reqwest::Error> {
        let mut req = self
            .http
            .post(self.url(&format!("/v1/campaigns/{campaign}/claims")))
            .json(&serde_json::json!({"user_id": user, "qty": qty}));
        if let Some(k) = idempotency_key {
            req = req.header("Idempotency-Key", k);
        }
        let resp = req.send().await?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status == StatusCode::OK {
            if let Ok(answer) = serde_json::from_value(body.clone()) {
                return Ok(ClaimReply::Processed(answer));
            }
        }
        Ok(ClaimReply::Refused(status, body))
    }

    pub async fn order(&self, order_id: &str) -> anyhow::Result<Option<Order>> {
        let (status, body) = self
            .admin(
                reqwest::Method::GET,
                &format!("/v1/orders/{order_id}"),
                None,
            )
            .await?;
        match status {
            StatusCode::OK => Ok(Some(serde_json::from_value(body)?)),
            StatusCode::NOT_FOUND => Ok(None),
            other => bail!("GET order {order_id} answered {other}: {body}"),
        }
    }

    /// Every order of a campaign, following cursors.
    pub async fn all_orders(&self, campaign: &str) -> anyhow::Result<Vec<Order>> {
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut path = format!("/v1/campaigns/{campaign}/orders?limit=1000");
            if let Some(c) = &cursor {
                path.push_str(&format!("&cursor={c}"));
            }
            let (status, body) = self.admin(reqwest::Method::GET, &path, None).await?;
            if status != StatusCode::OK {
                bail!("listing orders answered {status}: {body}");
            }
            let page: OrderPage = serde_json::from_value(body)?;
            out.extend(page.orders);
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => return Ok(out),
            }
        }
    }
}
