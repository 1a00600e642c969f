//! The bad-input table: one row per way a request can be wrong, with the status and error
//! code the contract gives it.

use reqwest::Method;
use serde_json::json;

use super::{case, claim, create, Auth, Case, Payload};

pub(super) fn cases() -> Vec<Case> {
    let long = |n: usize| "x".repeat(n);
    let mut v = vec![
        case(
            "malformed JSON",
            Method::POST,
            "/v1/campaigns",
            Payload::Raw("{\"id\":", Some("application/json")),
            400,
            "invalid_request",
        ),
        case(
            "no content type",
            Method::POST,
            "/v1/campaigns",
            Payload::Raw("{\"id\":\"n\",\"stock\":1}", None),
            400,
            "invalid_request",
        ),
        case(
            "empty body",
            Method::POST,
            "/v1/campaigns",
            Payload::Empty,
            400,
            "invalid_request",
        ),
        create("stock as string", json!({"id": "n", "stock": "10"})),
        create("stock 0", json!({"id": "n", "stock": 0})),
        create(
            "stock too big",
            json!({"id": "n", "stock": 1_000_000_001u64}),
        ),
        create("negative stock", json!({"id": "n", "stock": -5})),
        create(
            "stock and codes",
            json!({"id": "n", "stock": 1, "codes": ["a"]}),
        ),
        create("neither stock nor codes", json!({"id": "n"})),
        create("empty id", json!({"id": "", "stock": 1})),
        create("id too long", json!({"id": long(65), "stock": 1})),
        create("id with space", json!({"id": "a b", "stock": 1})),
        create("id with slash", json!({"id": "a/b", "stock": 1})),
        create("empty code list", json!({"id": "n", "codes": []})),
        create(
            "duplicate codes",
            json!({"id": "n", "codes": ["a", "b", "a"]}),
        ),
        create("empty code", json!({"id": "n", "codes": ["a", ""]})),
        create("code too long", json!({"id": "n", "codes": [long(129)]})),
        create(
            "per_user_limit 0",
            json!({"id": "n", "stock": 1, "per_user_limit": 0}),
        ),
        create(
            "per_user_limit huge",
            json!({"id": "n", "stock": 1, "per_user_limit": 1_000_001}),
        ),
        create(
            "window backwards",
            json!({"id": "n", "stock": 1, "starts_at": "2026-11-11T00:00:00Z", "ends_at": "2026-11-10T00:00:00Z"}),
        ),
        create(
            "bad timestamp",
            json!({"id": "n", "stock": 1, "starts_at": "tomorrow"}),
        ),
        create(
            "unknown field",
            json!({"id": "n", "stock": 1, "per_user_limt": 2}),
        ),
        case(
            "duplicate id",
            Method::POST,
            "/v1/campaigns",
            Payload::Json(json!({"id": "shop", "stock": 1})),
            409,
            "conflict",
        ),
        claim("qty 0", json!({"user_id": "u1", "qty": 0})),
        claim("qty too big", json!({"user_id": "u1", "qty": 1_000_001})),
        claim("qty negative", json!({"user_id": "u1", "qty": -1})),
        claim("qty fractional", json!({"user_id": "u1", "qty": 1.5})),
        claim("qty as string", json!({"user_id": "u1", "qty": "1"})),
        claim("qty null", json!({"user_id": "u1", "qty": null})),
        claim("missing user_id", json!({"qty": 1})),
        claim("empty user_id", json!({"user_id": ""})),
        claim("user_id too long", json!({"user_id": long(129)})),
        claim("user_id with newline", json!({"user_id": "u\n1"})),
        claim("user_id with NUL", json!({"user_id": "u\u{0}1"})),
        claim("user_id as number", json!({"user_id": 101})),
        claim("body is an array", json!([{"user_id": "u1"}])),
        claim(
            "unknown claim field",
            json!({"user_id": "u1", "quantity": 2}),
        ),
        case(
            "claim body too large",
            Method::POST,
            "/v1/campaigns/shop/claims",
            Payload::Big(64 * 1024),
            413,
            "payload_too_large",
        ),
        case(
            "claim on unknown campaign",
            Method::POST,
            "/v1/campaigns/nope/claims",
            Payload::Json(json!({"user_id": "u1"})),
            404,
            "not_found",
        ),
        case(
            "claim on invalid campaign id",
            Method::POST,
            "/v1/campaigns/%20/claims",
            Payload::Json(json!({"user_id": "u1"})),
            404,
            "not_found",
        ),
        case(
            "get unknown campaign",
            Method::GET,
            "/v1/campaigns/nope",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "restock wrong kind",
            Method::POST,
            "/v1/campaigns/shop/restock",
            Payload::Json(json!({"codes": ["z"]})),
            400,
            "invalid_request",
        ),
        case(
            "restock code campaign with units",
            Method::POST,
            "/v1/campaigns/pool/restock",
            Payload::Json(json!({"units": 1})),
            400,
            "invalid_request",
        ),
        case(
            "restock existing code",
            Method::POST,
            "/v1/campaigns/pool/restock",
            Payload::Json(json!({"codes": ["new", "C1"]})),
            409,
            "conflict",
        ),
        case(
            "restock duplicate codes",
            Method::POST,
            "/v1/campaigns/pool/restock",
            Payload::Json(json!({"codes": ["n1", "n1"]})),
            400,
            "invalid_request",
        ),
        case(
            "restock 0 units",
            Method::POST,
            "/v1/campaigns/shop/restock",
            Payload::Json(json!({"units": 0})),
            400,
            "invalid_request",
        ),
        case(
            "restock unknown campaign",
            Method::POST,
            "/v1/campaigns/nope/restock",
            Payload::Json(json!({"units": 1})),
            404,
            "not_found",
        ),
        case(
            "pause unknown campaign",
            Method::POST,
            "/v1/campaigns/nope/pause",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "orders limit 0",
            Method::GET,
            "/v1/campaigns/shop/orders?limit=0",
            Payload::Empty,
            400,
            "invalid_request",
        ),
        case(
            "orders limit not a number",
            Method::GET,
            "/v1/campaigns/shop/orders?limit=ten",
            Payload::Empty,
            400,
            "invalid_request",
        ),
        case(
            "orders bad cursor",
            Method::GET,
            "/v1/campaigns/shop/orders?cursor=zzz",
            Payload::Empty,
            400,
            "invalid_request",
        ),
        case(
            "orders unknown parameter",
            Method::GET,
            "/v1/campaigns/shop/orders?page=2",
            Payload::Empty,
            400,
            "invalid_request",
        ),
        case(
            "unknown order",
            Method::GET,
            "/v1/orders/shop-999",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "malformed order id",
            Method::GET,
            "/v1/orders/garbage",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "cancel unknown order",
            Method::POST,
            "/v1/orders/shop-999/cancel",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "unknown route",
            Method::GET,
            "/v2/anything",
            Payload::Empty,
            404,
            "not_found",
        ),
        case(
            "wrong method",
            Method::DELETE,
            "/v1/campaigns/shop",
            Payload::Empty,
            405,
            "invalid_request",
        ),
    ];
    let mut idem_long = claim("Idempotency-Key too long", json!({"user_id": "u1"}));
    idem_long.idem = Some("k".repeat(256));
    v.push(idem_long);
    let mut idem_empty = claim("Idempotency-Key empty", json!({"user_id": "u1"}));
    idem_empty.idem = Some(String::new());
    v.push(idem_empty);
    for (what, auth) in [
        ("no token", Auth::None),
        ("wrong token", Auth::Raw("Bearer wrong")),
        ("not bearer", Auth::Raw("Basic dGVzdA==")),
    ] {
        for (method, path, body) in [
            (
                Method::POST,
                "/v1/campaigns",
                Payload::Json(json!({"id": "sneaky", "stock": 1})),
            ),
            (
                Method::POST,
                "/v1/campaigns/shop/restock",
                Payload::Json(json!({"units": 5})),
            ),
            (Method::POST, "/v1/campaigns/shop/close", Payload::Empty),
            (Method::GET, "/v1/campaigns/shop/orders", Payload::Empty),
            (Method::GET, "/v1/orders/shop-1", Payload::Empty),
            (Method::POST, "/v1/orders/shop-1/cancel", Payload::Empty),
        ] {
            let mut c = case(what, method, path, body, 401, "unauthorized");
            c.auth = match auth {
                Auth::Raw(h) => Auth::Raw(h),
                _ => Auth::None,
            };
            v.push(c);
        }
    }
    v
}
