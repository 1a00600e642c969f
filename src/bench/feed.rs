//! Reads a campaign's event feed after a storm and holds it against the ledger's orders
//! (`verify::feed`). The orders are read first (the drain's read, the first time) and the feed
//! after them, again until they agree or five seconds passed: an event commits with its
//! change, but PostgreSQL's events are numbered a few milliseconds after they commit.

use std::collections::HashSet;
use std::time::Duration;

use super::client::Client;
use super::verify::{self, Violation};
use crate::domain::{Event, EventPage, EventQuery, Order};

const ROUNDS: usize = 20;
const PAUSE: Duration = Duration::from_millis(250);

/// The feed's violations for `campaign`, against `drained` (its orders, read by the drain)
/// and later reads; none from a server without a feed (404).
pub async fn check(
    client: &Client,
    campaign: &str,
    drained: &[Order],
    preexisting: &HashSet<String>,
) -> anyhow::Result<Vec<Violation>> {
    let mut events: Vec<Event> = Vec::new();
    let mut after: Option<String> = None;
    for round in 0..ROUNDS {
        // The drain's read comes before the feed's; a later round reads the orders again.
        let orders = match round {
            0 => drained.to_vec(),
            _ => client.all_orders(campaign).await?,
        };
        loop {
            let query = EventQuery {
                after: after.clone(),
                limit: Some(1000),
                campaign: Some(campaign.to_owned()),
                ..EventQuery::default()
            };
            let (status, body) = client.events(&query).await?;
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
