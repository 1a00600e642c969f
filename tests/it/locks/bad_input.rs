//! Bad input to `/v1/locks`: the documented 4xx with a JSON error, and nothing changes (no
//! fence consumed, the holder untouched).

use reqwest::Method;
use serde_json::json;

use crate::helpers::App;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lock_requests_are_refused_and_change_nothing() {
    let app = App::spawn_with(|_| {}).await;
    let post = Method::POST;
    let cases = [
        ("/v1/locks/job", json!({"ttl_ms": 0}), 400),
        ("/v1/locks/job", json!({"ttl_ms": 3_600_001}), 400),
        ("/v1/locks/job", json!({"ttl_ms": -5}), 400),
        (
            "/v1/locks/job",
            json!({"ttl_ms": 1000, "wait_ms": 60_001}),
            400,
        ),
        ("/v1/locks/job", json!({"ttl_ms": 1000, "owner": ""}), 400),
        (
            "/v1/locks/job",
            json!({"ttl_ms": 1000, "owner": "a\u{7}b"}),
            400,
        ),
        (
            "/v1/locks/job",
            json!({"ttl_ms": 1000, "colour": "red"}),
            400,
        ),
        ("/v1/locks/job", json!({}), 400),
        ("/v1/locks/bad%20name", json!({"ttl_ms": 1000}), 400),
        ("/v1/locks/caf%C3%A9", json!({"ttl_ms": 1000}), 400),
        (
            &format!("/v1/locks/{}", "n".repeat(65)),
            json!({"ttl_ms": 1000}),
            400,
        ),
        (
            "/v1/locks/job/extend",
            json!({"token": "nope", "ttl_ms": 1000}),
            409,
        ),
        (
            "/v1/locks/job/extend",
            json!({"token": "x", "ttl_ms": 0}),
            400,
        ),
        ("/v1/locks/job/extend", json!({"ttl_ms": 1000}), 400),
    ];
    for (path, body, status) in cases.iter() {
        let (s, code) = app.refusal(post.clone(), path, Some(body.clone())).await;
        assert_eq!(s, *status, "{path} {body}: {code}");
    }
    // Nothing was granted: the first grant has fence 1.
    let (s, v) = app
        .admin(
            post.clone(),
            "/v1/locks/job",
            Some(json!({"ttl_ms": 30_000, "owner": "w7"})),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["acquired"], true);
    assert_eq!(v["fence"], 1, "{v}");
    let token = v["token"].as_str().unwrap().to_owned();
    // A wrong token neither releases nor extends; the holder is untouched.
    let (s, _) = app
        .refusal(
            Method::DELETE,
            "/v1/locks/job",
            Some(json!({"token": "not-the-token"})),
        )
        .await;
    assert_eq!(s, 409);
    let (s, v) = app
        .admin(post.clone(), "/v1/locks/job", Some(json!({"ttl_ms": 1000})))
        .await;
    assert_eq!((s, v["acquired"].clone()), (200, json!(false)), "{v}");
    assert!(v["retry_after_ms"].as_u64().unwrap() > 20_000);
    // No admin token: 401.
    let anon = app
        .client
        .http()
        .post(app.client.url("/v1/locks/job"))
        .json(&json!({"ttl_ms": 1000}))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status(), 401);
    // The holder still extends and releases.
    let (s, v) = app
        .admin(
            post,
            "/v1/locks/job/extend",
            Some(json!({"token": token, "ttl_ms": 5000})),
        )
        .await;
    assert_eq!((s, v["fence"].clone()), (200, json!(1)), "{v}");
    let (s, _) = app
        .admin(
            Method::DELETE,
            "/v1/locks/job",
            Some(json!({"token": token})),
        )
        .await;
    assert_eq!(s, 200);
}
