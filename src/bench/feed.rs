//! Reads a campaign's event feed after a storm and holds it against the ledger's orders
//! (`verify::feed`). The orders are read first and the feed after them, again until they agree
//! or five seconds passed: an event commits with its change, but PostgreSQL's events are
//! numbered a few milliseconds after they commit.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::Method;

use super::client::Client;
use super::verify::{self, Violation};
use crate::domain::{Event, EventPage};

const ROUNDS: usize = 20;
const PAUSE: Duration = Duration::from_millis(250);

/// The feed's violations for `campaign`; none from a server without a feed (404).
pub async fn check(
    client: &Client,
    campaign: &str,
    preexisting: &HashSet<String>,
) -> anyhow::Result<Vec<Violation>> {
    let mut events: Vec<Event> = Vec::new();
    let mut after: Option<String> = None;
    for round in 0..ROUNDS {
        let orders = client.all_orders(campaign).await?;
        loop {
            let mut path = format!("/v1/events?campaign={campaign}&limit=1000");
            if let Some(a) = &after {
                path.push_str(&format!("&after={a}"));
            }
            let (status, body) = client.admin(Method::GET, &path, None).await?;
            if status == reqwest::StatusCode::NOT_FOUND && after.is_none() && events.is_empty() {
                return Ok(Vec::new());
            }
            anyhow::ensure!(
                status.is_success(),
                "reading the event feed: {status} {body}"
            );
            let page: EventPage = serde_json::from_value(body)?;
            let short = page.events.len() < 1000;
            events.extend(page.events);
            after = Some(page.next_cursor);
            if short {
                break;
            }
        }
        let found = verify::feed::check(&orders, &events, preexisting);
        if found.is_empty() || round + 1 == ROUNDS {
            return Ok(found);
        }
        tokio::time::sleep(PAUSE).await;
    }
    unreachable!("the last round returns")
}
