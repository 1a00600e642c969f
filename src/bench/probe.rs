//! Invariant 7 after the storm: malformed or unauthorised requests get a 4xx and change nothing.
//!
//! The storm itself only sends well-formed claims, so the bench ends with a short probe once the
//! ledger has drained: a handful of malformed claims and admin calls without (or with a wrong)
//! token against the run's campaign. Each must be refused with a 4xx, and the campaign view must
//! read the same before and after.

use reqwest::{Method, StatusCode};

use super::verify::{Invariant, Violation};
use crate::bench::client::Client;

/// (what, method, path below the campaign, body, bearer token)
type Probe = (
    &'static str,
    Method,
    &'static str,
    &'static str,
    Option<&'static str>,
);

const PROBES: &[Probe] = &[
    (
        "claim with an empty user_id",
        Method::POST,
        "/claims",
        r#"{"user_id":"","qty":1}"#,
        None,
    ),
    (
        "claim with qty 0",
        Method::POST,
        "/claims",
        r#"{"user_id":"probe-u1","qty":0}"#,
        None,
    ),
    (
        "claim with a negative qty",
        Method::POST,
        "/claims",
        r#"{"user_id":"probe-u2","qty":-1}"#,
        None,
    ),
    (
        "claim that is not JSON",
        Method::POST,
        "/claims",
        r#"{"user_id":"probe-u3","#,
        None,
    ),
    (
        "restock without a token",
        Method::POST,
        "/restock",
        r#"{"units":5}"#,
        None,
    ),
    (
        "pause with a wrong token",
        Method::POST,
        "/pause",
        "",
        Some("not-the-admin-token"),
    ),
    ("close without a token", Method::POST, "/close", "", None),
];

/// Sends the probes; returns the violations (refusals that were not 4xx, or a changed view).
pub async fn bad_input(client: &Client, campaign: &str) -> anyhow::Result<Vec<Violation>> {
    let before = client
        .campaign_within(campaign, super::client::SETTLE)
        .await?;
    let mut accepted = Vec::new();
    for (what, method, path, body, token) in PROBES {
        let mut req = client
            .http()
            .request(
                method.clone(),
                client.url(&format!("/v1/campaigns/{campaign}{path}")),
            )
            .header("content-type", "application/json")
            .body(*body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let status = req.send().await?.status();
        if !status.is_client_error() {
            accepted.push(format!("{what} answered {status}"));
        }
        if status == StatusCode::OK {
            tracing::warn!(probe = what, "a malformed request was processed");
        }
    }
    let after = client
        .campaign_within(campaign, super::client::SETTLE)
        .await?;
    let mut out = Vec::new();
    if !accepted.is_empty() {
        out.push(Violation {
            invariant: Invariant::BadInputAccepted,
            message: format!(
                "malformed or unauthorised requests were not refused with a 4xx: {}",
                accepted.join("; ")
            ),
            orders: vec![],
            key: None,
        });
    }
    if before != after {
        out.push(Violation {
            invariant: Invariant::BadInputChangedState,
            message: format!(
                "the campaign changed under malformed or unauthorised requests: \
                 total {} → {}, remaining {} → {}, status {} → {}",
                before.total,
                after.total,
                before.remaining,
                after.remaining,
                before.status.as_str(),
                after.status.as_str()
            ),
            orders: vec![],
            key: None,
        });
    }
    Ok(out)
}
