//! The lock routes of a running seckill (`/v1/locks/…`, admin token) as a [`LockBackend`], so
//! `seckill lock run` and other Rust services can use a server's locks like a local store.
//! Waiting is done on this side ([`super::Locks::acquire`] polls), so no request is held open.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use reqwest::StatusCode;
use serde_json::{json, Value};

use super::{now_ms, Attempt, Lease, LockBackend, LockError};

pub struct HttpLocks {
    http: reqwest::Client,
    base: String,
    admin_token: String,
}

impl HttpLocks {
    pub fn new(base: &str, admin_token: &str) -> Self {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .timeout(Duration::from_secs(10))
            .build()
            .expect("the HTTP client has a valid static configuration");
        Self {
            http,
            base: base.trim_end_matches('/').to_owned(),
            admin_token: admin_token.to_owned(),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Value,
    ) -> Result<(StatusCode, Value), LockError> {
        let resp = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.admin_token)
            .json(&body)
            .send()
            .await
            .map_err(|e| LockError::Unavailable(format!("seckill at {}: {e}", self.base)))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        Ok((status, body))
    }
}

fn refused(status: StatusCode, body: &Value, name: &str) -> LockError {
    let msg = body["error"]["message"]
        .as_str()
        .unwrap_or("no error message")
        .to_owned();
    match status {
        StatusCode::CONFLICT => LockError::NotHolder(name.to_owned()),
        s if s.is_client_error() => LockError::Invalid(format!("{s}: {msg}")),
        s => LockError::Unavailable(format!("{s}: {msg}")),
    }
}

fn lease(name: &str, token: &str, body: &Value, ttl: Duration, sent: Instant) -> Lease {
    let ttl_ms = ttl.as_millis() as u64;
    Lease {
        name: name.to_owned(),
        token: token.to_owned(),
        fence: body["fence"].as_u64().unwrap_or(0),
        ttl,
        valid_until: sent + ttl,
        expires_ms: now_ms() + ttl_ms,
    }
}

#[async_trait]
impl LockBackend for HttpLocks {
    async fn try_acquire(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Attempt, LockError> {
        let sent = Instant::now();
        let body = json!({"owner": owner, "ttl_ms": ttl.as_millis() as u64, "wait_ms": 0});
        let (status, body) = self
            .send(reqwest::Method::POST, &format!("/v1/locks/{name}"), body)
            .await?;
        if status != StatusCode::OK {
            return Err(refused(status, &body, name));
        }
        if body["acquired"] == true {
            let token = body["token"].as_str().unwrap_or_default().to_owned();
            Ok(Attempt::Granted(lease(name, &token, &body, ttl, sent)))
        } else {
            let ms = body["retry_after_ms"].as_u64().unwrap_or(10);
            Ok(Attempt::Held {
                retry_after: Duration::from_millis(ms.max(1)),
            })
        }
    }

    async fn extend(&self, name: &str, token: &str, ttl: Duration) -> Result<Lease, LockError> {
        let sent = Instant::now();
        let body = json!({"token": token, "ttl_ms": ttl.as_millis() as u64});
        let (status, body) = self
            .send(
                reqwest::Method::POST,
                &format!("/v1/locks/{name}/extend"),
                body,
            )
            .await?;
        if status != StatusCode::OK {
            return Err(refused(status, &body, name));
        }
        Ok(lease(name, token, &body, ttl, sent))
    }

    async fn release(&self, name: &str, token: &str) -> Result<(), LockError> {
        let (status, body) = self
            .send(
                reqwest::Method::DELETE,
                &format!("/v1/locks/{name}"),
                json!({"token": token}),
            )
            .await?;
        if status != StatusCode::OK {
            return Err(refused(status, &body, name));
        }
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "http"
    }
}
