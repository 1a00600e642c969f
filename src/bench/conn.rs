//! One HTTP/1.1 keep-alive connection of the load generator, on hyper's connection API.
//!
//! Why not the pooled `reqwest` client the rest of seckill uses: `-c 128` must mean exactly 128
//! TCP connections, each carrying one request at a time, like `ab -k`, `wrk` and `oha`; and on
//! a 2-core machine every microsecond the generator spends per request is taken from the server
//! it measures. A bare hyper connection per worker has no pool, no lock and no per-request
//! allocation beyond the request itself. It reconnects after a transport error.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Where claims go: a resolved address and the URL's host and base path.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    host: HeaderValue,
    base_path: String,
}

impl Endpoint {
    /// Resolves an `http://host:port[/base]` URL once, before the storm.
    pub async fn resolve(url: &str) -> anyhow::Result<Endpoint> {
        let uri: hyper::Uri = url.parse().with_context(|| format!("bad URL {url:?}"))?;
        if uri.scheme_str() != Some("http") {
            bail!("the bench speaks plain http:// only, got {url:?}");
        }
        let authority = uri
            .authority()
            .with_context(|| format!("URL {url:?} has no host"))?;
        let port = authority.port_u16().unwrap_or(80);
        let addr = tokio::net::lookup_host((authority.host(), port))
            .await
            .with_context(|| format!("cannot resolve {}", authority.host()))?
            .next()
            .with_context(|| format!("{} has no address", authority.host()))?;
        Ok(Endpoint {
            addr,
            host: HeaderValue::from_str(authority.as_str())?,
            base_path: uri.path().trim_end_matches('/').to_owned(),
        })
    }

    pub fn path(&self, p: &str) -> String {
        format!("{}{p}", self.base_path)
    }
}

/// A response: status and the whole body.
pub struct Response {
    pub status: StatusCode,
    pub body: Bytes,
}

pub struct Conn {
    endpoint: Endpoint,
    sender: Option<SendRequest<Full<Bytes>>>,
    pub reconnects: u64,
}

impl Conn {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            sender: None,
            reconnects: 0,
        }
    }

    async fn connect(&mut self) -> anyhow::Result<&mut SendRequest<Full<Bytes>>> {
        let stream = TcpStream::connect(self.endpoint.addr)
            .await
            .with_context(|| format!("cannot connect to {}", self.endpoint.addr))?;
        stream.set_nodelay(true)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "bench connection ended");
            }
        });
        self.reconnects += 1;
        Ok(self.sender.insert(sender))
    }

    /// Opens the connection now unless it is open (the storm ramps connections up this way).
    pub async fn open(&mut self) -> anyhow::Result<()> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.connect().await?;
        }
        Ok(())
    }

    /// POSTs a JSON body on this connection (reconnecting first if it was lost).
    pub async fn post_json(
        &mut self,
        path: &str,
        body: Bytes,
        idempotency_key: Option<&str>,
        request_id: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<Response> {
        let exchange = self.exchange(path, body, idempotency_key, request_id);
        let result = tokio::time::timeout(timeout, exchange)
            .await
            .unwrap_or_else(|_| Err(anyhow::anyhow!("no answer within {timeout:?}")));
        if result.is_err() {
            // The connection's state is unknown (half-read answer, reset): start afresh.
            self.sender = None;
        }
        result
    }

    async fn exchange(
        &mut self,
        path: &str,
        body: Bytes,
        idempotency_key: Option<&str>,
        request_id: Option<&str>,
    ) -> anyhow::Result<Response> {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header(HOST, self.endpoint.host.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(k) = idempotency_key {
            builder = builder.header("idempotency-key", k);
        }
        if let Some(id) = request_id {
            builder = builder.header("x-request-id", id);
        }
        let req = builder.body(Full::new(body))?;
        let sender = match self.sender.as_mut() {
            Some(s) if !s.is_closed() => s,
            _ => self.connect().await?,
        };
        sender.ready().await?;
        let resp = sender.send_request(req).await?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Response { status, body })
    }
}
