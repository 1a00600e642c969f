//! A secret string (admin token, signing key) that never shows up in logs or `Debug` output.
//!
//! Settings structs derive `Debug` and get logged or printed in panics; wrapping each secret in
//! this type makes "never print a secret" a property of the type rather than of every caller.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Arc<str>);

impl Secret {
    pub fn new(value: &str) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self::new(s))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_is_redacted() {
        let s: super::Secret = "hunter2-token".parse().unwrap();
        assert_eq!(format!("{s:?}"), "Secret(<redacted>)");
        assert_eq!(s.expose(), "hunter2-token");
    }
}
