//! Before the storm: the run's campaign, and for `soldout` the whole stock claimed up front.
//!
//! A created campaign gets a unique id (`bench-<scenario>-<random>`), so runs never collide and
//! the verifier knows every order in it comes from this run.

use std::collections::HashSet;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use serde_json::json;

use super::conn::{Conn, Endpoint};
use super::scenario::{Plan, Supply, Target};
use super::storm::Win;
use crate::bench::client::Client;
use crate::domain::{ClaimAnswer, Kind, Outcome};

/// Creates the run's campaign, or reads the existing one (and its orders, to leave them out).
pub async fn campaign(
    client: &Client,
    plan: &Plan,
    verify: bool,
) -> anyhow::Result<(String, Kind, HashSet<String>)> {
    match &plan.target {
        Target::Create {
            supply,
            per_user_limit,
        } => {
            let id = format!(
                "bench-{}-{}",
                plan.scenario.as_str(),
                hex::encode(rand::random::<[u8; 4]>())
            );
            let mut spec = json!({"id": id, "per_user_limit": per_user_limit});
            if let Some(h) = plan.hold {
                spec["hold_seconds"] = json!(h.seconds);
            }
            match supply {
                Supply::Stock(n) => spec["stock"] = json!(n),
                Supply::Codes(n) => {
                    let codes: Vec<String> = (1..=*n).map(|i| format!("P-{i:07}")).collect();
                    spec["codes"] = json!(codes);
                }
            }
            let view = client
                .create_campaign(&spec)
                .await
                .context("creating the bench campaign")?;
            Ok((id, view.kind, HashSet::new()))
        }
        Target::Existing { id } => {
            let view = client.campaign(id).await?;
            let before = if verify {
                client.all_orders(id).await?
            } else {
                Vec::new()
            };
            Ok((
                id.clone(),
                view.kind,
                before.into_iter().map(|o| o.order_id).collect(),
            ))
        }
    }
}

/// Claims the whole stock, one unit per user, before the storm; returns the wins, the claims
/// sent and whether it ended on a `sold_out`.
pub async fn presell(
    endpoint: &Endpoint,
    path: &str,
    timeout: Duration,
) -> anyhow::Result<(Vec<Win>, u64, bool)> {
    let path = endpoint.path(path);
    let mut conn = Conn::new(endpoint.clone());
    let mut wins = Vec::new();
    const MOST: u64 = 1_000_000;
    for i in 1..=MOST + 1 {
        let user = format!("presell-{i}");
        let body = Bytes::from(format!(r#"{{"user_id":"{user}","qty":1}}"#));
        let resp = conn.post_json(&path, body, None, None, timeout).await?;
        anyhow::ensure!(
            resp.status == hyper::StatusCode::OK,
            "presell claim answered {}",
            resp.status
        );
        let a: ClaimAnswer = serde_json::from_slice(&resp.body)?;
        match a.outcome {
            Outcome::Won => wins.push(Win {
                user,
                order_id: a.order_id.unwrap_or_default(),
                qty: a.qty.unwrap_or(0),
                codes: a.codes,
                key: None,
                sent: std::time::Instant::now(),
                answered: std::time::Instant::now(),
            }),
            other => return Ok((wins, i, other == Outcome::SoldOut)),
        }
    }
    anyhow::bail!("presell won more than {MOST} claims; use a smaller --stock with soldout")
}
