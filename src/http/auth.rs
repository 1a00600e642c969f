//! Who may do what: named bearer tokens, each with scopes.
//!
//! One admin token for everything made the payment callback able to create campaigns and the
//! dashboard viewer able to cancel orders, and changing it meant restarting every instance at
//! once. Instead each credential is a [`Token`]: a name (logged with every admin change it
//! makes), its [`Scope`]s, and the SHA-256 of its secret (the secret itself is not kept;
//! the config file may give the hash alone). Any number are valid at once, so a secret is
//! rotated by adding the new token, moving the clients, and removing the old one; the set is
//! swapped whole on a reload ([`Credentials::replace`]), never restarted.
//!
//! A route's scope is [`required`]: confirming an order needs `confirm` (the payment
//! callback), locks need `locks`, reading (GET) needs `read`, and every other admin route
//! `admin`, which also grants all the others. A token without it is answered 403 naming the
//! scope it lacks.

use std::fmt;
use std::sync::Arc;

use axum::http::{Method, StatusCode};
use parking_lot::RwLock;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::ApiError;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Everything.
    Admin,
    /// `POST /v1/orders/{id}/confirm` only: the payment callback.
    Confirm,
    /// Views: campaigns' orders and limits, orders, the events feed, webhooks' state,
    /// metrics, the dashboard.
    Read,
    /// `/v1/locks`.
    Locks,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Admin, Scope::Confirm, Scope::Read, Scope::Locks];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Admin => "admin",
            Scope::Confirm => "confirm",
            Scope::Read => "read",
            Scope::Locks => "locks",
        }
    }

    fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// The scope a route needs: `route` is its pattern as the router matched it.
pub fn required(method: &Method, route: &str) -> Scope {
    match route {
        "/v1/orders/{id}/confirm" => Scope::Confirm,
        "/v1/locks/{name}" | "/v1/locks/{name}/extend" => Scope::Locks,
        _ if method == Method::GET || method == Method::HEAD => Scope::Read,
        _ => Scope::Admin,
    }
}

/// One credential. `Debug` never shows its hash.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub name: Arc<str>,
    pub scopes: Vec<Scope>,
    hash: [u8; 32],
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

/// Shortest secret `--token` accepts.
pub const MIN_SECRET: usize = 16;

impl Token {
    /// A token with `scopes` whose secret is `secret` (the hash is kept, not the secret).
    pub fn new(name: &str, scopes: Vec<Scope>, secret: &str) -> Token {
        Token {
            name: name.into(),
            scopes,
            hash: Sha256::digest(secret.as_bytes()).into(),
        }
    }

    /// Parses `NAME:SCOPE[+SCOPE…]:SECRET`; SECRET may be `sha256:` and the 64 hex digits of
    /// the secret's SHA-256, so a config file need not hold the secret itself.
    pub fn parse(spec: &str) -> Result<Token, String> {
        let mut parts = spec.splitn(3, ':');
        let (Some(name), Some(scopes), Some(secret)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err("a token is NAME:SCOPE[+SCOPE…]:SECRET".into());
        };
        let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if name.is_empty() || name.len() > 64 || !name.chars().all(name_ok) {
            // Never echoed: with its fields misplaced, the "name" may be the secret.
            return Err("a token's name is 1 to 64 letters, digits, '-', '_' or '.'".into());
        }
        let mut list = Vec::new();
        for s in scopes.split('+') {
            let scope = Scope::parse(s).ok_or_else(|| {
                format!(
                    "token {name}: unknown scope (the scopes are admin, confirm, read and locks)"
                )
            })?;
            if !list.contains(&scope) {
                list.push(scope);
            }
        }
        let hash = match secret.strip_prefix("sha256:") {
            Some(hex_digest) => {
                let bytes = hex::decode(hex_digest).ok().filter(|b| b.len() == 32);
                let bytes = bytes.ok_or_else(|| {
                    format!("token {name}: sha256: must be followed by 64 hex digits")
                })?;
                let mut hash = [0u8; 32];
                hash.copy_from_slice(&bytes);
                hash
            }
            None if secret.chars().count() < MIN_SECRET => {
                return Err(format!(
                    "token {name}: the secret must have at least {MIN_SECRET} characters"
                ))
            }
            None if !secret.bytes().all(|b| b.is_ascii_graphic() && b != b',') => {
                return Err(format!(
                    "token {name}: the secret must be visible ASCII (no spaces or commas)"
                ))
            }
            None => Sha256::digest(secret.as_bytes()).into(),
        };
        Ok(Token {
            name: name.into(),
            scopes: list,
            hash,
        })
    }

    pub fn allows(&self, scope: Scope) -> bool {
        self.scopes.contains(&Scope::Admin) || self.scopes.contains(&scope)
    }
}

/// The valid tokens of an instance, swapped whole on a reload.
#[derive(Clone)]
pub struct Credentials(Arc<RwLock<Arc<Vec<Token>>>>);

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.read().iter()).finish()
    }
}

impl Credentials {
    /// The set `tokens`; names must be unique.
    pub fn new(tokens: Vec<Token>) -> Result<Credentials, String> {
        check_names(&tokens)?;
        Ok(Credentials(Arc::new(RwLock::new(Arc::new(tokens)))))
    }

    /// Only `secret`, with the `admin` scope, named `admin` (tests, tools).
    pub fn admin(secret: &str) -> Credentials {
        Credentials::new(vec![Token::new("admin", vec![Scope::Admin], secret)])
            .expect("one name is unique")
    }

    /// Makes `tokens` the valid set, at once for every request after this.
    pub fn replace(&self, tokens: Vec<Token>) -> Result<(), String> {
        check_names(&tokens)?;
        *self.0.write() = Arc::new(tokens);
        Ok(())
    }

    /// The names and scopes now valid.
    pub fn list(&self) -> Vec<Token> {
        self.0.read().as_ref().clone()
    }

    /// The token whose secret is `candidate`. Every token is compared, each in constant
    /// time over the 32-byte hashes, so the timing reveals neither which token matched nor
    /// any secret's length.
    pub fn find(&self, candidate: &str) -> Option<Token> {
        let got: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        let set = self.0.read().clone();
        let mut found = None;
        for t in set.iter() {
            if bool::from(t.hash.ct_eq(&got)) {
                found = Some(t.clone());
            }
        }
        found
    }

    /// The caller of a request whose `Authorization` header is `header`, if its token allows
    /// `need`: 401 without a known token, 403 naming the scope it lacks.
    pub fn authorize(&self, header: Option<&str>, need: Scope) -> Result<Token, ApiError> {
        let unauthorized = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", m);
        let header = header.ok_or_else(|| {
            unauthorized("this route needs Authorization: Bearer <token> (a token with scope admin or the route's own)")
        })?;
        let secret = header
            .strip_prefix("Bearer ")
            .ok_or_else(|| unauthorized("Authorization must be 'Bearer <token>'"))?;
        let token = self
            .find(secret)
            .ok_or_else(|| unauthorized("the token is wrong"))?;
        if token.allows(need) {
            Ok(token)
        } else {
            let has: Vec<&str> = token.scopes.iter().map(|s| s.as_str()).collect();
            Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!(
                    "token {:?} lacks the scope {:?} this route needs (it has {})",
                    token.name,
                    need.as_str(),
                    has.join("+")
                ),
            ))
        }
    }
}

/// Names are unique, and so are secrets: two tokens with one secret would give whoever holds
/// it the scopes of both.
fn check_names(tokens: &[Token]) -> Result<(), String> {
    let mut names: Vec<&str> = tokens.iter().map(|t| &*t.name).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two tokens are named {:?}", w[0]));
    }
    for (i, a) in tokens.iter().enumerate() {
        if let Some(b) = tokens[i + 1..].iter().find(|b| b.hash == a.hash) {
            return Err(format!(
                "tokens {:?} and {:?} have the same secret",
                a.name, b.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_with_their_scopes_and_bad_ones_say_why() {
        let t = Token::parse("pay:confirm+read:0123456789abcdef").unwrap();
        assert_eq!(&*t.name, "pay");
        assert_eq!(t.scopes, vec![Scope::Confirm, Scope::Read]);
        assert!(t.allows(Scope::Confirm) && !t.allows(Scope::Locks));
        let hashed = format!(
            "ops:admin:sha256:{}",
            hex::encode(Sha256::digest(b"0123456789abcdef"))
        );
        assert_eq!(Token::parse(&hashed).unwrap().hash, t.hash);
        for (bad, says) in [
            ("pay:confirm", "NAME:SCOPE"),
            (":admin:0123456789abcdef", "name is 1 to 64"),
            ("pay:write:0123456789abcdef", "unknown scope"),
            ("pay:admin:short", "at least 16"),
            ("pay:admin:sha256:abcd", "64 hex"),
            ("pay:admin:0123456789 abcdef", "visible ASCII"),
            ("pay:admin:0123456789,abcdef", "no spaces or commas"),
        ] {
            let e = Token::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn a_token_is_found_by_its_secret_and_refused_beyond_its_scopes() {
        let c = Credentials::new(vec![
            Token::parse("pay:confirm:pay-secret-0123456789").unwrap(),
            Token::parse("ops:admin:ops-secret-0123456789").unwrap(),
        ])
        .unwrap();
        let ok = c.authorize(Some("Bearer pay-secret-0123456789"), Scope::Confirm);
        assert_eq!(&*ok.unwrap().name, "pay");
        let e = c
            .authorize(Some("Bearer pay-secret-0123456789"), Scope::Admin)
            .unwrap_err();
        assert_eq!((e.status, e.code), (StatusCode::FORBIDDEN, "forbidden"));
        assert!(e.message.contains("\"admin\""), "{}", e.message);
        assert!(c
            .authorize(Some("Bearer ops-secret-0123456789"), Scope::Locks)
            .is_ok());
        let e = c.authorize(Some("Bearer nope"), Scope::Read).unwrap_err();
        assert_eq!(e.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            c.authorize(None, Scope::Read).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        // A reload replaces the set at once; duplicate names are refused.
        c.replace(vec![Token::parse("new:read:new-secret-0123456789").unwrap()])
            .unwrap();
        assert!(c.find("ops-secret-0123456789").is_none());
        assert!(c.find("new-secret-0123456789").is_some());
        let twice = vec![
            Token::parse("a:read:aaaaaaaaaaaaaaaaaa").unwrap(),
            Token::parse("a:admin:bbbbbbbbbbbbbbbbbb").unwrap(),
        ];
        assert!(c.replace(twice).unwrap_err().contains("two tokens"));
        let same = vec![
            Token::parse("a:read:aaaaaaaaaaaaaaaaaa").unwrap(),
            Token::parse("b:admin:aaaaaaaaaaaaaaaaaa").unwrap(),
        ];
        assert!(c.replace(same).unwrap_err().contains("same secret"));
        assert!(format!("{c:?}").contains("new") && !format!("{c:?}").contains("hash"));
    }

    #[test]
    fn routes_need_the_scopes_the_docs_give() {
        assert_eq!(
            required(&Method::POST, "/v1/orders/{id}/confirm"),
            Scope::Confirm
        );
        assert_eq!(required(&Method::POST, "/v1/locks/{name}"), Scope::Locks);
        assert_eq!(required(&Method::DELETE, "/v1/locks/{name}"), Scope::Locks);
        assert_eq!(required(&Method::GET, "/v1/events"), Scope::Read);
        assert_eq!(required(&Method::GET, "/metrics"), Scope::Read);
        assert_eq!(
            required(&Method::POST, "/v1/orders/{id}/cancel"),
            Scope::Admin
        );
        assert_eq!(
            required(&Method::PUT, "/v1/campaigns/{id}/limits"),
            Scope::Admin
        );
    }
}
