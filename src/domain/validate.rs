//! Input rules of the API contract, in one place so every entry point applies the same ones.

use super::Error;

pub const MAX_CAMPAIGN_ID: usize = 64;
pub const MAX_USER_ID: usize = 128;
pub const MAX_CODE_BYTES: usize = 128;
pub const MAX_CODES: usize = 1_000_000;
pub const MAX_QTY: u64 = 1_000_000;
pub const MAX_PER_USER_LIMIT: u64 = 1_000_000;
pub const MAX_STOCK: u64 = 1_000_000_000;
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// `id`: 1–64 chars of `[A-Za-z0-9_-]`.
pub fn validate_campaign_id(id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > MAX_CAMPAIGN_ID {
        return Err(Error::invalid(format!(
            "id must be 1 to {MAX_CAMPAIGN_ID} characters, got {}",
            id.len()
        )));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(Error::invalid(format!(
            "id may contain only A-Z, a-z, 0-9, '_' and '-', found {c:?}"
        )));
    }
    Ok(())
}

/// `user_id`: 1–128 bytes, printable, no control characters.
pub fn validate_user_id(user: &str) -> Result<(), Error> {
    if user.is_empty() || user.len() > MAX_USER_ID {
        return Err(Error::invalid(format!(
            "user_id must be 1 to {MAX_USER_ID} bytes, got {}",
            user.len()
        )));
    }
    printable("user_id", user)
}

pub fn validate_qty(qty: u64) -> Result<(), Error> {
    if !(1..=MAX_QTY).contains(&qty) {
        return Err(Error::invalid(format!(
            "qty must be between 1 and {MAX_QTY}, got {qty}"
        )));
    }
    Ok(())
}

pub fn validate_idempotency_key(key: &str) -> Result<(), Error> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY {
        return Err(Error::invalid(format!(
            "Idempotency-Key must be 1 to {MAX_IDEMPOTENCY_KEY} characters, got {}",
            key.len()
        )));
    }
    printable("Idempotency-Key", key)
}

/// `codes` of a request body, counted while it is parsed: the parse stops at the first code
/// beyond [`MAX_CODES`] instead of building the whole list first (a restock body may be
/// 256 MiB; holding tens of millions of strings before refusing them cost memory for nothing).
/// Use as `#[serde(default, deserialize_with = "bounded_codes")]`.
pub fn bounded_codes<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<String>>, D::Error> {
    struct Codes(Vec<String>);
    struct Counting;
    impl<'de> serde::de::Visitor<'de> for Counting {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            write!(f, "a list of at most {MAX_CODES} codes")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut codes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(code) = seq.next_element::<String>()? {
                if codes.len() == MAX_CODES {
                    return Err(serde::de::Error::custom(format!(
                        "codes must hold 1 to {MAX_CODES} entries, got more"
                    )));
                }
                codes.push(code);
            }
            Ok(codes)
        }
    }
    impl<'de> serde::Deserialize<'de> for Codes {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_seq(Counting).map(Codes)
        }
    }
    Ok(<Option<Codes> as serde::Deserialize>::deserialize(d)?.map(|c| c.0))
}

/// A list of codes for a new campaign or a restock: 1 … 10^6 unique non-empty strings ≤ 128 bytes.
pub fn validate_codes(codes: &[String]) -> Result<(), Error> {
    if codes.is_empty() || codes.len() > MAX_CODES {
        return Err(Error::invalid(format!(
            "codes must hold 1 to {MAX_CODES} entries, got {}",
            codes.len()
        )));
    }
    let mut seen = std::collections::HashSet::with_capacity(codes.len());
    for (i, code) in codes.iter().enumerate() {
        if code.is_empty() || code.len() > MAX_CODE_BYTES {
            return Err(Error::invalid(format!(
                "codes[{i}] must be 1 to {MAX_CODE_BYTES} bytes, got {}",
                code.len()
            )));
        }
        printable(&format!("codes[{i}]"), code)?;
        if !seen.insert(code.as_str()) {
            return Err(Error::invalid(format!(
                "codes[{i}] {code:?} appears more than once in the list"
            )));
        }
    }
    Ok(())
}

fn printable(field: &str, value: &str) -> Result<(), Error> {
    match value.chars().position(char::is_control) {
        Some(pos) => Err(Error::invalid(format!(
            "{field} must not contain control characters (found one at character {pos})"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn campaign_ids() {
        assert!(validate_campaign_id("double11-coupons_2").is_ok());
        assert!(validate_campaign_id("").is_err());
        assert!(validate_campaign_id(&"a".repeat(65)).is_err());
        assert!(validate_campaign_id("a b").is_err());
        assert!(validate_campaign_id("a/b").is_err());
    }

    #[test]
    fn user_ids_and_codes() {
        assert!(validate_user_id("u101").is_ok());
        assert!(validate_user_id("用户").is_ok());
        assert!(validate_user_id("u\n1").is_err());
        assert!(validate_user_id(&"x".repeat(129)).is_err());
        assert!(validate_codes(&["a".into(), "a".into()]).is_err());
        assert!(validate_codes(&["".into()]).is_err());
        assert!(validate_codes(&["a".into(), "b".into()]).is_ok());
    }

    #[test]
    fn codes_are_counted_while_parsed() {
        #[derive(serde::Deserialize)]
        struct Body {
            #[serde(default, deserialize_with = "bounded_codes")]
            codes: Option<Vec<String>>,
        }
        let list = |n: usize| {
            let codes: Vec<String> = (0..n).map(|i| format!("\"c{i}\"")).collect();
            format!("{{\"codes\": [{}]}}", codes.join(","))
        };
        let at_limit: Body = serde_json::from_str(&list(MAX_CODES)).unwrap();
        assert_eq!(at_limit.codes.unwrap().len(), MAX_CODES);
        let err = serde_json::from_str::<Body>(&list(MAX_CODES + 1))
            .err()
            .expect("one more is refused");
        assert!(err.to_string().contains("got more"), "{err}");
        assert!(serde_json::from_str::<Body>("{}").unwrap().codes.is_none());
        assert!(serde_json::from_str::<Body>(r#"{"codes": null}"#)
            .unwrap()
            .codes
            .is_none());
    }
}
