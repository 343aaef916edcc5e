use chrono::{DateTime, Utc};
use fdsync_core::sync::{RunStatus, SyncError};
use fdsync_emulator::{Faults, PlanLimits, QuotaPeriod};

use crate::util::{Harness, TEST_KEY, UNIVERSE, start_time};

#[tokio::test]
async fn three_requests_a_minute_finishes_without_a_single_429() {
    let h = Harness::new(PlanLimits::scale(3, None), UNIVERSE).await;
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    let stats = h.emulator.emulator.stats();
    assert_eq!(stats.rate_limited, 0, "the client caused a 429: {stats:?}");
    assert_eq!(h.int("SELECT count(*) FROM _sync_requests WHERE status = 429").await, 0);
    // 6 identifiers + 5 prices + 5 dividends + 1 indices need the key: at 3 a
    // minute that is at least 5 minute windows waited out, in simulated time.
    let keyed = h
        .int("SELECT count(*) FROM _sync_requests WHERE route NOT LIKE '%landing%'")
        .await;
    assert_eq!(keyed, 17);
    let waited = h.clock.now() - start_time();
    assert!(waited >= chrono::Duration::minutes(5), "waited only {waited}");
    assert!(h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await == 5);
}

#[tokio::test]
async fn retry_after_is_honoured_when_someone_else_spent_the_minute() {
    let h = Harness::new(PlanLimits::scale(3, None), &["MSFT"]).await;
    // Another process sharing the key spends this minute's budget.
    let http = reqwest::Client::new();
    for _ in 0..3 {
        let r = http
            .get(format!("{}/api/v1/indices", h.emulator.base_url()))
            .header("X-API-KEY", TEST_KEY)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert_eq!(h.emulator.emulator.stats().rate_limited, 1, "one 429, then paced");
    let rows = h
        .strings("SELECT strftime(\"at\", '%Y-%m-%dT%H:%M:%S.%fZ') || '|' || status || '|' || coalesce(retry_after_s, 0) FROM _sync_requests ORDER BY \"at\"")
        .await;
    let parsed: Vec<(DateTime<Utc>, i64, f64)> = rows
        .iter()
        .map(|r| {
            let p: Vec<&str> = r.split('|').collect();
            let at = chrono::NaiveDateTime::parse_from_str(p[0], "%Y-%m-%dT%H:%M:%S.%fZ")
                .unwrap()
                .and_utc();
            (at, p[1].parse().unwrap(), p[2].parse().unwrap())
        })
        .collect();
    let i = parsed.iter().position(|(_, s, _)| *s == 429).expect("a 429 was logged");
    let (at, _, retry_after) = parsed[i];
    assert!(retry_after > 0.0);
    let next = parsed[i + 1].0;
    assert!(
        (next - at).num_milliseconds() as f64 >= retry_after * 1000.0,
        "retried {} ms after a Retry-After of {retry_after} s",
        (next - at).num_milliseconds()
    );
}

#[tokio::test]
async fn an_exhausted_quota_stops_the_run_with_checkpoints_saved() {
    let h = Harness::new(
        PlanLimits::scale(100, Some((QuotaPeriod::Month, 6))),
        &["AAPL", "MSFT", "O"],
    )
    .await;
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    let err = result.unwrap_err();
    assert!(matches!(err, SyncError::QuotaExhausted { .. }), "{err}");
    assert_eq!(err.exit_code(), 75);
    assert!(err.to_string().contains("resets at 2026-12-01 00:00:00 UTC"), "{err}");
    assert_eq!(report.outcomes.last().unwrap().status, RunStatus::QuotaExhausted);
    // What completed before the wall is committed with its checkpoint.
    let bars = h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await;
    let checkpoints = h
        .int("SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'prices'")
        .await;
    assert_eq!(bars, checkpoints);
    assert!(bars >= 1);
    // The headers said the quota was spent: no request was sent to be
    // refused. (Pipelines cut by their share leave the run going, so the
    // public coverage route, outside the key's quota, may still be asked.)
    let keyed = h
        .int("SELECT count(*) FROM _sync_requests WHERE route NOT LIKE '%/landing/coverage%'")
        .await;
    assert_eq!(keyed, 6);
    assert_eq!(h.emulator.emulator.stats().quota_exceeded, 0);
    let sent = h.emulator.emulator.stats().requests;
    let (_, again) = h.syncer.run_once(&h.pipelines).await;
    assert!(matches!(again.unwrap_err(), SyncError::QuotaExhausted { .. }));
    assert_eq!(
        h.emulator.emulator.stats().requests,
        sent,
        "a request was sent into a known-empty quota"
    );
}

#[tokio::test]
async fn a_quota_exceeded_429_reports_the_reset_and_the_sales_contact() {
    let h = Harness::new(PlanLimits::scale(100, Some((QuotaPeriod::Month, 2))), &["MSFT"]).await;
    let http = reqwest::Client::new();
    for _ in 0..2 {
        let url = format!("{}/api/v1/indices", h.emulator.base_url());
        http.get(url).header("X-API-KEY", TEST_KEY).send().await.unwrap();
    }
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 75);
    let message = err.to_string();
    assert!(
        message.contains("sales@example.invalid") && message.contains("2026-12-01"),
        "{message}"
    );
    assert_eq!(
        h.emulator.emulator.stats().quota_exceeded,
        1,
        "no retry into a spent quota"
    );
}

#[tokio::test]
async fn injected_faults_cost_retries_never_rows() {
    let h = Harness::new(PlanLimits::build(), &["AAPL", "MSFT", "O"]).await;
    h.emulator.emulator.set_faults(Faults {
        server_error: 0.1,
        reset: 0.05,
        truncate: 0.05,
        ..Faults::default()
    });
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    let stats = h.emulator.emulator.stats();
    assert!(stats.faults_injected >= 3, "{stats:?}");
    assert!(h.int("SELECT count(*) FROM _sync_requests WHERE status = 503").await > 0);

    let world = h.emulator.emulator.world();
    for id in ["AAPL", "MSFT", "O"] {
        let c = world.resolve(id).unwrap();
        let bars = world.daily_bars(&c, h.clock.now());
        let stored = h
            .int(&format!(
                "SELECT count(*) FROM prices_daily WHERE company_key = '{}'",
                c.cik
            ))
            .await;
        assert_eq!(stored as usize, bars.len(), "{id}");
        let (events, _, _) = world.dividends(&c, &bars, h.clock.now().date_naive());
        let stored = h
            .int(&format!(
                "SELECT count(*) FROM dividends WHERE company_key = '{}'",
                c.cik
            ))
            .await;
        assert_eq!(stored as usize, events.len(), "{id}");
    }
    assert_eq!(
        h.int("SELECT count(*) FROM _sync_quarantine").await,
        0,
        "a truncated page is retried, not quarantined"
    );
}

#[tokio::test]
async fn dropped_connections_and_truncated_bodies_are_retried_not_loaded() {
    let h = Harness::new(PlanLimits::build(), &["MSFT", "O"]).await;
    h.emulator.emulator.set_faults(Faults {
        reset: 0.25,
        truncate: 0.25,
        ..Faults::default()
    });
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    let truncated = "SELECT count(*) FROM _sync_requests WHERE error LIKE '%did not parse%'";
    let dropped = "SELECT count(*) FROM _sync_requests WHERE status = 0 OR error LIKE '%cut short%'";
    assert!(h.int(truncated).await > 0, "no truncated body was seen");
    assert!(h.int(dropped).await > 0, "no dropped connection was seen");
    assert_eq!(h.int("SELECT count(*) FROM _sync_quarantine").await, 0);
    let world = h.emulator.emulator.world();
    for id in ["MSFT", "O"] {
        let c = world.resolve(id).unwrap();
        let bars = world.daily_bars(&c, h.clock.now()).len();
        let stored = h
            .int(&format!(
                "SELECT count(*) FROM prices_daily WHERE company_key = '{}'",
                c.cik
            ))
            .await;
        assert_eq!(stored as usize, bars, "{id}");
    }
}
