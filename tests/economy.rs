//! The quota, run by run: `sync --once` runs what is due, and a quota too
//! small for what is due is shared so that no pipeline starves.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fdsync_core::pipeline::Pipeline;
use fdsync_core::sync::RunStatus;
use fdsync_emulator::{PlanLimits, QuotaPeriod};

use crate::util::{Harness, UNIVERSE, emulator_config, frozen_clock};

/// What `sync --once` runs without `--all`: the pipelines due now.
async fn due_now(h: &Harness, pipelines: &[Pipeline]) -> Vec<Pipeline> {
    let due = h.syncer.due(pipelines).await.unwrap();
    pipelines
        .iter()
        .zip(due)
        .filter(|(_, due)| due.runs())
        .map(|(p, _)| p.clone())
        .collect()
}

/// One firing of a 15-minute timer (the clock moved on, but not before the
/// first): a `sync --once` of what is due, every pipeline ending `ok`.
async fn timer_tick(
    h: &Harness,
    sim: &fdsync_core::clock::SimClock,
    pipelines: &[Pipeline],
    tick: u32,
) -> fdsync_core::sync::SyncReport {
    if tick > 0 {
        sim.advance(Duration::from_secs(15 * 60));
    }
    let due = due_now(h, pipelines).await;
    let (report, result) = h.syncer.run_once(&due).await;
    result.unwrap_or_else(|e| panic!("tick {tick}: {e}: {report:?}"));
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Ok, "tick {tick}: {o:?}");
    }
    report
}

/// The CronJob case: a timer every 15 minutes for a day, each firing a
/// `sync --once` of what is due. Each pipeline runs as often as its schedule
/// fired (a daily one once after the first sync), not 96 times.
#[tokio::test]
async fn a_timer_every_15_minutes_for_a_day_spends_what_the_schedules_say() {
    let h = Harness::new(PlanLimits::build(), UNIVERSE).await;
    let pipelines = h.all_pipelines.clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let start = h.clock.now();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    let mut requests = 0;
    let mut first_sync = 0;
    for tick in 0..96 {
        let report = timer_tick(&h, &sim, &pipelines, tick).await;
        for o in &report.outcomes {
            *runs.entry(o.pipeline.clone()).or_default() += 1;
            requests += o.requests;
        }
        if tick == 0 {
            assert_eq!(
                report.outcomes.len(),
                pipelines.len(),
                "the first tick syncs everything"
            );
            first_sync = requests;
        }
    }
    // What the schedules say: the first tick, then each tick after a firing.
    let ticks: Vec<_> = (0..96).map(|i| start + chrono::Duration::minutes(15 * i)).collect();
    let mut total_firings = 0;
    for p in &pipelines {
        let expected = scheduled_runs(p, &ticks);
        total_firings += expected;
        assert_eq!(runs.get(&p.name).copied().unwrap_or(0), expected, "{}", p.name);
        let period = p
            .schedule
            .next_after(&ticks[0])
            .and_then(|a| Some((p.schedule.next_after(&a)? - a).num_hours()));
        if period.is_some_and(|h| h >= 24) {
            assert!(
                expected <= 2,
                "{}: a daily pipeline polled {expected} times in a day",
                p.name
            );
        }
    }
    println!(
        "96 ticks: {total_firings} pipeline runs of {} possible, {requests} requests ({first_sync} in the first sync)",
        96 * pipelines.len()
    );
    assert!(total_firings < 96 * pipelines.len() as u64 / 3);
}

/// A quota too small for one full sync: half of what it needs per daily
/// window. Each window's run takes what is due; the pipelines share the
/// quota, those served least recently first, so every one not yet done gets
/// requests in every window, none starves, the service refuses nothing, and
/// within a few windows every pipeline has completed.
#[tokio::test]
async fn a_quota_too_small_for_one_full_sync_is_shared_so_every_pipeline_completes() {
    let pipelines = |h: &Harness| {
        let mut all = h.all_pipelines.clone();
        for p in &mut all {
            if p.name == "news" {
                p.params.backfill_days = Some(1);
            }
        }
        all
    };
    // What a full sync needs, on a plan that does not limit it.
    let reference = Harness::new(PlanLimits::build(), &["MSFT", "AAPL"]).await;
    let (report, result) = reference.syncer.run_once(&pipelines(&reference)).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let need: u64 = report.outcomes.iter().map(|o| o.requests).sum();
    let quota = need / 2;
    let plan = PlanLimits::scale(1_000, Some((QuotaPeriod::Day, quota)));
    let mut h = Harness::with_emulator(emulator_config(&frozen_clock(), plan), &["MSFT", "AAPL"]).await;
    let pipelines = pipelines(&h);
    let sim = h.clock.as_sim().unwrap().clone();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut windows = 0;
    while done.len() < pipelines.len() {
        windows += 1;
        assert!(windows <= 5, "not every pipeline completed in 5 windows: done {done:?}");
        h.restart(|_| {}).await;
        let due = due_now(&h, &pipelines).await;
        let (report, _) = h.syncer.run_once(&due).await;
        let mut served: BTreeMap<&str, u64> = BTreeMap::new();
        for o in &report.outcomes {
            *served.entry(&o.pipeline).or_default() += o.requests;
        }
        // Every pipeline not yet done ran, and got requests unless it had none to make.
        for p in &pipelines {
            if !done.contains(&p.name) {
                let ran_ok = report
                    .outcomes
                    .iter()
                    .any(|o| o.pipeline == p.name && o.status == RunStatus::Ok);
                assert!(
                    served.get(p.name.as_str()).copied().unwrap_or(0) > 0 || ran_ok,
                    "window {windows}: {} got no request: {report:?}",
                    p.name
                );
            }
        }
        for o in &report.outcomes {
            if o.status == RunStatus::Ok {
                done.insert(o.pipeline.clone());
            }
        }
        println!(
            "window {windows}: {} requests of {quota}; done {}/{}",
            served.values().sum::<u64>(),
            done.len(),
            pipelines.len()
        );
        // The next day: a new window.
        sim.advance(Duration::from_secs(24 * 3600));
    }
    let refused = h.int("SELECT count(*) FROM _sync_requests WHERE status = 429").await;
    assert_eq!(refused, 0, "the service refused nothing");
    println!("a full sync of {need} requests at {quota} a day: every pipeline done in {windows} windows");
    assert!(windows >= 2, "the quota did cut the sync");
}

/// `fdsync plan` against what the daemon then spends: the Free plan, one
/// company, and the schedules `fdsync plan` suggests for it. After a day of
/// the daemon (its first sync included), the forecast from the config and
/// the run log; then a week of the daemon on the emulator's clock. Each
/// pipeline spends within 10% of its forecast (or two requests, for the
/// ones that spend a handful in a week; texts, asked per new filing part,
/// within the noise of a week's count of one company's filings), and the
/// total within 10%.
#[tokio::test]
async fn the_plan_forecast_matches_what_a_week_of_the_daemon_spends() {
    let h = Harness::new(PlanLimits::free(), &["MSFT"]).await;
    let mut pipelines = h.all_pipelines.clone();
    for p in &mut pipelines {
        let schedule = match p.name.as_str() {
            "news" | "events_latest" | "events_wire" => "*/30 * * * *",
            "events" | "company_news" => "0 */6 * * *",
            _ => continue,
        };
        p.schedule = fdsync_core::pipeline::parse_schedule(schedule).unwrap();
        p.schedule_text = schedule.into();
        p.auto = false;
        if p.name == "news" {
            p.params.backfill_days = Some(1);
        }
    }
    h.syncer.sink.close().await;
    let syncer = std::sync::Arc::new(crate::util::syncer(h.syncer.config.clone(), &h.clock).await);
    let daemon = fdsync_core::daemon::Daemon {
        syncer: syncer.clone(),
        pipelines: pipelines.clone(),
        stream: fdsync_core::config::StreamMode::Off,
        metrics_addr: None,
        stale_after: None,
        lake: None,
    };
    let start = h.clock.now();
    daemon.run_until(start + chrono::Duration::days(1)).await.unwrap();

    let (config, forecast_pipelines, now) = (syncer.config.clone(), pipelines.clone(), h.clock.now());
    let forecast = syncer
        .sink
        .call(move |s| {
            let reader = fdsync_core::sink::duckdb::reader::BookkeepingReader::on(s.reading_connection().unwrap());
            fdsync_commands::plan::forecast(&config, &forecast_pipelines, Some(&reader), None, None, now).unwrap()
        })
        .await
        .unwrap();
    assert_eq!(forecast.fits, Some(true), "{forecast:?}");
    assert_eq!(
        forecast.limit.as_ref().and_then(|l| l.per_day),
        Some(250),
        "the plan from the quota the service reported"
    );

    let week_from = h.clock.now();
    daemon.run_until(week_from + chrono::Duration::days(7)).await.unwrap();
    let spent: BTreeMap<String, u64> = syncer
        .sink
        .call(move |s| {
            let c = s.connection();
            let mut stmt = c
                .prepare(
                    "SELECT pipeline, sum(requests) FROM _sync_runs WHERE started_at >= ?::TIMESTAMPTZ GROUP BY ALL",
                )
                .unwrap();
            stmt.query_map([week_from.to_rfc3339()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        })
        .await
        .unwrap();
    println!("| pipeline | schedule | forecast a day | spent a day (7 days) | ratio |");
    println!("|---|---|---:|---:|---:|");
    let (mut forecast_total, mut spent_total) = (0.0, 0.0);
    for f in &forecast.pipelines {
        let actual = spent.get(&f.pipeline).copied().unwrap_or(0) as f64;
        let expected = f.per_day * 7.0;
        forecast_total += expected;
        spent_total += actual;
        println!(
            "| {} | `{}` | {:.1} | {:.1} | {} |",
            f.pipeline,
            f.schedule,
            f.per_day,
            actual / 7.0,
            if expected > 0.0 {
                format!("{:.2}", actual / expected)
            } else {
                "-".into()
            }
        );
        // A text is asked per new filing part: a week of one company's
        // filings is a small random count around the forecast rate.
        let noise = if f.basis == "rate" { 3.0 * expected.sqrt() } else { 0.0 };
        assert!(
            (actual - expected).abs() <= (0.1 * expected).max(2.0).max(noise),
            "{}: forecast {expected:.1} requests in the week ({}), spent {actual}",
            f.pipeline,
            f.basis
        );
    }
    println!(
        "| total | | {:.1} | {:.1} | {:.2} |",
        forecast_total / 7.0,
        spent_total / 7.0,
        spent_total / forecast_total
    );
    assert!((spent_total - forecast_total).abs() <= 0.1 * forecast_total);
}

/// A news tape whose backfill reached the start of the tape costs only its
/// forward polls: ten more runs send no `before=`.
#[tokio::test]
async fn a_complete_news_backfill_costs_no_request_ten_runs_poll_forward_only() {
    let clock = fdsync_core::clock::Clock::simulated("2025-06-02T12:00:00Z".parse().unwrap(), 0.0);
    let h = Harness::with_emulator(emulator_config(&clock, PlanLimits::build()), &["MSFT"]).await;
    let mut news = h.only(&["news"]);
    news[0].params.backfill_days = None;
    crate::util::run_ok(&h, &news).await;
    let cursor = h
        .strings("SELECT \"cursor\" FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''")
        .await;
    assert!(cursor[0].contains("\"complete\":true"), "{cursor:?}");
    let asked_before = h.int("SELECT count(*) FROM _sync_requests").await;
    let sim = h.clock.as_sim().unwrap().clone();
    for _ in 0..10 {
        sim.advance(Duration::from_secs(5 * 60));
        crate::util::run_ok(&h, &news).await;
    }
    let routes = h
        .strings(&format!(
            "SELECT route FROM _sync_requests ORDER BY \"at\" OFFSET {asked_before}"
        ))
        .await;
    assert_eq!(routes.len(), 10, "one forward poll a run: {routes:?}");
    assert!(
        routes.iter().all(|r| r.contains("after=") && !r.contains("before=")),
        "{routes:?}"
    );
}

/// What the schedules say a day of ticks runs: the first tick, then each
/// tick after a firing.
fn scheduled_runs(p: &Pipeline, ticks: &[chrono::DateTime<chrono::Utc>]) -> u64 {
    let mut last = ticks[0];
    let mut expected = 1;
    for &t in &ticks[1..] {
        if p.schedule.next_after(&last).is_some_and(|f| f <= t) {
            expected += 1;
            last = t;
        }
    }
    expected
}

/// One company whose 8-K index and regulation the service does not serve
/// (404), in a five-company universe, under a timer every 15 minutes for a
/// day: each of those routes is asked at most twice, both pipelines end
/// `ok` with the 404 reported (in the outcome and `fdsync status`), and
/// each pipeline runs as often as its schedule fired, no more.
#[tokio::test]
async fn a_route_that_does_not_serve_a_company_is_remembered_and_costs_no_firing_more() {
    let config = fdsync_emulator::EmulatorConfig {
        quirks: fdsync_emulator::Quirks::parse("unserved=events+regulation@JP:7203").unwrap(),
        ..emulator_config(&frozen_clock(), PlanLimits::build())
    };
    let h = Harness::with_emulator(config, &["AAPL", "MSFT", "TW:2330", "JP:7203", "O"]).await;
    let pipelines = h.all_pipelines.clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let ticks: Vec<_> = (0..96)
        .map(|i| h.clock.now() + chrono::Duration::minutes(15 * i))
        .collect();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    let mut reported = BTreeSet::new();
    for tick in 0..96 {
        let report = timer_tick(&h, &sim, &pipelines, tick).await;
        for o in &report.outcomes {
            *runs.entry(o.pipeline.clone()).or_default() += 1;
            if !o.not_served.is_empty() {
                reported.insert(o.pipeline.clone());
            }
        }
        if tick == 0 {
            let status = h.syncer.status(&pipelines).await.unwrap();
            let mut text = Vec::new();
            fdsync_commands::status::write_text(&mut text, &status).unwrap();
            let text = String::from_utf8(text).unwrap();
            assert_eq!(
                text.matches("not served: JP:7203 (404 at").count(),
                2,
                "events and regulation report the 404: {text}"
            );
        }
    }
    assert_eq!(reported, BTreeSet::from(["events".to_owned(), "regulation".to_owned()]));
    // The index and regulation routes themselves, not the item texts under
    // `/events/{accession}`, which the service serves.
    for route in ["events", "regulation"] {
        let asked = h
            .int(&format!(
                "SELECT count(*) FROM _sync_requests WHERE regexp_matches(route, '^/api/v1/companies/JP%3A7203/{route}(\\?|$)')"
            ))
            .await;
        assert!(
            (1..=2).contains(&asked),
            "{route} asked {asked} times for the unserved company"
        );
    }
    for p in &pipelines {
        assert_eq!(
            runs.get(&p.name).copied().unwrap_or(0),
            scheduled_runs(p, &ticks),
            "{}",
            p.name
        );
    }
}
