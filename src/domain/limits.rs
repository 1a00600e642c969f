//! Rate-limit settings: the `N/unit[;burst=B]` rate syntax and a campaign's limits.
//!
//! The same syntax is used by the `serve` flags (global limits) and by the admin route
//! `PUT /v1/campaigns/{id}/limits` (per-campaign limits), so an operator writes a limit one way
//! everywhere. Limits are GCRA quotas: `count` requests per `period`, with at most `burst`
//! of them back to back. In any interval of length `t` a key gets at most
//! `burst + t · count / period` requests — there is no window edge to burst across.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::Error;

/// Largest `count` and `burst` a rate may name.
pub const MAX_RATE_COUNT: u64 = 1_000_000;

/// A GCRA quota: `count` per `period`, `burst` back to back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    pub count: u64,
    pub period: Duration,
    pub burst: u64,
}

impl Rate {
    /// Time one request "costs": the period divided by the count.
    pub fn emission_interval(&self) -> Duration {
        self.period / self.count as u32
    }

    fn unit(&self) -> &'static str {
        match self.period.as_secs() {
            1 => "s",
            60 => "m",
            _ => "h",
        }
    }
}

impl FromStr for Rate {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = || {
            Error::invalid(format!(
                "rate {s:?} must look like 5/s, 300/m or 1000/h, optionally followed by ;burst=N"
            ))
        };
        let (main, burst) = match s.split_once(';') {
            Some((main, b)) => (main, Some(b.trim().strip_prefix("burst=").ok_or_else(bad)?)),
            None => (s, None),
        };
        let (count, unit) = main.trim().split_once('/').ok_or_else(bad)?;
        let count: u64 = count.trim().parse().map_err(|_| bad())?;
        let period = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        let burst = match burst {
            Some(b) => b.parse().map_err(|_| bad())?,
            None => count,
        };
        for (name, v) in [("count", count), ("burst", burst)] {
            if !(1..=MAX_RATE_COUNT).contains(&v) {
                return Err(Error::invalid(format!(
                    "rate {s:?}: {name} must be between 1 and {MAX_RATE_COUNT}"
                )));
            }
        }
        Ok(Rate {
            count,
            period,
            burst,
        })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.unit())?;
        if self.burst != self.count {
            write!(f, ";burst={}", self.burst)?;
        }
        Ok(())
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Rate limits of one campaign's claims; `None` means no campaign-level limit of that kind.
/// The global limits of `serve` apply in addition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"per_user": "5/s", "per_ip": "50/s;burst=100"}))]
pub struct CampaignLimits {
    /// Claims per user id on this campaign: `N/s`, `N/m` or `N/h`, optionally `;burst=B`
    /// (N and B 1 … 10^6).
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = r"^\s*[0-9]+\s*/\s*[smh]\s*(;\s*burst=[0-9]+\s*)?$")]
    pub per_user: Option<Rate>,
    /// Claims per client IP on this campaign (same syntax).
    #[serde(default)]
    #[schema(value_type = Option<String>, pattern = r"^\s*[0-9]+\s*/\s*[smh]\s*(;\s*burst=[0-9]+\s*)?$")]
    pub per_ip: Option<Rate>,
}

impl CampaignLimits {
    pub fn is_empty(&self) -> bool {
        self.per_user.is_none() && self.per_ip.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for (text, count, secs, burst) in [
            ("5/s", 5, 1, 5),
            ("300/m", 300, 60, 300),
            ("1000/h;burst=10", 1000, 3600, 10),
            (" 2 / s ; burst=7", 2, 1, 7),
        ] {
            let r: Rate = text.parse().unwrap();
            assert_eq!((r.count, r.period.as_secs(), r.burst), (count, secs, burst));
            assert_eq!(r.to_string().parse::<Rate>().unwrap(), r);
        }
    }

    #[test]
    fn refuses_nonsense() {
        for text in [
            "",
            "5",
            "5/d",
            "0/s",
            "x/s",
            "5/s;b=2",
            "5/s;burst=0",
            "5/s;burst=",
            "-1/s",
            "2000000/s",
        ] {
            assert!(text.parse::<Rate>().is_err(), "{text:?} parsed");
        }
    }

    #[test]
    fn limits_json() {
        let l: CampaignLimits = serde_json::from_str(r#"{"per_user":"5/s"}"#).unwrap();
        assert_eq!(l.per_user.unwrap().count, 5);
        assert!(l.per_ip.is_none());
        assert!(serde_json::from_str::<CampaignLimits>(r#"{"per_usr":"5/s"}"#).is_err());
        assert!(serde_json::from_str::<CampaignLimits>(r#"{"per_user":"5/x"}"#).is_err());
    }
}
