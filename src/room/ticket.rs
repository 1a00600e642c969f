//! Tickets: what an admitted user shows with each claim (`X-Seckill-Ticket`).
//!
//! A ticket is `t1.<expires, Unix ms>.<mac>`, with `mac` = `base64url(HMAC-SHA256(ticket key,
//! "t1\0<campaign>\0<user>\0<expires>"))`. It is bound to one campaign and one user without
//! naming them, so it is short and says nothing about the buyer; it is checked with the key
//! alone, without Redis or the ledger, so checking one costs a claim one HMAC. The key comes
//! from the deployment's room key (kept in the ledger), so every instance checks every
//! instance's tickets and a restart leaves them valid.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Name of the header that carries the ticket.
pub const HEADER: &str = "x-seckill-ticket";

/// Longest ticket accepted before any work is done on it.
const MAX_LEN: usize = 128;

/// Why a claim's ticket was refused (403 `not_admitted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("this campaign has a waiting room: join it (POST /v1/campaigns/{{id}}/queue) and send the ticket you are given as X-Seckill-Ticket")]
    Missing,
    #[error("the X-Seckill-Ticket is malformed")]
    Malformed,
    #[error("the X-Seckill-Ticket was not issued for this user and campaign")]
    Forged,
    #[error("the X-Seckill-Ticket has expired; tickets are valid for the campaign's ticket_seconds from admission")]
    Expired,
}

/// Signs and checks tickets with one key.
#[derive(Clone)]
pub struct Tickets {
    key: [u8; 32],
}

impl std::fmt::Debug for Tickets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tickets(..)")
    }
}

impl Tickets {
    pub fn new(key: [u8; 32]) -> Self {
        Self { key }
    }

    fn mac(&self, campaign: &str, user: &str, expires_ms: i64) -> Hmac<Sha256> {
        let mut mac =
            Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes keys of any length");
        mac.update(b"t1\0");
        mac.update(campaign.as_bytes());
        mac.update(b"\0");
        mac.update(user.as_bytes());
        mac.update(b"\0");
        mac.update(expires_ms.to_string().as_bytes());
        mac
    }

    /// The ticket of `user` for `campaign`, valid until `expires_ms`.
    pub fn sign(&self, campaign: &str, user: &str, expires_ms: i64) -> String {
        let tag = self.mac(campaign, user, expires_ms).finalize().into_bytes();
        format!("t1.{expires_ms}.{}", URL_SAFE_NO_PAD.encode(tag))
    }

    /// Whether `ticket` lets `user` claim in `campaign` at `now_ms`. The MAC is checked (in
    /// constant time) before the expiry is believed.
    pub fn check(
        &self,
        ticket: Option<&str>,
        campaign: &str,
        user: &str,
        now_ms: i64,
    ) -> Result<(), TicketError> {
        let ticket = ticket.ok_or(TicketError::Missing)?;
        if ticket.len() > MAX_LEN {
            return Err(TicketError::Malformed);
        }
        let mut parts = ticket.split('.');
        let (Some("t1"), Some(expires), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TicketError::Malformed);
        };
        let expires_ms: i64 = expires.parse().map_err(|_| TicketError::Malformed)?;
        if expires_ms.to_string() != expires {
            return Err(TicketError::Malformed);
        }
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TicketError::Malformed)?;
        self.mac(campaign, user, expires_ms)
            .verify_slice(&tag)
            .map_err(|_| TicketError::Forged)?;
        if now_ms >= expires_ms {
            return Err(TicketError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_admits_only_its_user_and_campaign_until_it_expires() {
        let t = Tickets::new([7; 32]);
        let ticket = t.sign("sale", "alice", 10_000);
        assert_eq!(t.check(Some(&ticket), "sale", "alice", 9_999), Ok(()));
        assert_eq!(
            t.check(Some(&ticket), "sale", "alice", 10_000),
            Err(TicketError::Expired)
        );
        assert_eq!(
            t.check(Some(&ticket), "sale", "bob", 0),
            Err(TicketError::Forged)
        );
        assert_eq!(
            t.check(Some(&ticket), "other", "alice", 0),
            Err(TicketError::Forged)
        );
        // Another deployment's key, a moved expiry, a cut tag.
        let theirs = Tickets::new([8; 32]).sign("sale", "alice", 10_000);
        assert_eq!(
            t.check(Some(&theirs), "sale", "alice", 0),
            Err(TicketError::Forged)
        );
        let later = ticket.replace("t1.10000.", "t1.99999.");
        assert_eq!(
            t.check(Some(&later), "sale", "alice", 0),
            Err(TicketError::Forged)
        );
        let cut = &ticket[..ticket.len() - 2];
        assert!(t.check(Some(cut), "sale", "alice", 0).is_err());
        // A user and campaign that concatenate alike are still told apart.
        let a = t.sign("ab", "c", 10_000);
        assert_eq!(t.check(Some(&a), "a", "bc", 0), Err(TicketError::Forged));
    }

    #[test]
    fn malformed_tickets_are_refused_as_such() {
        let t = Tickets::new([7; 32]);
        for bad in [
            "",
            "t1",
            "t1.5",
            "t2.5.abc",
            "t1.x.abc",
            "t1.05.abc",
            "t1.5.a.b",
            "t1.5.!!",
        ] {
            assert_eq!(
                t.check(Some(bad), "s", "u", 0),
                Err(TicketError::Malformed),
                "{bad:?}"
            );
        }
        assert_eq!(t.check(None, "s", "u", 0), Err(TicketError::Missing));
        let long = format!("t1.5.{}", "a".repeat(200));
        assert_eq!(
            t.check(Some(&long), "s", "u", 0),
            Err(TicketError::Malformed)
        );
    }
}
