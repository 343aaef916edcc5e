use fdsync_core::sync::RunStatus;
use fdsync_emulator::{Account, Credits, HeaderForm, PlanLimits, QuotaPeriod, keys::MAX_ACTIVE_KEYS};
use reqwest::StatusCode;
use serde_json::Value;

use crate::util::{Harness, TEST_KEY, UNIVERSE, emulator_config, frozen_clock, spawn, start_time};

async fn send(req: reqwest::RequestBuilder) -> (StatusCode, reqwest::header::HeaderMap, Value) {
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status(), r.headers().clone());
    (status, headers, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn keys_are_created_rotated_and_revoked_through_the_admin_interface() {
    let clock = frozen_clock();
    let emu = spawn(emulator_config(&clock, PlanLimits::build())).await;
    let (admin_addr, _admin) = fdsync_emulator::serve(
        emu.emulator.admin_router(),
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let admin = format!("http://{admin_addr}/admin");
    let http = reqwest::Client::new();
    let data = |key: &str| {
        http.get(format!("{}/api/v1/indices", emu.base_url()))
            .header("X-API-KEY", key.to_owned())
    };

    // The admin interface is not on the public listener.
    let (s, _, _) = send(
        http.post(format!("{}/admin/accounts/test/keys", emu.base_url()))
            .header("X-API-KEY", TEST_KEY),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    let (s, _, created) = send(http.post(format!("{admin}/accounts/test/keys"))).await;
    assert_eq!(s, StatusCode::CREATED);
    let new_key = created["key"].as_str().unwrap().to_owned();
    assert!(new_key.starts_with("pk_live_"));
    assert_eq!(send(data(&new_key)).await.0, StatusCode::OK);

    // Rotation: the replacement works at once; the old key until the revoke delay passes.
    let id = created["id"].as_str().unwrap();
    let (s, _, rotated) = send(http.post(format!("{admin}/keys/{id}/rotate"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(rotated["replaces"]["id"], id);
    assert_eq!(rotated["replaces"]["state"], "revoking");
    let rotated_key = rotated["key"].as_str().unwrap().to_owned();
    assert_ne!(rotated_key, new_key);
    assert_eq!(send(data(&rotated_key)).await.0, StatusCode::OK);
    assert_eq!(
        send(data(&new_key)).await.0,
        StatusCode::OK,
        "still inside the revoke delay"
    );
    let (s, _, _) = send(http.post(format!("{admin}/clock/advance?secs=59"))).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(send(data(&new_key)).await.0, StatusCode::OK);
    send(http.post(format!("{admin}/clock/advance?secs=1"))).await;
    let (s, _, body) = send(data(&new_key)).await;
    assert_eq!(
        (s, body["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
    assert_eq!(send(data(&rotated_key)).await.0, StatusCode::OK);
    // Revocation is permanent.
    let (s, _, _) = send(http.post(format!("{admin}/keys/{id}/revoke"))).await;
    assert_eq!(s, StatusCode::CONFLICT);

    // A settable delay: zero revokes at once.
    let (s, _, _) = send(http.put(format!("{admin}/revoke-delay?secs=0"))).await;
    assert_eq!(s, StatusCode::NO_CONTENT);
    let rotated_id = rotated["id"].as_str().unwrap();
    let (s, _, revoked) = send(http.post(format!("{admin}/keys/{rotated_id}/revoke"))).await;
    assert_eq!((s, revoked["state"].as_str()), (StatusCode::OK, Some("revoked")));
    assert_eq!(send(data(&rotated_key)).await.0, StatusCode::UNAUTHORIZED);

    // At most ten active keys: TEST_KEY is one of them.
    for _ in 1..MAX_ACTIVE_KEYS {
        assert_eq!(
            send(http.post(format!("{admin}/accounts/test/keys"))).await.0,
            StatusCode::CREATED
        );
    }
    let (s, _, body) = send(http.post(format!("{admin}/accounts/test/keys"))).await;
    assert_eq!(s, StatusCode::CONFLICT);
    assert!(body["error"].as_str().unwrap().contains("10 active keys"), "{body}");
    assert_eq!(
        send(http.post(format!("{admin}/accounts/nobody/keys"))).await.0,
        StatusCode::NOT_FOUND
    );

    // The account's view lists keys by id and prefix, never a secret.
    let listing = http
        .get(format!("{admin}/accounts"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for secret in [TEST_KEY, &new_key, &rotated_key] {
        assert!(!listing.contains(secret), "{secret} listed");
    }
    let listing: Value = serde_json::from_str(&listing).unwrap();
    let keys = listing["accounts"][0]["keys"].as_array().unwrap();
    assert_eq!(keys.iter().filter(|k| k["state"] == "active").count(), MAX_ACTIVE_KEYS);

    // A data key still cannot touch the account.
    assert_eq!(
        send(
            http.get(format!("{}/api/v1/keys", emu.base_url()))
                .header("X-API-KEY", TEST_KEY)
        )
        .await
        .0,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn prepaid_credits_pay_past_the_quota_and_say_so() {
    let clock = frozen_clock();
    let mut config = emulator_config(&clock, PlanLimits::free());
    config.accounts = vec![
        Account::new(
            "prepaid",
            PlanLimits::scale(100, Some((QuotaPeriod::Month, 2))),
            vec![TEST_KEY.into()],
        )
        .with_credits(Credits {
            balance_micros: 30_000,
            price_micros_per_request: 10_000,
        }),
    ];
    let emu = spawn(config).await;
    let http = reqwest::Client::new();
    let url = format!("{}/api/v1/indices", emu.base_url());
    let mut seen = Vec::new();
    for _ in 0..6 {
        let (s, h, body) = send(http.get(&url).header("X-API-KEY", TEST_KEY)).await;
        seen.push((
            s.as_u16(),
            h["x-quota-remaining"].to_str().unwrap().to_owned(),
            h.get("x-billing-source").map(|v| v.to_str().unwrap().to_owned()),
            h.get("x-credits-remaining-usd").map(|v| v.to_str().unwrap().to_owned()),
            body["code"].as_str().map(str::to_owned),
        ));
    }
    let credits = |usd: &str| (Some("credits".to_owned()), Some(usd.to_owned()));
    assert_eq!(seen[0].0, 200);
    assert_eq!(
        (seen[0].2.clone(), seen[0].3.clone()),
        (None, None),
        "the plan pays first"
    );
    assert_eq!((seen[1].0, seen[1].1.as_str()), (200, "0"));
    for (i, usd) in [(2, "0.02"), (3, "0.01"), (4, "0.00")] {
        assert_eq!(seen[i].0, 200, "{:?}", seen[i]);
        assert_eq!((seen[i].2.clone(), seen[i].3.clone()), credits(usd));
    }
    assert_eq!((seen[5].0, seen[5].4.as_deref()), (429, Some("quota_exceeded")));
}

#[tokio::test]
async fn oauth_metadata_is_public_and_the_mcp_endpoint_points_at_it() {
    let emu = spawn(emulator_config(&frozen_clock(), PlanLimits::free())).await;
    let http = reqwest::Client::new();
    let (s, _, meta) = send(http.get(format!(
        "{}/.well-known/oauth-protected-resource/api/mcp",
        emu.base_url()
    )))
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(meta["resource"], format!("{}/api/mcp", emu.base_url()));
    assert!(meta["authorization_servers"][0].is_string());
    let (s, h, _) = send(http.post(format!("{}/api/mcp", emu.base_url()))).await;
    assert_eq!(s, StatusCode::UNAUTHORIZED);
    let challenge = h["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.contains("/.well-known/oauth-protected-resource/api/mcp"),
        "{challenge}"
    );
}

/// The client paces from the IETF structured headers alone, as it does from the legacy trio.
#[tokio::test]
async fn a_sync_paced_by_ietf_headers_alone_sends_no_429() {
    let mut config = emulator_config(&frozen_clock(), PlanLimits::scale(3, None));
    config.header_form = HeaderForm::Ietf;
    let h = Harness::with_emulator(config, UNIVERSE).await;
    // The emulator really sends only the IETF form.
    let r = reqwest::Client::new()
        .get(format!("{}/api/v1/indices", h.emulator.base_url()))
        .header("X-API-KEY", TEST_KEY)
        .send()
        .await
        .unwrap();
    assert!(r.headers().get("ratelimit-limit").is_none());
    assert_eq!(r.headers()["ratelimit-policy"], "\"minute\";q=3;w=60");
    assert_eq!(r.headers()["ratelimit"], "\"minute\";r=2;t=60");

    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    let stats = h.emulator.emulator.stats();
    assert_eq!(stats.rate_limited, 0, "the client caused a 429: {stats:?}");
    assert!(h.clock.now() - start_time() >= chrono::Duration::minutes(5));
}

/// An OAuth access token (spec section 5) stands in for the key: read from
/// the file a token helper keeps fresh and read again when it changes. A JWT
/// past its `exp` is not sent: once the helper stops, the run waits for the
/// file a bounded time, then exits 2 saying the token expired. An opaque
/// token cannot say so itself; the service's 401 is then named as the
/// token's, with what could not be told.
#[tokio::test]
async fn a_sync_runs_on_an_oauth_access_token_and_an_expired_one_exits_2_saying_so() {
    use fdsync_core::config::CredentialKind;
    use fdsync_emulator::keys::TokenShape;

    let mut h = Harness::new(PlanLimits::build(), &["MSFT", "AAPL"]).await;
    let hour = chrono::Duration::hours(1);
    let token_file = h._tempdir.path().join("access_token");
    let issued = h.emulator.emulator.issue_token("test", hour, TokenShape::Jwt).unwrap();
    std::fs::write(&token_file, format!("{}\n", issued.access_token)).unwrap();
    h.restart(|c| {
        c.upstream.credential = CredentialKind::Oauth;
        c.upstream.access_token_file = Some(token_file.clone());
    })
    .await;
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    assert_eq!(h.int("SELECT count(*) FROM companies").await, 2);
    assert!(h.int("SELECT count(*) FROM prices_daily").await > 0);

    // The helper renews the token before it expires: the new one is read
    // from the changed file, and nothing is refused.
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(50 * 60));
    let renewed = h.emulator.emulator.issue_token("test", hour, TokenShape::Jwt).unwrap();
    std::fs::write(&token_file, format!("{}\n", renewed.access_token)).unwrap();
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(20 * 60));
    let (_, result) = h.syncer.run_once(&h.only(&["indices"])).await;
    result.unwrap();
    assert_eq!(h.emulator.emulator.stats().by_status.get(&401), None);

    // The helper stopped: past the token's exp nothing is sent; the file is
    // watched 90 s, then the run exits 2, saying the token expired.
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(2 * 3600));
    let requests_before = h.emulator.emulator.stats().requests;
    let (_, result) = h.syncer.run_once(&h.only(&["indices"])).await;
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("OAuth access token was not sent") && message.contains("expired at"),
        "{message}"
    );
    assert!(message.contains(&token_file.display().to_string()), "{message}");
    assert!(!message.contains(&renewed.access_token), "the token never in a message");
    assert_eq!(
        h.emulator.emulator.stats().requests,
        requests_before,
        "a token known to have expired is not sent"
    );

    // An opaque token, expired: the service's 401 says so, and fdsync says
    // it cannot tell expiry from the token itself.
    let opaque = h
        .emulator
        .emulator
        .issue_token("test", hour, TokenShape::Opaque)
        .unwrap();
    std::fs::write(&token_file, format!("{}\n", opaque.access_token)).unwrap();
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(2 * 3600));
    h.restart(|_| {}).await;
    let (_, result) = h.syncer.run_once(&h.only(&["indices"])).await;
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("refused the OAuth access token")
            && message.contains("access token expired")
            && message.contains("opaque"),
        "{message}"
    );
    assert_eq!(h.emulator.emulator.stats().by_status.get(&401), Some(&1));
}
