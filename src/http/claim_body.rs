//! The claim body, parsed by hand on the storm path.
//!
//! Every claim of a sale carries the same tiny body, `{"user_id": "…", "qty": n}`, and in a
//! sale nearly every claim is refused; serde's generic machinery (visitor, field matching,
//! path tracking for error messages) was a measurable share of a refusal's cost. So
//! [`parse_claim_body`] reads the shape clients actually send with a few byte comparisons and
//! hands everything else — escapes in strings, unknown or repeated fields, numbers with a sign,
//! fraction or exponent, malformed JSON of any kind — to the generic decoder. The answer is
//! therefore always the one serde gives: the same [`ClaimRequest`] for a body it accepts, the
//! same 400 `invalid_request` message for a body it refuses (a property test holds the two
//! together).
//!
//! Pure: bytes in, request or API error out; no I/O, no allocation beyond the user id.

use super::error::ApiError;
use crate::domain::ClaimRequest;

/// Decodes a claim body (already read in full) as the API's JSON decoder would.
pub fn parse_claim_body(body: &[u8]) -> Result<ClaimRequest, ApiError> {
    match parse_common(body) {
        Some(req) => Ok(req),
        None => parse_generic(body),
    }
}

/// The generic decoder: axum's JSON decoding with the API's error messages.
pub fn parse_generic(body: &[u8]) -> Result<ClaimRequest, ApiError> {
    axum::Json::<ClaimRequest>::from_bytes(body)
        .map(|axum::Json(req)| req)
        .map_err(super::extract::json_rejection)
}

/// The common shape, or `None` when anything about the body needs the generic decoder.
pub(crate) fn parse_common(body: &[u8]) -> Option<ClaimRequest> {
    let mut c = Cursor { b: body, i: 0 };
    c.ws();
    c.eat(b'{')?;
    c.ws();
    let mut user_id: Option<String> = None;
    let mut qty: Option<u64> = None;
    loop {
        let key = c.plain_string()?;
        c.ws();
        c.eat(b':')?;
        c.ws();
        match key {
            b"user_id" if user_id.is_none() => {
                let raw = c.plain_string()?;
                user_id = Some(std::str::from_utf8(raw).ok()?.to_owned());
            }
            b"qty" if qty.is_none() => qty = Some(c.unsigned()?),
            _ => return None,
        }
        c.ws();
        match c.next()? {
            b',' => c.ws(),
            b'}' => break,
            _ => return None,
        }
    }
    c.ws();
    if c.i != body.len() {
        return None;
    }
    Some(ClaimRequest {
        user_id: user_id?,
        qty: qty.unwrap_or(1),
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self) -> Option<u8> {
        let c = *self.b.get(self.i)?;
        self.i += 1;
        Some(c)
    }

    fn eat(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// JSON's insignificant whitespace.
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    /// A string without escapes or control characters: its raw bytes (not yet UTF-8 checked).
    fn plain_string(&mut self) -> Option<&'a [u8]> {
        self.eat(b'"')?;
        let start = self.i;
        loop {
            match self.next()? {
                b'"' => return Some(&self.b[start..self.i - 1]),
                b'\\' | 0..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// A non-negative integer without sign, leading zero, fraction or exponent, within u64.
    fn unsigned(&mut self) -> Option<u64> {
        let start = self.i;
        let mut n: u64 = 0;
        while let Some(&d @ b'0'..=b'9') = self.b.get(self.i) {
            n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
            self.i += 1;
        }
        let digits = self.i - start;
        if digits == 0 || (digits > 1 && self.b[start] == b'0') {
            return None;
        }
        match self.b.get(self.i) {
            Some(b'.' | b'e' | b'E') => None,
            _ => Some(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn same(body: &[u8]) -> Result<(), TestCaseError> {
        let fast = parse_claim_body(body);
        let slow = parse_generic(body);
        match (fast, slow) {
            (Ok(a), Ok(b)) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => {
                prop_assert_eq!(a.status, b.status);
                prop_assert_eq!(a.code, b.code);
                prop_assert_eq!(a.message, b.message);
            }
            (a, b) => prop_assert!(false, "{:?}: ours {:?}, serde {:?}", body, a, b),
        }
        Ok(())
    }

    #[test]
    fn the_common_shapes_take_the_short_way() {
        for (body, user, qty) in [
            (&br#"{"user_id":"u1"}"#[..], "u1", 1),
            (br#"{"user_id": "u-2", "qty": 3}"#, "u-2", 3),
            (
                b" {\n\t\"qty\" : 1000000 ,\r\"user_id\":\"\xc3\xa9\xe7\xa7\x92\" } ",
                "é秒",
                1_000_000,
            ),
            (br#"{"user_id":"u","qty":0}"#, "u", 0),
            (
                br#"{"user_id":"u","qty":18446744073709551615}"#,
                "u",
                u64::MAX,
            ),
        ] {
            let req = parse_common(body).expect("common shape");
            assert_eq!((req.user_id.as_str(), req.qty), (user, qty));
            assert_eq!(parse_generic(body).unwrap(), req);
        }
    }

    #[test]
    fn everything_else_goes_to_the_generic_decoder() {
        let escaped = parse_claim_body(br#"{"user_id":"a\"b"}"#).unwrap();
        assert_eq!(escaped.user_id, "a\"b", "an escape is decoded by serde");
        for body in [
            &br#"{"user_id":"a\"b"}"#[..],
            br#"{"user_id":"u","qty":01}"#,
            br#"{"user_id":"u","qty":1.0}"#,
            br#"{"user_id":"u","qty":1e2}"#,
            br#"{"user_id":"u","qty":-1}"#,
            br#"{"user_id":"u","qty":18446744073709551616}"#,
            br#"{"user_id":"u","qty":null}"#,
            br#"{"user_id":"u","user_id":"v"}"#,
            br#"{"user_id":"u","extra":1}"#,
            br#"{"qty":1}"#,
            br#"{}"#,
            br#"{"user_id":"u",}"#,
            br#"{"user_id":"u"} x"#,
            b"{\"user_id\":\"\xff\"}",
            b"{\"user_id\":\"a\tb\"}",
            br#"["u",1]"#,
            b"",
        ] {
            assert!(
                parse_common(body).is_none(),
                "{:?}",
                String::from_utf8_lossy(body)
            );
            same(body).unwrap();
        }
    }

    fn ws() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![Just(" "), Just("\n"), Just("\t"), Just("\r")],
            0..3,
        )
        .prop_map(|v| v.concat())
    }

    /// Valid claim bodies in every spelling serde accepts, escapes and odd numbers included.
    fn valid_body() -> impl Strategy<Value = String> {
        let user = prop_oneof![
            "[a-zA-Z0-9_-]{1,20}".prop_map(|s| format!("\"{s}\"")),
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
            Just(r#""\u0075\n""#.to_owned()),
        ];
        let qty = prop_oneof![
            Just(None),
            (0u64..2_000_000).prop_map(|n| Some(n.to_string())),
            any::<u64>().prop_map(|n| Some(n.to_string())),
        ];
        (user, qty, any::<bool>(), ws(), ws(), ws(), ws()).prop_map(
            |(user, qty, qty_first, a, b, c, d)| {
                let u = format!("{a}\"user_id\"{b}:{c}{user}{d}");
                match qty {
                    None => format!("{b}{{{u}}}{a}"),
                    Some(q) if qty_first => format!("{{{c}\"qty\"{a}:{q},{u}}}{d}"),
                    Some(q) => format!("{{{u},{d}\"qty\":{b}{q}{c}}}"),
                }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn agrees_with_serde_on_valid_bodies(body in valid_body()) {
            prop_assert!(parse_claim_body(body.as_bytes()).is_ok(), "{}", body);
            same(body.as_bytes())?;
        }

        #[test]
        fn agrees_with_serde_on_damaged_bodies(
            body in valid_body(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            cut in any::<bool>(),
        ) {
            let mut b = body.into_bytes();
            let i = at.index(b.len());
            if cut { b.truncate(i) } else { b[i] = byte }
            same(&b)?;
        }

        #[test]
        fn agrees_with_serde_on_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            same(&b)?;
        }
    }
}
