//! Admin security: a separate admin listener, and secrets that never reach logs or `Debug`.

use reqwest::StatusCode;
use serde_json::json;

use seckill::bench::client::Client;
use seckill::config::ServeConfig;
use seckill::guard::secret::Secret;

use super::{claim_as, ServerProc};
use crate::helpers::{App, TOKEN};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn admin_routes_live_only_on_the_admin_listener() {
    let app = App::spawn_with(|c: &mut ServeConfig| {
        c.admin_listen = Some(([127, 0, 0, 1], 0).into());
    })
    .await;
    let public = app.client.url("");
    let admin = Client::new(&app.admin_url(), TOKEN);
    assert_ne!(public, admin.url(""));
    // On the public listener the admin routes do not exist, token or not.
    let (s, v) = app
        .client
        .admin(
            reqwest::Method::POST,
            "/v1/campaigns",
            Some(&json!({"id": "x", "stock": 1})),
        )
        .await
        .unwrap();
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    for path in ["/metrics", "/v1/orders/x-1", "/v1/campaigns/x/orders"] {
        let (s, _) = app
            .client
            .admin(reqwest::Method::GET, path, None)
            .await
            .unwrap();
        assert_eq!(s, StatusCode::NOT_FOUND, "{path} on the public listener");
    }
    // On the admin listener they work; claims stay public.
    admin
        .create_campaign(&json!({"id": "x", "stock": 1}))
        .await
        .unwrap();
    let (s, v) = claim_as(&public, "x", "u1").await;
    assert_eq!((s, v["outcome"].as_str()), (StatusCode::OK, Some("won")));
    assert_eq!(admin.campaign("x").await.unwrap().remaining, 0);
    assert_eq!(admin.all_orders("x").await.unwrap().len(), 1);
    let (s, _) = admin
        .admin(reqwest::Method::GET, "/metrics", None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::OK);
    for base in [public.clone(), admin.url("")] {
        let r = reqwest::get(format!("{base}/healthz")).await.unwrap();
        assert_eq!(r.status(), 200);
    }
    // A wrong token is still 401 on the admin listener.
    let wrong = Client::new(&admin.url(""), "not-the-token");
    let (s, _) = wrong
        .admin(reqwest::Method::GET, "/metrics", None)
        .await
        .unwrap();
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    app.stop().await;
}

#[test]
fn settings_debug_never_shows_secrets() {
    let mut cfg = ServeConfig::ephemeral("/tmp/x".into(), "admin-token-do-not-print");
    cfg.guard.user_signing_key = Some(Secret::new("signing-key-do-not-print"));
    for shown in [format!("{cfg:?}"), format!("{:?}", cfg.guard.settings())] {
        assert!(!shown.contains("do-not-print"), "{shown}");
        assert!(shown.contains("redacted"));
    }
}

/// The real binary, logging at debug level through a claim and an admin call, never logs the
/// admin token, the signing key or an identity token.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_never_reach_the_log() {
    let key = "signing-key-never-logged-0123456789";
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProc::start(dir.path(), &["--user-signing-key", key], "debug");
    let client = Client::new(&server.url, TOKEN);
    client
        .create_campaign(&json!({"id": "quiet", "stock": 1}))
        .await
        .unwrap();
    let token = seckill::guard::identity::Identity::new(Secret::new(key))
        .unwrap()
        .sign("u1", chrono::Utc::now().timestamp() + 60);
    let (s, _, _) = super::claim_raw(
        &server.url,
        "quiet",
        json!({"user_id": "u1"}),
        &[("x-seckill-user", &token)],
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let log = server.stop();
    assert!(log.contains("guards ready"), "{log}");
    for secret in [TOKEN, key, token.as_str()] {
        assert!(!log.contains(secret), "{secret:?} appears in the log");
    }
}
