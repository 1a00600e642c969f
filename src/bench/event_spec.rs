//! The admin events a storm is asked to fire (`--event WHEN:ACTION`), as parsed from the
//! command line; `events.rs` fires them.

use std::str::FromStr;

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum When {
    /// Seconds after the storm started.
    After(f64),
    /// This fraction of the requests (or of the duration) done.
    Fraction(f64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Pause,
    Resume,
    Close,
    /// Units (stock campaigns) or that many generated codes (code campaigns).
    Restock(u64),
    /// Cancel this many orders won so far.
    Cancel(u64),
}

impl Action {
    /// Whether the action can give stock back (after which a `sold_out` proves nothing).
    pub fn adds_supply(self) -> bool {
        matches!(self, Action::Restock(_) | Action::Cancel(_))
    }
}

/// `--event WHEN:ACTION`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EventSpec {
    pub when: When,
    pub action: Action,
}

impl FromStr for EventSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (when, action) = s
            .split_once(':')
            .ok_or_else(|| format!("event {s:?} must be WHEN:ACTION, e.g. 2s:restock=100"))?;
        let when = match when.strip_suffix('%') {
            Some(p) => {
                let f: f64 = p
                    .parse()
                    .map_err(|_| format!("{when:?} is not a percentage"))?;
                if !(0.0..=100.0).contains(&f) {
                    return Err(format!("{when:?} must be between 0% and 100%"));
                }
                When::Fraction(f / 100.0)
            }
            None => When::After(crate::duration::parse(when)?.as_secs_f64()),
        };
        let count = |v: &str| -> Result<u64, String> {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| format!("{v:?} must be a positive count"))
        };
        let action = match action.split_once('=') {
            None if action == "pause" => Action::Pause,
            None if action == "resume" => Action::Resume,
            None if action == "close" => Action::Close,
            Some(("restock", n)) => Action::Restock(count(n)?),
            Some(("cancel", n)) => Action::Cancel(count(n)?),
            _ => {
                return Err(format!(
                    "unknown action {action:?} (pause, resume, close, restock=N, cancel=N)"
                ))
            }
        };
        Ok(EventSpec { when, action })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events() {
        let e: EventSpec = "2s:restock=100".parse().unwrap();
        assert_eq!(e.when, When::After(2.0));
        assert_eq!(e.action, Action::Restock(100));
        let e: EventSpec = "50%:pause".parse().unwrap();
        assert_eq!(e.when, When::Fraction(0.5));
        assert_eq!(e.action, Action::Pause);
        assert!("2s:explode".parse::<EventSpec>().is_err());
        assert!("2s:cancel=0".parse::<EventSpec>().is_err());
        assert!("pause".parse::<EventSpec>().is_err());
        assert!(
            "2:pause".parse::<EventSpec>().is_err(),
            "a bare number has no unit"
        );
        assert!("150%:pause".parse::<EventSpec>().is_err());
    }
}
