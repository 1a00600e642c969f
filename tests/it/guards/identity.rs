//! Signed user identity: with a signing key, forged, expired, swapped-user, malformed and
//! missing tokens are all refused 401 and nothing is claimed; a valid token claims.

use reqwest::StatusCode;
use serde_json::json;

use seckill::config::ServeConfig;
use seckill::guard::identity::Identity;
use seckill::guard::secret::Secret;

use super::claim_raw;
use crate::helpers::App;

const KEY: &str = "operator-signing-key-0123456789abcdef";

fn signer(key: &str) -> Identity {
    Identity::new(Secret::new(key)).unwrap()
}

fn in_an_hour() -> i64 {
    chrono::Utc::now().timestamp() + 3600
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_a_valid_token_for_the_same_user_claims() {
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.guard.user_signing_key = Some(Secret::new(KEY));
    })
    .await;
    app.create(json!({"id": "signed", "stock": 5})).await;
    let url = app.client.url("");
    let good = signer(KEY);
    let valid_u1 = good.sign("u1", in_an_hour());
    let forged = signer("someone-elses-key-0123456789").sign("u1", in_an_hour());
    let expired = good.sign("u1", chrono::Utc::now().timestamp() - 1);
    let tampered = valid_u1.replacen(".", ".x", 1);
    let refused: Vec<(&str, Option<String>, &str)> = vec![
        ("missing", None, "u1"),
        ("forged", Some(forged), "u1"),
        ("expired", Some(expired), "u1"),
        ("swapped user", Some(valid_u1.clone()), "u2"),
        ("tampered", Some(tampered), "u1"),
        ("garbage", Some("v1.not-a-token".into()), "u1"),
        ("empty", Some(String::new()), "u1"),
    ];
    for (what, token, user) in refused {
        let headers: Vec<(&str, &str)> = token
            .as_deref()
            .map(|t| vec![("x-seckill-user", t)])
            .unwrap_or_default();
        let (s, _, v) = claim_raw(&url, "signed", json!({"user_id": user}), &headers).await;
        assert_eq!(s, StatusCode::UNAUTHORIZED, "{what}: {v}");
        assert_eq!(v["error"]["code"], "unauthorized", "{what}");
    }
    // A header that is not even text.
    let resp = reqwest::Client::new()
        .post(format!("{url}/v1/campaigns/signed/claims"))
        .header(
            "x-seckill-user",
            reqwest::header::HeaderValue::from_bytes(b"v1.\xff").unwrap(),
        )
        .json(&json!({"user_id": "u1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    // Nothing was claimed by any of them.
    assert_eq!(app.client.campaign("signed").await.unwrap().remaining, 5);
    assert!(app.client.all_orders("signed").await.unwrap().is_empty());
    // The genuine article claims.
    let (s, _, v) = claim_raw(
        &url,
        "signed",
        json!({"user_id": "u1"}),
        &[("x-seckill-user", &valid_u1)],
    )
    .await;
    assert_eq!((s, v["outcome"].as_str()), (StatusCode::OK, Some("won")));
    app.stop().await;
}

/// `seckill sign-user` mints tokens the service accepts (and user ids it would refuse fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sign_user_command_mints_accepted_tokens() {
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.guard.user_signing_key = Some(Secret::new(KEY));
    })
    .await;
    app.create(json!({"id": "cli", "stock": 1})).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["sign-user", "--user", "user-7", "--ttl", "60"])
        .env("SECKILL_USER_SIGNING_KEY", KEY)
        .output()
        .unwrap();
    assert!(out.status.success());
    let token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let (s, _, v) = claim_raw(
        &app.client.url(""),
        "cli",
        json!({"user_id": "user-7"}),
        &[("x-seckill-user", &token)],
    )
    .await;
    assert_eq!((s, v["outcome"].as_str()), (StatusCode::OK, Some("won")));
    let bad = std::process::Command::new(env!("CARGO_BIN_EXE_seckill"))
        .args(["sign-user", "--user", "", "--key", KEY])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    app.stop().await;
}
