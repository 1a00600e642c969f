//! The label values of a claim's outcome, and the per-campaign claim counters.
//!
//! A claim ends in one of a fixed set of outcomes: the engine's eight, or the code of the error
//! that refused it. Each gets an index, so the claim path picks a pre-registered handle from an
//! array instead of looking a label set up per request.

use metrics::Counter;

use crate::domain::Outcome;

/// Error codes a claim can end with (beyond the engine's outcomes).
const ERRORS: [&str; 8] = [
    "rate_limited",
    "overloaded",
    "unauthorized",
    "invalid_request",
    "not_found",
    "internal",
    "unknown",
    "error",
];

/// Number of distinct claim outcomes (label values of `outcome`).
pub const N: usize = Outcome::ALL.len() + ERRORS.len();

/// How a claim ended: an index into [`label`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimEnd(usize);

impl ClaimEnd {
    pub fn outcome(o: Outcome) -> Self {
        Self(o as usize)
    }

    /// The end of a claim refused with error `code`; `unknown` when it may have taken effect.
    pub fn error(code: &str, outcome_unknown: bool) -> Self {
        let code = if outcome_unknown { "unknown" } else { code };
        let i = ERRORS
            .iter()
            .position(|e| *e == code)
            .unwrap_or(ERRORS.len() - 1);
        Self(Outcome::ALL.len() + i)
    }

    pub fn index(self) -> usize {
        self.0
    }
}

/// The label value of outcome index `i`.
pub fn label(i: usize) -> &'static str {
    match Outcome::ALL.get(i) {
        Some(o) => o.as_str(),
        None => ERRORS[i - Outcome::ALL.len()],
    }
}

/// `seckill_claims_total{campaign, outcome}` of one campaign label (or `other`).
pub struct CampaignSeries {
    pub by_outcome: [Counter; N],
}

impl std::fmt::Debug for CampaignSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CampaignSeries")
    }
}

impl CampaignSeries {
    pub fn count(&self, end: ClaimEnd) {
        self.by_outcome[end.0].increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_match_labels() {
        for o in Outcome::ALL {
            assert_eq!(label(ClaimEnd::outcome(o).index()), o.as_str());
        }
        assert_eq!(
            label(ClaimEnd::error("rate_limited", false).index()),
            "rate_limited"
        );
        assert_eq!(label(ClaimEnd::error("internal", true).index()), "unknown");
        assert_eq!(label(ClaimEnd::error("conflict", false).index()), "error");
        assert_eq!(ClaimEnd::error("error", false).index(), N - 1);
    }
}
