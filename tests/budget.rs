use fdsync_core::sync::{RunStatus, SyncError};
use fdsync_emulator::{PlanLimits, QuotaPeriod};

use crate::util::{Harness, TEST_KEY, UNIVERSE, emulator_config};

/// A cron run starts with no memory of its own; the ledger in the warehouse
/// tells it what the window already spent, so it stops before the wall
/// instead of spending a request to find it. After the reset it resumes and
/// completes with nothing lost or repeated.
#[tokio::test]
async fn a_fresh_process_knows_what_the_window_already_spent_and_resumes_after_the_reset() {
    let mut h = Harness::new(
        PlanLimits::scale(100, Some((QuotaPeriod::Day, 20))),
        &["AAPL", "MSFT", "O", "TW:2330", "JP:7203"],
    )
    .await;
    // 5 identifiers + indices + 5 prices + 5 dividends = 16 keyed requests.
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert_eq!(
        h.int("SELECT quota_remaining FROM _sync_quota").await,
        4,
        "the ledger holds the last X-Quota-Remaining"
    );
    let ledger = h.strings("SELECT key_id FROM _sync_quota").await;
    assert!(!ledger[0].contains(TEST_KEY) && ledger[0].len() == 16, "{ledger:?}");

    // Half an hour later a new process runs: the 4 requests left are shared.
    h.clock.as_sim().unwrap().advance(std::time::Duration::from_secs(1800));
    h.restart(|_| {}).await;
    let before = h.emulator.emulator.stats();
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    let err = result.unwrap_err();
    assert!(matches!(err, SyncError::QuotaExhausted { .. }), "{err}");
    assert_eq!(err.exit_code(), 75);
    assert!(err.to_string().contains("2026-11-26 00:00:00 UTC"), "{err}");
    let after = h.emulator.emulator.stats();
    assert_eq!(after.quota_exceeded, 0, "a request was sent into a spent window");
    // The 4 left, shared: the public coverage route is outside the key's quota.
    let keyed: u64 = report
        .outcomes
        .iter()
        .filter(|o| o.pipeline != "coverage")
        .map(|o| o.requests)
        .sum();
    assert_eq!(keyed, 4, "{report:?}");
    assert!(after.requests - before.requests <= 5, "{report:?}");
    let prices = report.outcomes.iter().rev().find(|o| o.pipeline == "prices").unwrap();
    assert_eq!(prices.status, RunStatus::QuotaExhausted);

    // Past midnight the window resets: the next run completes.
    h.clock
        .as_sim()
        .unwrap()
        .advance_to("2026-11-26T00:00:05Z".parse().unwrap());
    h.restart(|_| {}).await;
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    assert_eq!(h.emulator.emulator.stats().quota_exceeded, 0);
    let world = h.emulator.emulator.world();
    for id in ["AAPL", "MSFT", "O", "TW:2330", "JP:7203"] {
        let c = world.resolve(id).unwrap();
        let bars = world.daily_bars(&c, h.clock.now()).len() as i64;
        let count = |what: &str| format!("SELECT {what} FROM prices_daily WHERE company_key = '{}'", c.cik);
        assert_eq!(h.int(&count("count(*)")).await, bars, "{id}: every bar");
        assert_eq!(
            h.int(&count("count(DISTINCT \"date\")")).await,
            bars,
            "{id}: every bar once"
        );
    }
}

/// `--max-requests` stops the run at a commit boundary, defers the rest, and
/// the next run starts with the companies this one could not reach.
#[tokio::test]
async fn a_request_budget_defers_work_and_the_next_run_starts_with_the_stalest() {
    let mut h = Harness::new(PlanLimits::build(), UNIVERSE).await;
    // 6 identifiers + indices + 3 of the 5 companies' prices.
    h.syncer.client.limit_requests(10);
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.expect("a spent budget is not a failure");
    let prices = report.outcomes.iter().find(|o| o.pipeline == "prices").unwrap();
    assert_eq!(prices.status, RunStatus::Partial);
    assert!(
        prices.error.as_deref().unwrap().contains("--max-requests"),
        "{prices:?}"
    );
    assert_eq!(report.deferred, ["dividends", "macro", "coverage"]);
    assert_eq!(h.emulator.emulator.stats().requests, 10);
    let synced = h
        .strings("SELECT \"partition\" FROM _sync_checkpoints WHERE pipeline = 'prices'")
        .await;
    assert_eq!(synced.len(), 3);

    // The next run, also capped, reaches the two companies left out first.
    h.restart(|_| {}).await;
    h.syncer.client.limit_requests(3);
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert_eq!(report.deferred, ["dividends", "macro", "coverage"]);
    let run_id = report.run_id.clone();
    let routes = h
        .strings(&format!(
            "SELECT route FROM _sync_requests WHERE run_id = '{run_id}' AND route LIKE '%/prices%'"
        ))
        .await;
    assert_eq!(routes.len(), 2, "{routes:?}");
    for route in &routes {
        assert!(
            !synced.iter().any(|key| route.contains(&format!("/companies/{key}/"))),
            "{route} was synced last run while others waited"
        );
        assert!(
            route.ends_with("range=ALL"),
            "a never-synced company gets its full history: {route}"
        );
    }
}

/// A Kubernetes secret rotated under a running process: the changed key file
/// is read before the next request, so the old key is never refused; a key
/// refused while the file stays the same waits a bounded time for it to
/// change, then fails.
#[tokio::test]
async fn a_rotated_key_file_is_picked_up_and_a_refused_key_waits_a_bounded_time() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let key_file = h._tempdir.path().join("api_key");
    std::fs::write(&key_file, format!("{TEST_KEY}\n")).unwrap();
    h.restart(|c| c.upstream.api_key_file = Some(key_file.clone())).await;

    let rotated = h.emulator.emulator.rotate_key("key_0001").unwrap();
    h.clock.as_sim().unwrap().advance(std::time::Duration::from_secs(61));
    std::fs::write(&key_file, format!("{}\n", rotated.key)).unwrap();
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    assert_eq!(
        h.emulator.emulator.stats().by_status.get(&401),
        None,
        "the new key was read from the changed file before any request"
    );

    // Revoked and not replaced: the file is watched for 90 s, then exit 2.
    h.emulator.emulator.revoke_key(&rotated.id).unwrap();
    h.clock.as_sim().unwrap().advance(std::time::Duration::from_secs(61));
    h.restart(|_| {}).await;
    let waiting_from = h.clock.now();
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    let waited = h.clock.now() - waiting_from;
    assert!(
        waited >= chrono::Duration::seconds(90) && waited < chrono::Duration::seconds(120),
        "waited {waited} for the file to change"
    );
    let err = result.unwrap_err();
    assert_eq!(err.exit_code(), 2, "{err}");
    assert!(err.to_string().contains("refused the API key"), "{err}");
    assert_eq!(
        h.emulator.emulator.stats().by_status.get(&401),
        Some(&1),
        "no retry loop on 401: the file is watched, the request not sent again"
    );
}

/// A key revoked between runs fails the first pipeline that meets the
/// refusal (exit 2). Once the key is replaced, the next plain run retries
/// that pipeline at once, as unfinished work, rather than after a failing
/// pipeline's backoff: the new key is what the operator ran it for.
#[tokio::test]
async fn a_pipeline_refused_the_key_runs_again_at_once_when_the_key_is_replaced() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let key_file = h._tempdir.path().join("api_key");
    std::fs::write(&key_file, format!("{TEST_KEY}\n")).unwrap();
    h.restart(|c| c.upstream.api_key_file = Some(key_file.clone())).await;
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();

    h.emulator.emulator.revoke_key("key_0001").unwrap();
    // Every schedule fired, and the revoke took effect.
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(8 * 86_400));
    let due_now = |dues: Vec<fdsync_core::planner::Due>, pipelines: &[fdsync_core::pipeline::Pipeline]| {
        pipelines
            .iter()
            .zip(dues)
            .filter(|(_, d)| d.runs())
            .map(|(p, _)| p.clone())
            .collect::<Vec<_>>()
    };
    let due = due_now(h.syncer.due(&h.pipelines).await.unwrap(), &h.pipelines);
    assert!(!due.is_empty());
    let (report, result) = h.syncer.run_once(&due).await;
    assert_eq!(result.unwrap_err().exit_code(), 2);
    let refused = report.outcomes.last().expect("a pipeline met the refusal");
    assert_eq!(refused.status, RunStatus::Failed, "{report:?}");
    let refused = refused.pipeline.clone();

    let replacement = h.emulator.emulator.create_key("test").unwrap();
    std::fs::write(&key_file, format!("{}\n", replacement.key)).unwrap();
    let dues = h.syncer.due(&h.pipelines).await.unwrap();
    let (_, why) = h.pipelines.iter().zip(&dues).find(|(p, _)| p.name == refused).unwrap();
    assert!(
        matches!(why, fdsync_core::planner::Due::Unfinished { .. }),
        "{refused}: {why}"
    );
    let due = due_now(dues, &h.pipelines);
    let (report, result) = h.syncer.run_once(&due).await;
    result.unwrap();
    assert!(
        report
            .outcomes
            .iter()
            .any(|o| o.pipeline == refused && o.status == RunStatus::Ok),
        "{report:?}"
    );
}

/// Eight requests in flight against five a minute: they share one budget.
#[tokio::test]
async fn concurrent_requests_share_one_rate_budget() {
    let companies: Vec<String> = (0..20).map(|n| format!("S{n:04}")).collect();
    let companies: Vec<&str> = companies.iter().map(String::as_str).collect();
    let mut h = Harness::with_emulator(
        emulator_config(&crate::util::frozen_clock(), PlanLimits::scale(5, None)),
        &companies,
    )
    .await;
    h.restart(|c| c.upstream.concurrency = 8).await;
    let (report, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert!(report.outcomes.iter().all(|o| o.status == RunStatus::Ok), "{report:?}");
    let stats = h.emulator.emulator.stats();
    assert_eq!(stats.rate_limited, 0, "{stats:?}");
    assert!(h.int("SELECT count(DISTINCT company_key) FROM dividends").await > 0);
    assert_eq!(h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await, 20);
}
