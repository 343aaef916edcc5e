use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use fdsync_core::sync::RunStatus;
use fdsync_emulator::PlanLimits;
use fdsync_emulator::macro_series;

use crate::util::{Harness, start_time};

type Point = (String, String, String, String, String);

/// What the emulator served at `now`, as (country, series, period, vintage, value).
fn served(seed: u64, countries: &[&str], now: DateTime<Utc>) -> Vec<Point> {
    let mut out = Vec::new();
    for iso in countries {
        let c = macro_series::country(iso).unwrap();
        for s in macro_series::SERIES {
            for p in macro_series::history(seed, c, s, now) {
                out.push((
                    iso.to_string(),
                    s.key.to_string(),
                    p.period.to_string(),
                    p.vintage.to_string(),
                    format!("{:?}", p.value), // as DuckDB prints a DOUBLE: 2.0, 2.9
                ));
            }
        }
    }
    out
}

fn split(row: &str) -> Point {
    let f: Vec<&str> = row.split('|').collect();
    (f[0].into(), f[1].into(), f[2].into(), f[3].into(), f[4].into())
}

/// Several runs months apart: revisions add vintages, old vintages stop being
/// served, a March value is restated under its first vintage. The warehouse
/// holds exactly every point ever served, each with the run that first and
/// last saw it, and `macro_latest` / `macro_as_of` answer as the service did.
/// Ground truth: macro.
#[tokio::test]
async fn macro_history_keeps_every_vintage_ever_served() {
    let countries = ["US", "JP"];
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    h.restart(|c| c.universe.countries = countries.iter().map(|c| c.to_string()).collect())
        .await;
    let pipelines: Vec<_> = h.pipelines.iter().filter(|p| p.name == "macro").cloned().collect();
    assert_eq!(pipelines.len(), 1);
    let seed = h.emulator.emulator.world().seed;
    let sim = h.clock.as_sim().unwrap().clone();

    // Day 0, +45 days, +150 days (the March restatement), +2 years (old vintages dropped).
    let mut run_times = Vec::new();
    for days in [0, 45, 105, 730] {
        sim.advance(std::time::Duration::from_secs(days * 86_400));
        run_times.push(h.clock.now());
        let (report, result) = h.syncer.run_once(&pipelines).await;
        result.unwrap();
        assert_eq!(report.outcomes[0].status, RunStatus::Ok, "{report:?}");
    }

    // Ground truth: the union of what was served at each run, with first and last sighting.
    let mut truth: BTreeMap<Point, (String, String)> = BTreeMap::new();
    for at in &run_times {
        // DuckDB's text form of a TIMESTAMPTZ in UTC.
        let t = at.format("%Y-%m-%d %H:%M:%S+00").to_string();
        for p in served(seed, &countries, *at) {
            truth
                .entry(p)
                .and_modify(|seen| seen.1 = t.clone())
                .or_insert((t.clone(), t.clone()));
        }
    }
    let last_run = run_times[3].format("%Y-%m-%d %H:%M:%S+00").to_string();
    let dropped = truth.values().filter(|(_, last)| *last != last_run).count();
    assert!(dropped > 0, "the scenario drops vintages");
    let restated = {
        let mut by_vintage: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
        for p in truth.keys() {
            *by_vintage
                .entry((p.0.clone(), p.1.clone(), p.2.clone(), p.3.clone()))
                .or_default() += 1;
        }
        by_vintage.values().filter(|n| **n > 1).count()
    };
    assert!(restated > 0, "the scenario restates a value under the same vintage");

    let rows = h
        .strings(
            "SELECT country || '|' || series_key || '|' || period || '|' || vintage || '|' || value || '|' \
             || CAST(first_seen_at AS VARCHAR) || '|' || CAST(last_seen_at AS VARCHAR) \
             FROM macro_observations",
        )
        .await;
    let stored: BTreeMap<Point, (String, String)> = rows
        .iter()
        .map(|r| {
            let f: Vec<&str> = r.split('|').collect();
            (split(r), (f[5].to_owned(), f[6].to_owned()))
        })
        .collect();
    assert_eq!(stored.len(), rows.len(), "no duplicate observation");
    let missing: Vec<_> = truth.keys().filter(|p| !stored.contains_key(*p)).take(3).collect();
    let extra: Vec<_> = stored.keys().filter(|p| !truth.contains_key(*p)).take(3).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    assert_eq!(stored, truth, "first and last sightings");

    // macro_latest: what the service serves now, newest vintage per period.
    let latest_now: BTreeSet<Point> = newest_per_period(served(seed, &countries, run_times[3]));
    let latest: BTreeSet<Point> = h
        .strings(
            "SELECT country || '|' || series_key || '|' || period || '|' || vintage || '|' || value FROM macro_latest",
        )
        .await
        .iter()
        .map(|r| split(r))
        .collect();
    assert_eq!(latest, latest_now);

    // macro_as_of: what was known at the second run, though the service no longer serves all of it.
    let as_of = run_times[1];
    let known_then = newest_per_period(served(seed, &countries, as_of));
    let sql = format!(
        "SELECT country || '|' || series_key || '|' || period || '|' || vintage || '|' || value \
         FROM macro_as_of(TIMESTAMPTZ '{}')",
        as_of.to_rfc3339()
    );
    let known: BTreeSet<Point> = h.strings(&sql).await.iter().map(|r| split(r)).collect();
    assert_eq!(known, known_then);
    assert_eq!(start_time(), run_times[0]);
}

fn newest_per_period(points: Vec<Point>) -> BTreeSet<Point> {
    let mut newest: BTreeMap<(String, String, String), Point> = BTreeMap::new();
    for p in points {
        let k = (p.0.clone(), p.1.clone(), p.2.clone());
        match newest.get(&k) {
            Some(q) if q.3 >= p.3 => {}
            _ => {
                newest.insert(k, p);
            }
        }
    }
    newest.into_values().collect()
}
