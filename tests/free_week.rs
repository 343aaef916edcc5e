//! A Free key's week: the shipped pipelines under `fdsync daemon` on the
//! emulator's clock, held to what `fdsync plan` forecast and to the quota.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use fdsync_core::daemon::Daemon;
use fdsync_core::pipeline::Pipeline;
use fdsync_emulator::PlanLimits;

use crate::util::{Harness, UNIVERSE};

/// A daemon over `pipelines` with the stream as `daemon.stream` says (the
/// simulated week runs no stream: the test asserts the plan leaves it off).
async fn daemon(h: &mut Harness, pipelines: Vec<Pipeline>) -> Daemon {
    h.syncer.sink.close().await;
    let syncer = Arc::new(crate::util::syncer(h.syncer.config.clone(), &h.clock).await);
    Daemon {
        stream: syncer.config.daemon.stream,
        syncer,
        pipelines,
        metrics_addr: None,
        stale_after: None,
        lake: None,
    }
}

/// The next midnight (UTC) after `t`: the quota's windows are UTC days.
fn next_midnight(t: DateTime<Utc>) -> DateTime<Utc> {
    (t.date_naive() + Duration::days(1))
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
}

/// The shipped pipelines with backfills short enough to finish on the
/// first day: the week measures the steady state the forecast is for (a
/// backfill's requests are forecast apart, as `backfill left`).
fn shipped(h: &Harness) -> Vec<Pipeline> {
    let mut pipelines = h.all_pipelines.clone();
    for p in &mut pipelines {
        match p.name.as_str() {
            "news" | "events_wire" | "company_news" => p.params.backfill_days = Some(1),
            "event_texts" | "filings" => p.params.text_days = Some(7),
            _ => {}
        }
    }
    pipelines
}

/// Runs the daemon day by day until no backfill is left (at most `days`),
/// ending at a midnight.
async fn warm_up(d: &Daemon, days: u32) {
    let started = std::time::Instant::now();
    let now = d.syncer.clock.now();
    d.run_until(next_midnight(now)).await.unwrap();
    for day in 0..days {
        // What `sync --once` would say: a backfill short of its horizon is due.
        let due = d.syncer.due(&d.pipelines).await.unwrap();
        let left: Vec<&str> = d
            .pipelines
            .iter()
            .zip(&due)
            .filter(|(_, due)| matches!(due, fdsync_core::planner::Due::Backfilling))
            .map(|(p, _)| p.name.as_str())
            .collect();
        println!(
            "warm-up day {day}: backfill left in {left:?} ({:.0?})",
            started.elapsed()
        );
        if left.is_empty() {
            return;
        }
        let now = d.syncer.clock.now();
        d.run_until(now + Duration::days(1)).await.unwrap();
    }
    panic!("backfills not complete in {days} days");
}

/// What the emulator served each of the next seven days, and the runs each
/// pipeline made each day.
async fn a_week(h: &Harness, d: &Daemon) -> (Vec<u64>, BTreeMap<String, BTreeSet<i64>>) {
    let from = d.syncer.clock.now();
    let started = std::time::Instant::now();
    let mut served = Vec::new();
    for day in 1..=7 {
        let before = h.emulator.emulator.stats().requests;
        let runs = d.run_until(from + Duration::days(day)).await.unwrap();
        served.push(h.emulator.emulator.stats().requests - before);
        println!(
            "day {day}: {runs} runs, {} requests ({:.0?})",
            served.last().unwrap(),
            started.elapsed()
        );
    }
    let ran: Vec<(String, i64)> = d
        .syncer
        .sink
        .call(move |s| {
            let mut stmt = s
                .connection()
                .prepare("SELECT pipeline, epoch_ms(started_at) FROM _sync_runs")
                .unwrap();
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .map(Result::unwrap)
                .collect()
        })
        .await
        .unwrap();
    let mut days: BTreeMap<String, BTreeSet<i64>> = BTreeMap::new();
    let mut runs: BTreeMap<String, u64> = BTreeMap::new();
    for (pipeline, at) in ran {
        let since = at - from.timestamp_millis();
        if (0..7 * 86_400_000).contains(&since) {
            *runs.entry(pipeline.clone()).or_default() += 1;
            days.entry(pipeline).or_default().insert(since / 86_400_000);
        }
    }
    println!("runs in the week: {runs:?}");
    (served, days)
}

/// The forecast of the daemon from what the warehouse holds now.
async fn forecast(d: &Daemon) -> fdsync_commands::plan::Forecast {
    let (config, pipelines, now) = (d.syncer.config.clone(), d.pipelines.clone(), d.syncer.clock.now());
    d.syncer
        .sink
        .call(move |s| {
            let reader = fdsync_core::sink::duckdb::reader::BookkeepingReader::on(s.reading_connection().unwrap());
            fdsync_commands::plan::forecast(&config, &pipelines, Some(&reader), None, None, now).unwrap()
        })
        .await
        .unwrap()
}

/// The shipped pipelines (with the tests' backfill horizons) and config on
/// the Free plan: once the backfills are done, `fdsync plan` forecasts the
/// daemon with the stream off (its connections do not fit), and a week of
/// the daemon spends within 10% of that forecast, at most 250 requests each
/// day, with no 429 from the service.
#[tokio::test]
async fn a_week_of_the_shipped_daemon_on_free_fits_the_quota_and_the_forecast() {
    let mut h = Harness::new(PlanLimits::free(), UNIVERSE).await;
    let pipelines = shipped(&h);
    let d = daemon(&mut h, pipelines).await;
    warm_up(&d, 3).await;
    let forecast = forecast(&d).await;
    let stream = forecast.stream.as_ref().expect("the news feed has a stream");
    assert!(!stream.connected, "{stream:?}");
    assert_eq!(forecast.fits, Some(true), "{forecast:?}");

    let refused_before = h.emulator.emulator.stats();
    let (served, days) = a_week(&h, &d).await;
    let refused = h.emulator.emulator.stats();
    let spent: u64 = served.iter().sum();
    println!(
        "forecast {:.1} a day; spent a day: {served:?} ({:.1} on average)",
        forecast.per_day,
        spent as f64 / 7.0
    );
    for f in &forecast.pipelines {
        println!("  {:<16} {:<16} {:>6.1} a day", f.pipeline, f.schedule, f.per_day);
    }
    assert!(served.iter().all(|n| *n <= 250), "{served:?}");
    assert_eq!(refused.rate_limited, refused_before.rate_limited, "no 429 rate_limited");
    assert_eq!(
        refused.quota_exceeded, refused_before.quota_exceeded,
        "no 429 quota_exceeded"
    );
    let expected = forecast.per_day * 7.0;
    assert!(
        (spent as f64 - expected).abs() <= 0.1 * expected,
        "forecast {expected:.0} for the week, spent {spent}"
    );
    for p in &d.pipelines {
        assert!(days.contains_key(&p.name), "{} ran in the week", p.name);
    }
}

/// `schedule = "auto"` on every pipeline: the week spends 80-90% of the
/// Free quota, and every pipeline runs every day.
#[tokio::test]
async fn a_week_of_auto_schedules_spends_80_to_90_percent_and_runs_every_pipeline_daily() {
    let mut h = Harness::new(PlanLimits::free(), UNIVERSE).await;
    let mut pipelines = shipped(&h);
    for p in &mut pipelines {
        p.auto = true;
    }
    let d = daemon(&mut h, pipelines).await;
    warm_up(&d, 3).await;
    let refused_before = h.emulator.emulator.stats();
    let (served, days) = a_week(&h, &d).await;
    let refused = h.emulator.emulator.stats();
    let share = served.iter().sum::<u64>() as f64 / (250.0 * 7.0);
    println!("spent a day: {served:?}: {:.1}% of the quota", share * 100.0);
    let derived = d.syncer.schedules(&d.pipelines, None).await.unwrap();
    for p in &derived {
        println!("  {:<16} {}", p.name, p.schedule_text);
    }
    assert!((0.8..=0.9).contains(&share), "{share}");
    assert!(served.iter().all(|n| *n <= 250), "{served:?}");
    assert_eq!(
        refused.quota_exceeded, refused_before.quota_exceeded,
        "no 429 quota_exceeded"
    );
    for p in &d.pipelines {
        let ran = days.get(&p.name).map_or(0, BTreeSet::len);
        assert_eq!(ran, 7, "{} ran on {ran} of 7 days", p.name);
    }
}
