//! The scale-out rate limiter fails open: when its Redis script errors, the claim is let
//! through to the gate (which still enforces stock and per-user limits) instead of failing.

use reqwest::StatusCode;
use serde_json::json;

use super::guards::put_limits_everywhere;
use super::procs::Seckill;
use crate::guards::claim_raw;
use crate::servers::{pg, redis_raw, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn limiter_errors_let_claims_through_to_the_gate() {
    let redis = RedisServer::start(&[]);
    let postgres = pg().fresh_db().await;
    let server = Seckill::serve(&[redis.url()], &postgres, &[]);
    let c = server.client();
    c.create_campaign(&json!({"id": "open", "stock": 100, "per_user_limit": 3}))
        .await
        .unwrap();
    put_limits_everywhere(&c, &c, "open", json!({"per_user": "1/h"})).await;
    let base = c.url("");
    let claim = |user: &'static str| claim_raw(&base, "open", json!({"user_id": user}), &[]);

    // The limit works: a second claim within the hour is refused.
    assert_eq!(claim("control").await.0, StatusCode::OK);
    assert_eq!(claim("control").await.0, StatusCode::TOO_MANY_REQUESTS);

    // The victim's bucket key holds a hash, so `GET` in ratelimit.lua fails with WRONGTYPE
    // on every request of theirs: the limiter errors and lets them through.
    let key = "{rl}:c4:open:u6:victim";
    let set = redis_raw(redis.port, &format!("HSET {key} broken 1")).unwrap();
    assert!(set.starts_with(':'), "HSET answered {set:?}");
    for n in 1..=3 {
        let (s, _, body) = claim("victim").await;
        assert_eq!(s, StatusCode::OK, "claim {n}: {body}");
        assert_eq!(body["outcome"], "won", "claim {n}: {body}");
    }
    // The gate still holds the per-user limit the limiter could not.
    let (s, _, body) = claim("victim").await;
    assert_eq!(s, StatusCode::OK, "{body}");
    assert_eq!(body["outcome"], "already_claimed", "{body}");
    let kind = redis_raw(redis.port, &format!("TYPE {key}")).unwrap();
    assert!(kind.starts_with("+hash"), "the broken key was left alone");
}
