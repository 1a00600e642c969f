//! Properties of the small parsers: rates, identity tokens, client IPs, order ids, cursors,
//! Idempotency-Keys, stream entries and ledger answers read back.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};

use super::split;
use crate::domain::{parse_order_id, CampaignLimits, IdempotencyKey, OrderQuery, Rate};
use crate::guard::client_ip::{ClientIpPolicy, TrustedProxy};
use crate::guard::identity::{Identity, IdentityError};
use crate::guard::secret::Secret;
use crate::pipeline::entry::Entry;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Rate syntax (`--rate-per-user`, `PUT …/limits`): a parsed rate has a non-zero period and
/// emission interval, count and burst within bounds, and prints to text that parses back to
/// it; a limits body that parses serializes to JSON that parses back to it.
pub fn rate(data: &[u8]) {
    let s = text(data);
    if let Ok(r) = s.parse::<Rate>() {
        assert!(!r.period.is_zero(), "{s:?} parsed to a zero period");
        assert!(
            r.emission_interval() > Duration::ZERO,
            "{s:?}: zero interval"
        );
        assert!(
            (1..=crate::domain::MAX_RATE_COUNT).contains(&r.count),
            "{s:?}: {r:?}"
        );
        assert!(
            (1..=crate::domain::MAX_RATE_COUNT).contains(&r.burst),
            "{s:?}: {r:?}"
        );
        let printed = r.to_string();
        assert_eq!(
            printed.parse::<Rate>().ok(),
            Some(r),
            "{s:?} printed as {printed:?}"
        );
    }
    if let Ok(l) = serde_json::from_slice::<CampaignLimits>(data) {
        let json = serde_json::to_string(&l).expect("limits serialize");
        let back: CampaignLimits = serde_json::from_str(&json).expect("printed limits parse");
        assert_eq!(back, l, "limits {json}");
    }
}

fn key(fill: u8) -> Identity {
    Identity::new(Secret::new(&String::from(fill as char).repeat(32)))
        .expect("a 32-byte key is accepted")
}

/// `X-Seckill-User` tokens: arbitrary bytes never verify; a token signed for any user verifies
/// with its key only, proves exactly that user, expires at its expiry, and no single-byte
/// change of it verifies.
pub fn identity(data: &[u8]) {
    let (k, user, rest) = split(data);
    let (mine, other) = (key(b'a'), key(b'b'));
    let now = 1_700_000_000;
    let raw = text(data);
    assert!(mine.verify(&raw, now).is_err(), "{raw:?} verified");
    let user = text(user);
    let expiry = now + 1 + i64::from(k);
    let token = mine.sign(&user, expiry);
    assert_eq!(mine.verify(&token, now), Ok(user.clone()), "{token}");
    assert_eq!(mine.check(Some(&token), &user, now), Ok(()));
    assert_eq!(other.verify(&token, now), Err(IdentityError::BadSignature));
    assert_eq!(mine.verify(&token, expiry), Err(IdentityError::Expired));
    let mut bytes = token.clone().into_bytes();
    let at = rest.first().map_or(0, |&b| b as usize) % bytes.len();
    let with = rest.get(1).copied().unwrap_or(b'A');
    if bytes[at] != with {
        bytes[at] = with;
        let changed = text(&bytes);
        assert!(
            mine.verify(&changed, now).is_err(),
            "{changed:?} (from {token:?}) verified"
        );
    }
}

/// Proxy headers: an untrusted peer is its own client whatever the header says; behind a
/// trusted proxy the client is the peer or an address the header names, never a trusted one
/// unless every hop is; an IPv6 client is keyed by its /64.
pub fn client_ip(data: &[u8]) {
    let (sel, header, cidr) = split(data);
    let cidr = text(cidr);
    if let Ok(t) = cidr.parse::<TrustedProxy>() {
        assert_eq!(t.0.to_string().parse::<TrustedProxy>(), Ok(t), "{cidr:?}");
    }
    let trusted: Vec<TrustedProxy> = ["10.0.0.0/8", "::1", "fd00::/8"]
        .iter()
        .map(|s| s.parse().expect("static CIDR"))
        .collect();
    let policy = ClientIpPolicy::new(&trusted, "X-Forwarded-For").expect("static header");
    let peers: [IpAddr; 4] = [
        "10.1.2.3".parse().unwrap(),
        "::1".parse().unwrap(),
        "203.0.113.9".parse().unwrap(),
        "::ffff:10.0.0.1".parse().unwrap(),
    ];
    let peer = peers[sel as usize % peers.len()];
    let mut headers = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_bytes(header) {
        headers.append("x-forwarded-for", v);
    }
    let got = policy.resolve(peer, &headers);
    let bucket = |ip: IpAddr| match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        v4 => v4,
    };
    if let IpAddr::V6(v6) = got {
        assert_eq!(
            u128::from(v6) & ((1u128 << 64) - 1),
            0,
            "{got} is not a /64"
        );
    }
    let is_trusted = |ip: IpAddr| trusted.iter().any(|t| t.0.contains(&ip.to_canonical()));
    if !is_trusted(peer) {
        assert_eq!(got, bucket(peer), "untrusted peer {peer} moved to {got}");
        return;
    }
    let named: Vec<IpAddr> = text(header)
        .split(',')
        .filter_map(|h| h.trim().parse::<IpAddr>().ok())
        .collect();
    assert!(
        got == bucket(peer) || named.iter().any(|&ip| bucket(ip) == got),
        "{got} is neither the peer {peer} nor named in {:?}",
        text(header)
    );
}

/// Order ids (`GET /v1/orders/{id}`): only the canonical `<campaign>-<seq>` spelling parses,
/// so printing the parts gives the input back.
pub fn order_id(data: &[u8]) {
    let s = text(data);
    if let Ok((campaign, seq)) = parse_order_id(&s) {
        assert!(seq >= 1 && seq <= i64::MAX as u64, "{s:?}: seq {seq}");
        assert_eq!(format!("{campaign}-{seq}"), s, "not canonical");
    }
}

/// Order-list queries: a cursor that is accepted is the decimal a page could have issued,
/// the limit is within bounds, and a whole query string never panics the extractor.
pub fn cursor(data: &[u8]) {
    let s = text(data);
    let q = OrderQuery {
        cursor: Some(s.clone()),
        ..OrderQuery::default()
    };
    if let Ok((after, _)) = q.resolve() {
        assert!(
            s.is_empty() || after.to_string() == s,
            "{s:?} read as {after}"
        );
    }
    let uri = format!("/v1/campaigns/c/orders?{s}");
    if let Ok(uri) = uri.parse::<axum::http::Uri>() {
        if let Ok(q) = axum::extract::Query::<OrderQuery>::try_from_uri(&uri) {
            if let Ok((_, limit)) = q.resolve() {
                assert!(
                    (1..=OrderQuery::MAX_LIMIT).contains(&limit),
                    "limit {limit}"
                );
            }
        }
    }
}

/// `Idempotency-Key`: an accepted key is 1–255 visible ASCII characters or spaces, kept as sent.
pub fn idempotency_key(data: &[u8]) {
    let Ok(v) = HeaderValue::from_bytes(data) else {
        return;
    };
    let Ok(s) = v.to_str() else { return };
    if let Ok(k) = IdempotencyKey::new(s) {
        assert_eq!(k.as_str(), s);
        assert!((1..=255).contains(&s.len()), "key of {} bytes", s.len());
        assert!(
            s.bytes().all(|b| b == b' ' || b.is_ascii_graphic()),
            "{s:?}"
        );
    }
}

/// Stream entries read back from Redis: an entry that parses names an order of its own
/// campaign with qty ≥ 1, and the fields the claim script would write for that order parse
/// back to the same order; the poison record of any entry is JSON.
pub fn stream_entry(data: &[u8]) {
    let (sel, campaign, rest) = split(data);
    let mut fields = HashMap::new();
    let mut parts = rest.split(|&b| b == 0);
    while let (Some(name), Some(value)) = (parts.next(), parts.next()) {
        let value = match sel % 3 {
            0 => redis::Value::BulkString(value.to_vec()),
            1 => redis::Value::SimpleString(text(value)),
            _ => text(value)
                .parse()
                .map_or(redis::Value::Nil, redis::Value::Int),
        };
        fields.insert(text(name), value);
    }
    let entry = Entry::new(text(campaign), "1-0".into(), fields);
    serde_json::from_str::<serde_json::Value>(&entry.payload()).expect("payload is JSON");
    let _ = entry.write();
    assert!(entry.orders_carried() >= 1);
    for one in entry.clone().expand() {
        assert_eq!(
            one.key(),
            entry.key(),
            "an expanded order keeps its entry's id"
        );
        let _ = one.write();
    }
    let Ok(order) = entry.order() else { return };
    assert!(order.qty >= 1);
    let (c, _) = parse_order_id(&order.order_id).expect("an accepted order id parses");
    assert_eq!(c, entry.campaign_id);
    let mut again = vec![
        ("order_id", order.order_id.clone()),
        ("user", order.user_id.clone()),
        ("qty", order.qty.to_string()),
        ("at", order.created_at.timestamp_micros().to_string()),
    ];
    if let Some(codes) = &order.codes {
        again.push(("codes", codes.join("\n")));
    }
    if let Some(pay_by) = order.pay_by {
        again.push(("pay_by", pay_by.timestamp_micros().to_string()));
    }
    let rewritten = Entry::new(
        entry.campaign_id.clone(),
        entry.stream_id.clone(),
        again
            .into_iter()
            .map(|(k, v)| (k.to_owned(), redis::Value::BulkString(v.into_bytes())))
            .collect(),
    );
    assert_eq!(rewritten.order().ok(), Some(order), "stream round trip");
}

/// Idempotency answers read back from the ledger: one that parses prints to JSON that parses
/// back to the same answer.
pub fn ledger_answer(data: &[u8]) {
    let s = text(data);
    if let Ok(a) = crate::ledger::rows::parse_answer(&s) {
        let json = crate::ledger::rows::answer_json(&a);
        let back = crate::ledger::rows::parse_answer(&json).expect("a printed answer parses");
        assert_eq!(back, a, "{json}");
    }
}
