//! Every table of the warehouse contract against the emulator's own ground
//! truth, after several runs while the emulator's clock moves.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use fdsync_core::sync::RunStatus;
use fdsync_emulator::{PlanLimits, company_docs, events, geo, news};

use crate::util::{Harness, headline_versions, run_ok, run_ok_after};

fn text(v: &serde_json::Value, field: &str) -> String {
    v.get(field).and_then(|x| x.as_str()).unwrap_or("~").to_owned()
}

/// Every pipeline's first run at the least `memory_limit_mb` the
/// configuration allows: each loads, and no key is stored twice. With
/// `MERGE INTO` `company_news` ran out of memory here every time, updating
/// news items the news pipeline had stored.
#[tokio::test]
async fn every_pipeline_loads_at_the_least_memory_limit() {
    let mut h = Harness::new(PlanLimits::scale(1_000_000_000, None), crate::util::UNIVERSE).await;
    h.syncer.sink.close().await;
    h.syncer.config.warehouse.memory_limit_mb = fdsync_core::config::MIN_MEMORY_LIMIT_MB;
    h.syncer.sink = fdsync_core::sink::SinkHandle::open_configured(&h.syncer.config.warehouse, "test")
        .await
        .unwrap();
    let (report, result) = h.syncer.run_once(&h.all_pipelines).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Ok, "{o:?}");
    }
    assert!(h.int("SELECT count(*) FROM news_company_items").await > 0);
    h.assert_unique("news_items", "id").await;
    h.assert_unique("events", "accession").await;
}

/// The tape over a day: a backfill to the horizon, forward polls that meet
/// new items and rewritten headlines. The warehouse holds every item from the
/// horizon on, each in the version served last, with licence-withheld fields
/// NULL, and every headline version some run could have seen.
/// Ground truth: news.
#[tokio::test]
async fn news_tape_matches_the_emulator_through_arrivals_and_rewrites() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let mut pipelines = h.only(&["news"]);
    pipelines[0].params.backfill_days = Some(1);
    let world = h.emulator.emulator.world().clone();
    let run_times = run_ok_after(&h, &pipelines, &[0, 20, 100, 24 * 60]).await;
    let last = *run_times.last().unwrap();
    let count = news::CADENCE.count_at(world.seed, last);
    let ids = h.strings("SELECT id FROM news_items ORDER BY id").await;
    let first = news::parse_id(&ids[0]).unwrap();
    let horizon = news::CADENCE.first_at_or_after(run_times[0] - chrono::Duration::days(1));
    assert!(first <= horizon, "the backfill reached the horizon");
    assert_eq!(
        ids.len() as u64,
        count - first,
        "no gap from the oldest stored item to the newest"
    );

    let mut truth = BTreeSet::new();
    for n in first..count {
        let it = news::item(&world, n, last).unwrap();
        let j = &it.json();
        truth.insert(format!(
            "{}|{}|{}|{}|{}|{}",
            text(j, "id"),
            text(j, "headline"),
            text(j, "snippet"),
            text(j, "body"),
            text(j, "url"),
            j["source"]["licenceClass"].as_str().unwrap()
        ));
    }
    let (versions, rewritten) = headline_versions(&world, first, &run_times);
    assert!(rewritten > 0, "the scenario rewrites headlines already stored");
    let stored: BTreeSet<String> = h
        .strings(
            "SELECT id || '|' || headline || '|' || coalesce(snippet, '~') || '|' || coalesce(body, '~') || '|' \
             || coalesce(url, '~') || '|' || licence_class FROM news_items",
        )
        .await
        .into_iter()
        .collect();
    assert_eq!(stored, truth);
    let revisions: BTreeSet<String> = h
        .strings("SELECT id || '|' || headline FROM news_headline_revisions")
        .await
        .into_iter()
        .collect();
    assert_eq!(revisions, versions, "every headline version seen, once");
    h.assert_unique("news_headline_revisions", "id, updated_at").await;
    let sources = h
        .int("SELECT count(*) FROM news_sources WHERE attribution IS NOT NULL AND display_policy IS NOT NULL")
        .await;
    assert_eq!(sources, news::SOURCES.len() as i64);
}

/// Each company's feed includes items tagged to predecessors in its lineage,
/// with the configured filters applied to every request.
/// Ground truth: company_news, news_sources, news_topics.
#[tokio::test]
async fn company_news_follows_lineage_and_the_configured_filters() {
    let mut h = Harness::new(PlanLimits::build(), &["META", "MSFT"]).await;
    h.restart(|c| {
        c.news.sources = vec!["issuer_pr".into(), "wire_a".into(), "sec_edgar".into()];
        c.news.min_importance = Some(30);
    })
    .await;
    let mut pipelines = h.only(&["companies", "company_news", "news_sources", "news_topics"]);
    for p in &mut pipelines {
        p.params.backfill_days = Some(3);
    }
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let t0 = h.clock.now();
    run_ok(&h, &pipelines).await;
    sim.advance(Duration::from_secs(3 * 3600));
    run_ok(&h, &pipelines).await;
    let last = h.clock.now();
    let count = news::CADENCE.count_at(world.seed, last);
    let horizon = news::CADENCE.first_at_or_after(t0 - chrono::Duration::days(3));
    let filters = news::Filters {
        sources: Some(vec!["issuer_pr".into(), "wire_a".into(), "sec_edgar".into()]),
        min_importance: 30,
        ..Default::default()
    };
    let mut via_predecessor = 0;
    for id in ["META", "MSFT"] {
        let c = world.resolve(id).unwrap();
        let lineage: Vec<String> = std::iter::once(c.cik.clone()).chain(c.predecessors.clone()).collect();
        let stored: BTreeSet<u64> = h
            .strings(&format!(
                "SELECT news_id FROM news_company_items WHERE company_key = '{}'",
                c.cik
            ))
            .await
            .iter()
            .map(|i| news::parse_id(i).unwrap())
            .collect();
        let oldest = *stored.iter().next().expect("items stored");
        assert!(oldest <= horizon);
        let truth: BTreeSet<u64> = (oldest..count)
            .filter(|n| {
                news::item(&world, *n, last)
                    .is_some_and(|it| filters.matches(&it) && it.body.ciks.iter().any(|k| lineage.contains(k)))
            })
            .collect();
        assert_eq!(stored, truth, "{id}");
        via_predecessor += (oldest..count)
            .filter(|n| truth.contains(n))
            .filter(|n| news::item(&world, *n, last).is_some_and(|it| it.body.ciks.iter().any(|k| *k != c.cik)))
            .count();
    }
    assert!(
        via_predecessor > 0,
        "items tagged to a predecessor are in the company's feed"
    );
    let outside = h
        .int("SELECT count(*) FROM news_items WHERE source_id NOT IN ('issuer_pr', 'wire_a', 'sec_edgar') OR importance < 30")
        .await;
    assert_eq!(outside, 0, "filters applied");
    assert_eq!(
        h.int("SELECT count(*) FROM news_topics").await,
        news::TOPICS.len() as i64
    );
    assert_eq!(
        h.int("SELECT count(*) FROM news_sources WHERE count_24h IS NOT NULL")
            .await,
        news::SOURCES.len() as i64
    );
}

fn event_row(e: &events::Event, now: DateTime<Utc>) -> String {
    let headline = if now >= e.headline_at { e.headline.as_str() } else { "~" };
    format!(
        "{}|{}|{}|{}|{}|{}",
        e.accession,
        e.company.cik,
        e.family,
        e.items.join(","),
        e.filing_date(),
        headline
    )
}

/// The wire's tally per family (`counts=1`) of each closed day within
/// `tally_days`, asked once per day: equal to the emulator's events of that
/// day, as are the events stored; a day that closes later is asked the day
/// after, and nothing is asked again in between.
/// Ground truth: events_wire.
#[tokio::test]
async fn the_wire_s_tally_of_each_closed_day_is_asked_once_and_matches_the_events_stored() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let mut pipelines = h.only(&["events_wire"]);
    pipelines[0].params.backfill_days = Some(5);
    pipelines[0].params.tally_days = Some(3);
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let truth = |now: DateTime<Utc>, first: chrono::NaiveDate, last: chrono::NaiveDate| -> BTreeSet<String> {
        let count = events::cadence(&world).count_at(world.seed, now);
        let mut by_day: BTreeMap<(chrono::NaiveDate, &str), u64> = BTreeMap::new();
        for n in events::first_on_or_after(&world, first)..count {
            let Some(e) = events::event(&world, n) else { continue };
            if (first..=last).contains(&e.filing_date()) {
                *by_day.entry((e.filing_date(), e.family)).or_default() += 1;
            }
        }
        by_day.into_iter().map(|((d, f), n)| format!("{d} {f} {n}")).collect()
    };
    let tallies = "SELECT CAST(filing_date AS VARCHAR) || ' ' || family || ' ' || arg_max(events, observed_at) \
                   FROM events_wire_counts GROUP BY filing_date, family";
    let stored = "SELECT CAST(filing_date AS VARCHAR) || ' ' || family || ' ' || count(*) FROM events \
                  WHERE filing_date BETWEEN (SELECT min(filing_date) FROM events_wire_counts) \
                  AND (SELECT max(filing_date) FROM events_wire_counts) GROUP BY filing_date, family";
    let asked = "SELECT count(*) FROM _sync_requests WHERE route LIKE '%counts=1%'";

    run_ok(&h, &pipelines).await;
    let today = h.clock.now().date_naive();
    let days = |n: i64| today - chrono::Duration::days(n);
    assert_eq!(h.int(asked).await, 3, "one request per closed day within tally_days");
    let kept: BTreeSet<String> = h.strings(tallies).await.into_iter().collect();
    assert!(!kept.is_empty(), "no tally kept");
    assert_eq!(kept, truth(h.clock.now(), days(4), days(2)));
    let held: BTreeSet<String> = h.strings(stored).await.into_iter().collect();
    assert_eq!(held, kept, "the events stored of each day are what the tally counts");

    // Later the same day (the harness starts at 23:00): every closed day is tallied already.
    sim.advance(Duration::from_secs(30 * 60));
    run_ok(&h, &pipelines).await;
    assert_eq!(h.int(asked).await, 3, "no day asked twice");

    // A day on: the day that closed since, and only it.
    sim.advance(Duration::from_secs(24 * 3600));
    run_ok(&h, &pipelines).await;
    assert_eq!(h.int(asked).await, 4);
    let kept: BTreeSet<String> = h.strings(tallies).await.into_iter().collect();
    assert_eq!(kept, truth(h.clock.now(), days(4), days(1)));
    h.assert_unique("events_wire_counts", "filing_date, family").await;
}

/// The wire (with filings arriving while it is read), latest, each company's
/// index, and item texts: every event from the wire's horizon plus the
/// companies' whole history, each with the headline the gate has passed by
/// the last run, and every item text of recent filings exactly once.
/// Ground truth: events, events_wire, events_latest, event_texts.
#[tokio::test]
async fn events_and_item_texts_match_the_emulator_while_filings_arrive() {
    let h = Harness::new(PlanLimits::build(), &["MSFT", "AAPL"]).await;
    let mut pipelines = h.only(&["companies", "events_wire", "events_latest", "events", "event_texts"]);
    for p in &mut pipelines {
        p.params.backfill_days = Some(3);
        p.params.text_days = Some(20);
    }
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let t0 = h.clock.now();
    run_ok(&h, &pipelines).await;

    // A filing that the index says is uncoded but has coded items: its texts go,
    // and the next run must follow the 400 that lists the items.
    let msft = world.resolve("MSFT").unwrap();
    let twisted = h
        .strings(&format!(
            "SELECT accession FROM events WHERE company_key = '{}' AND len(items) = 2 \
             AND filing_date >= DATE '{}' ORDER BY accession LIMIT 1",
            msft.cik,
            (t0 - chrono::Duration::days(20)).date_naive()
        ))
        .await;
    assert_eq!(twisted.len(), 1, "a two-item filing in the window");
    let twisted = twisted[0].clone();
    let sql = format!(
        "DELETE FROM event_item_texts WHERE accession = '{twisted}'; UPDATE events SET items = [] WHERE accession = '{twisted}'"
    );
    h.syncer
        .sink
        .call(move |s| s.connection().execute_batch(&sql))
        .await
        .unwrap()
        .unwrap();

    // Filings arrive while the wire is being read: the clock jumps six hours
    // once the emulator has answered the run's first requests.
    let served_before = h.emulator.emulator.stats().requests;
    let advance = async {
        while h.emulator.emulator.stats().requests < served_before + 2 {
            tokio::task::yield_now().await;
        }
        sim.advance(Duration::from_secs(6 * 3600));
    };
    let (_, (report, result)) = tokio::join!(advance, h.syncer.run_once(&pipelines));
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    sim.advance(Duration::from_secs(20 * 3600));
    run_ok(&h, &pipelines).await;
    let last = h.clock.now();

    let count = events::cadence(&world).count_at(world.seed, last);
    let wire_from = events::first_on_or_after(&world, (t0 - chrono::Duration::days(3)).date_naive());
    let companies: Vec<_> = ["MSFT", "AAPL"].iter().map(|id| world.resolve(id).unwrap()).collect();
    let filers: Vec<_> = companies.iter().map(|c| events::filer_of(&world, c)).collect();
    let mut truth = BTreeSet::new();
    let mut texts = BTreeSet::new();
    let text_from = (t0 - chrono::Duration::days(20)).date_naive();
    for n in 0..count {
        let ours = filers.contains(&Some(events::filer(&world, n)));
        if n < wire_from && !ours {
            continue;
        }
        let e = events::event(&world, n).unwrap();
        truth.insert(event_row(&e, last));
        if ours && e.filing_date() >= text_from {
            let items: Vec<&str> = if e.items.is_empty() { vec![""] } else { e.items.clone() };
            for item in items {
                texts.insert(format!("{}|{}|{}", e.accession, item, e.item_text(item)));
            }
        }
    }
    let stored: BTreeSet<String> = h
        .strings(
            "SELECT accession || '|' || company_key || '|' || family || '|' || array_to_string(items, ',') || '|' \
             || filing_date || '|' || coalesce(headline, '~') FROM events",
        )
        .await
        .into_iter()
        .collect();
    // The twisted filing keeps the empty item list this test gave it.
    let stored: BTreeSet<String> = stored
        .into_iter()
        .map(|r| {
            if r.starts_with(&twisted) {
                truth.iter().find(|t| t.starts_with(&twisted)).unwrap().clone()
            } else {
                r
            }
        })
        .collect();
    let missing: Vec<_> = truth.difference(&stored).take(3).collect();
    let extra: Vec<_> = stored.difference(&truth).take(3).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "missing {missing:?}, extra {extra:?}"
    );
    let stored_texts: BTreeSet<String> = h
        .strings("SELECT accession || '|' || item || '|' || text FROM event_item_texts")
        .await
        .into_iter()
        .collect();
    assert_eq!(stored_texts.len(), texts.len());
    assert_eq!(stored_texts, texts, "every item text once; the 400's items followed");
    h.assert_unique("event_item_texts", "accession, item").await;
}

/// Regulation (replaced per company, coverage logged on change), monthly
/// revenue (a 404 remembered), filings and sections (fetched once), geo.
/// Ground truth: regulation, monthly_revenue, filings, geo.
#[tokio::test]
async fn company_documents_and_geo_match_the_emulator_over_a_year() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT", "TW:2330", "JP:7203"]).await;
    h.restart(|c| c.universe.geo_layers = vec!["power_plants".into(), "ports".into()])
        .await;
    let mut pipelines = h.only(&["companies", "regulation", "monthly_revenue", "filings", "geo"]);
    for p in &mut pipelines {
        p.params.text_days = Some(200);
    }
    let world = h.emulator.emulator.world().clone();
    let seed = world.seed;
    let sim = h.clock.as_sim().unwrap().clone();
    let companies: Vec<_> = ["MSFT", "TW:2330", "JP:7203"]
        .iter()
        .map(|id| world.resolve(id).unwrap())
        .collect();
    let mut run_times = Vec::new();
    let mut coverage_truth: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut geo_truth = BTreeSet::new();
    let mut layer_truth = BTreeSet::new();
    for days in [0, 1, 40, 400] {
        sim.advance(Duration::from_secs(days * 86_400));
        let now = h.clock.now();
        run_times.push(now);
        run_ok(&h, &pipelines).await;
        for c in &companies {
            let cov = &company_docs::regulation(seed, c, now)["coverage"];
            let v = format!("{}|{}|{}", cov["documentsRead"], cov["documentsTotal"], cov["complete"]);
            let log = coverage_truth.entry(c.cik.clone()).or_default();
            if log.last() != Some(&v) {
                log.push(v);
            }
        }
        for g in geo::country_counts(seed, &["power_plants", "ports"], now.date_naive()) {
            geo_truth.insert(format!("{}|{}|{}|{}", now.date_naive(), g.layer, g.country, g.count));
        }
        // Every layer the service lists, not only the configured ones.
        for l in geo::LAYERS {
            let assets = geo::reviewed_assets(seed, l.code, now.date_naive());
            layer_truth.insert(format!("{}|{}|{}|{assets}", now.date_naive(), l.code, l.name));
        }
    }
    let last = *run_times.last().unwrap();

    let mut actions = BTreeSet::new();
    let mut revenue = BTreeSet::new();
    let mut filings = BTreeSet::new();
    let mut sections = BTreeSet::new();
    // A filing's sections are fetched by a run that saw it within its 200-day window.
    let in_window = |filed: chrono::NaiveDate| {
        run_times
            .iter()
            .any(|t| filed <= t.date_naive() && filed >= t.date_naive() - chrono::Duration::days(200))
    };
    for c in &companies {
        let reg = company_docs::regulation(seed, c, last);
        for a in reg["executiveActions"].as_array().unwrap() {
            for (rank, l) in a["links"].as_array().unwrap().iter().enumerate() {
                actions.insert(format!(
                    "{}|{}|{}|{}|{}",
                    c.cik,
                    text(a, "documentId"),
                    text(l, "basis"),
                    rank + 1,
                    text(l, "accession")
                ));
            }
        }
        if let Some(mr) = company_docs::monthly_revenue(seed, c, last) {
            for m in mr["months"].as_array().unwrap() {
                revenue.insert(format!(
                    "{}|{}-01|{}",
                    c.cik,
                    text(m, "month"),
                    m["revenue"].as_i64().unwrap()
                ));
            }
        }
        for f in company_docs::filings(c, last.date_naive()) {
            filings.insert(format!("{}|{}|{}|{}", f.accession, c.cik, f.form, f.filed_at));
            if in_window(f.filed_at) {
                for s in f.sections {
                    let t = company_docs::section_text(seed, c, &f.accession, s.key, last).unwrap();
                    sections.insert(format!("{}|{}|{}", f.accession, s.key, text(&t, "text")));
                }
            }
        }
    }
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<String>>();
    let stored = set(h
        .strings(
            "SELECT company_key || '|' || document_id || '|' || basis || '|' || rank || '|' || coalesce(accession, '~') \
             FROM regulation_actions",
        )
        .await);
    assert_eq!(stored, actions);
    for (cik, log) in &coverage_truth {
        let stored = h
            .strings(&format!(
                "SELECT documents_read || '|' || documents_total || '|' || complete FROM regulation_coverage \
                 WHERE company_key = '{cik}' ORDER BY observed_at"
            ))
            .await;
        assert_eq!(&stored, log, "coverage of {cik} logged on change");
    }
    assert!(coverage_truth.values().any(|l| l.len() > 1), "coverage moved");
    let stored = set(h
        .strings("SELECT company_key || '|' || month || '|' || CAST(revenue AS BIGINT) FROM monthly_revenue")
        .await);
    assert_eq!(stored, revenue);
    // MSFT has no mandate: asked on day 0, remembered on day 1, asked again after 30 days.
    let asked = h
        .int("SELECT count(*) FROM _sync_requests WHERE route LIKE '%/0000789019/monthly-revenue%'")
        .await;
    assert_eq!(asked, 3, "day 0, day 40 and day 400; not day 1");
    let stored = set(h
        .strings("SELECT accession || '|' || company_key || '|' || form || '|' || filed_at FROM filings")
        .await);
    assert_eq!(stored, filings);
    let stored = set(h
        .strings("SELECT accession || '|' || section_key || '|' || text FROM filing_sections")
        .await);
    let missing: Vec<_> = sections.difference(&stored).map(|s| &s[..30]).take(3).collect();
    let extra: Vec<_> = stored.difference(&sections).map(|s| &s[..30]).take(3).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "sections missing {missing:?}, extra {extra:?}"
    );
    let section_requests = h
        .int("SELECT count(*) FROM _sync_requests WHERE route LIKE '%/filing-notes/%'")
        .await;
    assert_eq!(section_requests, sections.len() as i64, "each section fetched once");
    let stored = set(h
        .strings("SELECT observed_date || '|' || layer || '|' || country || '|' || count FROM geo_country_counts")
        .await);
    assert_eq!(stored, geo_truth);
    let stored = set(h
        .strings("SELECT observed_date || '|' || layer || '|' || name || '|' || reviewed_assets FROM geo_layers")
        .await);
    assert_eq!(
        stored.len(),
        4 * geo::LAYERS.len(),
        "every layer on each of the four days"
    );
    assert_eq!(stored, layer_truth);
    h.assert_unique("geo_layers", "observed_date, layer").await;
}

/// A record of the wrong shape is quarantined with the reason; the rest of its
/// page loads, later pipelines still run, and the run ends `partial`.
#[tokio::test]
async fn a_bad_record_is_quarantined_and_the_run_goes_on_partial() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let pipelines = h.only(&["news_topics", "indices"]);
    h.emulator.emulator.set_faults(fdsync_emulator::Faults {
        bad_record: 1.0,
        ..Default::default()
    });
    let (report, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    for o in &report.outcomes {
        assert_eq!(o.status, RunStatus::Partial, "{o:?}");
        assert_eq!(o.quarantined, 1, "{o:?}");
        assert!(o.error.as_deref().unwrap_or("").contains("quarantined"), "{o:?}");
    }
    assert_eq!(
        h.int("SELECT count(*) FROM news_topics").await,
        news::TOPICS.len() as i64 - 1
    );
    assert!(h.int("SELECT count(*) FROM index_snapshots").await > 0);
    let quarantined = h
        .strings("SELECT route || ' | ' || error || ' | ' || record FROM _sync_quarantine ORDER BY route")
        .await;
    assert_eq!(quarantined.len(), 2, "{quarantined:?}");
    assert!(
        quarantined[0].contains("/api/v1/indices") && quarantined[0].contains("index entry"),
        "{quarantined:?}"
    );
    assert!(
        quarantined[1].contains("news topic") && quarantined[1].contains("malformed"),
        "{quarantined:?}"
    );
    let statuses = h.strings("SELECT DISTINCT status FROM _sync_runs").await;
    assert_eq!(statuses, ["partial"]);
}

/// Dividends with their daily summary, index snapshots and coverage
/// snapshots, over runs weeks apart: one row per key, each as served.
/// Ground truth: dividends, indices, coverage.
#[tokio::test]
async fn dividends_indices_and_coverage_match_the_emulator_over_weeks() {
    let h = Harness::new(PlanLimits::build(), &["MSFT", "O"]).await;
    let pipelines = h.only(&["companies", "dividends", "indices", "coverage"]);
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let companies: Vec<_> = ["MSFT", "O"].iter().map(|id| world.resolve(id).unwrap()).collect();
    let micros = |x: f64| (x * 1e6).round() as i64;
    let (mut summaries, mut indices, mut coverage) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut dividends = BTreeSet::new();
    // The yield series by (company, month end): a later run's value replaces an earlier one.
    let mut yields = BTreeMap::new();
    for days in [0, 1, 35, 64] {
        sim.advance(Duration::from_secs(days * 86_400));
        let now = h.clock.now();
        run_ok(&h, &pipelines).await;
        dividends.clear();
        for c in &companies {
            let (events, summary, series) = world.dividends(c, &world.daily_bars(c, now), now.date_naive());
            for e in events {
                dividends.insert(format!("{}|{}|{}|{}", c.cik, e.ex_date, e.kind, micros(e.amount)));
            }
            for p in series {
                yields.insert((c.cik.clone(), p.date), micros(p.trailing_yield_pct));
            }
            summaries.insert(format!("{}|{}|{}", c.cik, now.date_naive(), summary.count));
        }
        for i in world.indices(now) {
            indices.insert(format!(
                "{}|{}|{}",
                i.symbol,
                i.last_price_date,
                micros(i.last_price.unwrap())
            ));
        }
        let (generated, markets) = world.coverage(now);
        for m in markets {
            for t in m.data_types {
                coverage.insert(format!(
                    "{}|{}|{}|{}",
                    generated.date_naive(),
                    m.market,
                    t.data_type,
                    m.companies
                ));
            }
        }
    }
    let set = |v: Vec<String>| v.into_iter().collect::<BTreeSet<String>>();
    let stored = set(h
        .strings(
            "SELECT company_key || '|' || ex_date || '|' || type || '|' || round(amount * 1e6)::BIGINT FROM dividends",
        )
        .await);
    assert!(dividends.len() > 20, "the scenario has dividends");
    assert_eq!(stored, dividends);
    let stored = set(h
        .strings("SELECT company_key || '|' || as_of_date || '|' || count FROM dividend_summaries")
        .await);
    assert_eq!(stored, summaries);
    let stored = set(h
        .strings(
            "SELECT symbol || '|' || last_price_date || '|' || round(last_price * 1e6)::BIGINT FROM index_snapshots",
        )
        .await);
    assert_eq!(stored, indices);
    let stored = set(h
        .strings(
            "SELECT observed_date || '|' || market || '|' || data_type || '|' || companies FROM coverage_snapshots",
        )
        .await);
    assert_eq!(stored, coverage);
    h.assert_unique("dividends", "company_key, ex_date, type").await;
    let stored = set(h
        .strings(
            "SELECT company_key || '|' || date || '|' || round(trailing_yield_pct * 1e6)::BIGINT FROM dividend_yields",
        )
        .await);
    let yields: BTreeSet<String> = yields
        .into_iter()
        .map(|((cik, date), value)| format!("{cik}|{date}|{value}"))
        .collect();
    assert!(yields.len() > 12, "the scenario has a yield series");
    assert_eq!(stored, yields);
    h.assert_unique("dividend_yields", "company_key, date").await;
}

/// The companies pipeline asks every company again once its schedule has
/// fired since the company was last asked, once per company whatever its
/// aliases: a rename on the emulator's clock lands
/// in `companies`, and `company_versions` keeps both names with when each
/// was first and last seen. Other pipelines never ask again.
/// Ground truth: companies.
#[tokio::test]
async fn a_renamed_company_lands_with_when_it_changed() {
    let h = Harness::new(PlanLimits::build(), &["O", "0000726728", "MSFT"]).await;
    let companies = h.only(&["companies"]);
    let prices = h.only(&["prices"]);
    let sim = h.clock.as_sim().unwrap().clone();
    let requests = || async {
        h.int(
            "SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/companies/%' AND route NOT LIKE '%/prices%'",
        )
        .await
    };
    run_ok(&h, &companies).await;
    assert_eq!(requests().await, 3, "each identifier resolved once");
    let first = h.clock.now();
    run_ok(&h, &prices).await;
    assert_eq!(
        requests().await,
        3,
        "a pipeline that is not the universe's asks nothing again"
    );
    // Past the rename (2026-12-01), a week after the first sync.
    sim.advance(Duration::from_secs(7 * 24 * 3600));
    run_ok(&h, &companies).await;
    assert_eq!(requests().await, 5, "one refresh per company, not per alias");
    run_ok(&h, &companies).await;
    assert_eq!(requests().await, 5, "not again before the schedule fires again");
    let renamed = h.clock.now();
    assert_eq!(
        h.strings("SELECT name FROM companies WHERE company_key = '0000726728'")
            .await,
        ["Realty Income Corp."]
    );
    let versions = h
        .strings(
            "SELECT name || ' ' || strftime(first_seen_at, '%Y-%m-%dT%H:%M:%SZ') || ' ' \
             || strftime(last_seen_at, '%Y-%m-%dT%H:%M:%SZ') FROM company_versions \
             WHERE company_key = '0000726728' ORDER BY first_seen_at",
        )
        .await;
    let at = |t: DateTime<Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    assert_eq!(
        versions,
        [
            format!("Realty Income Corporation {} {}", at(first), at(first)),
            format!("Realty Income Corp. {} {}", at(renamed), at(renamed)),
        ]
    );
    // Unchanged: the version is seen again, not added.
    assert_eq!(
        h.strings(
            "SELECT strftime(last_seen_at, '%Y-%m-%dT%H:%M:%SZ') FROM company_versions WHERE company_key = '0000789019'"
        )
        .await,
        [at(renamed)]
    );
}

/// The wire read whole, whatever its density, in near the fewest pages: a
/// sparse one (a filing every two days since 2004) with no horizon, and a
/// dense one (288 filings a day) to a horizon that is then raised, which
/// reaches further back from where the stored filings end.
#[tokio::test]
async fn the_wire_is_read_whole_in_near_the_fewest_pages_whatever_its_density() {
    for (spacing, horizons) in [(2880, vec![None]), (5, vec![Some(4), Some(9)])] {
        let config = fdsync_emulator::EmulatorConfig {
            filing_spacing_minutes: spacing,
            ..crate::util::emulator_config(&crate::util::frozen_clock(), PlanLimits::scale(1_000_000, None))
        };
        let h = Harness::with_emulator(config, &["MSFT"]).await;
        let world = h.emulator.emulator.world().clone();
        let today = h.clock.now().date_naive();
        let mut pages_before = 0;
        for horizon in horizons {
            let mut wire = h.only(&["events_wire"]);
            wire[0].params.backfill_days = horizon;
            // The read's pages alone: the tally's request a closed day is
            // counted by its own test.
            wire[0].params.tally_days = Some(0);
            let (report, result) = h.syncer.run_once(&wire).await;
            result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
            let spent = report.outcomes[0].requests;
            let from = horizon.map_or(0, |d| {
                events::first_on_or_after(&world, today - chrono::Duration::days(d.into()))
            });
            let count = events::cadence(&world).count_at(world.seed, h.clock.now());
            let truth: BTreeSet<String> = (from..count)
                .filter_map(|n| events::event(&world, n))
                .map(|e| e.accession.clone())
                .collect();
            let stored: BTreeSet<String> = h.strings("SELECT accession FROM events").await.into_iter().collect();
            assert_eq!(stored.len(), truth.len(), "spacing {spacing}, horizon {horizon:?}");
            assert_eq!(stored, truth, "spacing {spacing}, horizon {horizon:?}");
            h.assert_unique("events", "accession").await;
            // The fewest pages: every filing new to this run in pages of 200.
            let least = ((truth.len() as u64 - pages_before) as f64 / 200.0).ceil().max(1.0) as u64;
            println!(
                "wire: every {spacing} min, horizon {horizon:?}: {} filings, {spent} requests, least {least}",
                truth.len()
            );
            assert!(
                spent as f64 <= (least as f64 * 1.05).ceil() + 1.0,
                "spacing {spacing}, horizon {horizon:?}: {spent} requests where {least} pages hold the new filings"
            );
            pages_before = truth.len() as u64;
        }
    }
}

/// Each run keeps the service's top stories as it ranked them then: the
/// ranking equals the emulator's own answer at that moment, each item is in
/// `news_items`, and earlier snapshots stay.
/// Ground truth: news_top.
#[tokio::test]
async fn news_top_keeps_each_ranking_as_the_service_served_it() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let pipelines = h.only(&["news_top"]);
    let truth = || async {
        let url = format!("{}/api/v1/news/top?window=24h&limit=30", h.emulator.base_url());
        let body: serde_json::Value = reqwest::Client::new()
            .get(url)
            .header("X-API-KEY", crate::util::TEST_KEY)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        body["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| text(item, "id"))
            .collect::<Vec<String>>()
    };
    let mut expected = Vec::new();
    for _ in 0..2 {
        run_ok(&h, &pipelines).await;
        let ranking = truth().await;
        assert!(ranking.len() > 5, "{ranking:?}");
        expected.push(ranking);
        h.clock.as_sim().unwrap().advance(Duration::from_secs(6 * 3600));
    }
    let snapshots = h
        .strings(
            "SELECT string_agg(news_id, ' ' ORDER BY ranking) FROM news_top GROUP BY observed_at ORDER BY observed_at",
        )
        .await;
    let expected: Vec<String> = expected.iter().map(|r| r.join(" ")).collect();
    assert_eq!(snapshots, expected);
    assert_ne!(expected[0], expected[1], "the ranking moved between runs");
    assert_eq!(h.strings("SELECT DISTINCT top_window FROM news_top").await, ["24h"]);
    let missing = h
        .int("SELECT count(*) FROM news_top t ANTI JOIN news_items i ON i.id = t.news_id")
        .await;
    assert_eq!(missing, 0, "every ranked item is in news_items");
}

/// The tape with `[news] ciks` and `q` set: exactly the items the service
/// serves for those filters over the backfill's day, nothing else.
#[tokio::test]
async fn the_tape_follows_the_cik_and_text_filters() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let world = h.emulator.emulator.world().clone();
    let cik = world.resolve("MSFT").unwrap().cik.clone();
    let (t0, count0) = (h.clock.now(), news::CADENCE.count_at(world.seed, h.clock.now()));
    let horizon = news::CADENCE.first_at_or_after(t0 - chrono::Duration::days(1));
    let by_cik = news::Filters {
        ciks: Some(vec![cik.clone()]),
        ..Default::default()
    };
    // A word of a headline the company's filter passes: the text filter
    // then narrows a tape that is not empty.
    let word = (horizon..count0)
        .filter_map(|n| news::item(&world, n, t0))
        .find(|it| by_cik.matches(it))
        .and_then(|it| {
            it.body
                .headline
                .split_whitespace()
                .max_by_key(|w| w.len())
                .map(str::to_owned)
        })
        .expect("an item about the company");
    h.restart(|c| {
        c.news.ciks = vec![cik.clone()];
        c.news.q = Some(word.clone());
    })
    .await;
    let mut pipelines = h.only(&["news"]);
    pipelines[0].params.backfill_days = Some(1);
    run_ok(&h, &pipelines).await;
    h.clock.as_sim().unwrap().advance(Duration::from_secs(3600));
    run_ok(&h, &pipelines).await;
    let last = h.clock.now();
    // The service matches the text without case, as its route reads `q`.
    let filters = news::Filters {
        q: Some(word.to_lowercase()),
        ..by_cik
    };
    let stored: BTreeSet<String> = h.strings("SELECT id FROM news_items").await.into_iter().collect();
    // The backfill's last page reaches past the horizon: from there on.
    let oldest = stored
        .iter()
        .next()
        .and_then(|id| news::parse_id(id))
        .expect("items stored");
    assert!(oldest <= horizon);
    let truth: BTreeSet<String> = (oldest..news::CADENCE.count_at(world.seed, last))
        .filter(|n| news::item(&world, *n, last).is_some_and(|it| filters.matches(&it)))
        .map(news::id)
        .collect();
    assert_eq!(stored, truth, "{cik} and {word:?}");
}

/// Saved searches: none configured sends nothing; each configured one is
/// its own tape of the search route, its hits exactly the items the service
/// finds for its text from the backfill's day on, through a later poll,
/// each hit's item in news_items.
/// Ground truth: news_searches.
#[tokio::test]
async fn each_saved_search_holds_exactly_what_the_search_route_finds() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let mut pipelines = h.only(&["news_searches"]);
    pipelines[0].params.backfill_days = Some(1);
    h.emulator.emulator.record_served();
    run_ok(&h, &pipelines).await;
    assert_eq!(h.emulator.emulator.served().len(), 0, "no search, no request");

    let world = h.emulator.emulator.world().clone();
    let t0 = h.clock.now();
    let count0 = news::CADENCE.count_at(world.seed, t0);
    let horizon = news::CADENCE.first_at_or_after(t0 - chrono::Duration::days(1));
    let headlines: Vec<String> = (horizon..count0)
        .filter_map(|n| news::item(&world, n, t0))
        .map(|it| it.body.headline.clone())
        .collect();
    // A word, and a phrase of two (sent with its space encoded), each from
    // a headline of the backfill's day.
    let word = headlines[0]
        .split_whitespace()
        .max_by_key(|w| w.len())
        .expect("a headline")
        .to_owned();
    let phrase = headlines[headlines.len() / 2]
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert_ne!(word.to_lowercase(), phrase.to_lowercase());
    let searches = vec![word, phrase];
    h.restart(|c| c.news.searches = searches.clone()).await;
    let pipelines = {
        let mut p = h.only(&["news_searches"]);
        p[0].params.backfill_days = Some(1);
        p
    };
    run_ok(&h, &pipelines).await;
    h.clock.as_sim().unwrap().advance(Duration::from_secs(6 * 3600));
    run_ok(&h, &pipelines).await;
    let last = h.clock.now();
    let count = news::CADENCE.count_at(world.seed, last);
    for search in &searches {
        let stored: BTreeSet<String> = h
            .strings(&format!(
                "SELECT news_id FROM news_search_hits WHERE search = '{}'",
                search.replace('\'', "''")
            ))
            .await
            .into_iter()
            .collect();
        // The backfill's last page may reach past the horizon; it reaches it.
        let oldest = stored
            .iter()
            .next()
            .and_then(|id| news::parse_id(id))
            .unwrap_or_else(|| panic!("hits stored for {search:?}"))
            .min(horizon);
        // The service matches the text without case, as its route reads `q`.
        let filters = news::Filters {
            q: Some(search.to_lowercase()),
            ..Default::default()
        };
        let truth: BTreeSet<String> = (oldest..count)
            .filter(|n| news::item(&world, *n, last).is_some_and(|it| filters.matches(&it)))
            .map(news::id)
            .collect();
        assert_eq!(stored, truth, "{search:?}");
    }
    let missing = h
        .int("SELECT count(*) FROM news_search_hits s ANTI JOIN news_items i ON i.id = s.news_id")
        .await;
    assert_eq!(missing, 0, "every hit's item is in news_items");
    assert_eq!(
        h.int("SELECT count(*) FROM news_search_hits WHERE found_at IS NULL")
            .await,
        0
    );
    h.assert_unique("news_search_hits", "search, news_id").await;

    // A search removed keeps its hits; its tape retires and no longer counts
    // in the status. Configured again, it goes on from where it stood.
    let tapes = |status: fdsync_core::planner::standing::Status| {
        status.pipelines[0]
            .backfill
            .as_ref()
            .and_then(|b| b.share.as_ref())
            .map(|s| s.total)
    };
    let hits = h.int("SELECT count(*) FROM news_search_hits").await;
    h.restart(|c| c.news.searches = vec![searches[0].clone()]).await;
    run_ok(&h, &pipelines).await;
    assert_eq!(tapes(h.syncer.status(&pipelines).await.unwrap()), Some(1));
    assert!(h.int("SELECT count(*) FROM news_search_hits").await >= hits);
    h.restart(|c| c.news.searches = searches.clone()).await;
    let (report, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    assert_eq!(
        report.outcomes[0].requests, 2,
        "one forward poll a search, no backfill again"
    );
    assert_eq!(tapes(h.syncer.status(&pipelines).await.unwrap()), Some(2));
}

/// Full-text items a tape stored without a body get it from the item route,
/// the most important first, within the day's budget, with the rest of
/// their storylines; while the tapes carry bodies, no item is asked.
/// Ground truth: news_bodies.
#[tokio::test]
async fn full_text_items_without_a_body_get_it_from_the_item_route_within_the_budget() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let mut news_tape = h.only(&["news"]);
    news_tape[0].params.backfill_days = Some(1);
    let mut bodies = h.only(&["news_bodies"]);
    bodies[0].params.daily_requests = Some(10);
    let item_requests = |h: &Harness| {
        h.emulator
            .emulator
            .served()
            .iter()
            .filter(|s| s.target.starts_with("/api/v1/news/items/"))
            .map(|s| s.target.trim_start_matches("/api/v1/news/items/").to_owned())
            .collect::<Vec<String>>()
    };
    let lacking = "SELECT count(*) FROM news_items WHERE licence_class = 'full_text' AND body IS NULL";
    h.emulator.emulator.record_served();
    run_ok(&h, &news_tape).await;
    run_ok(&h, &bodies).await;
    assert!(
        h.int("SELECT count(*) FROM news_items WHERE licence_class = 'full_text'")
            .await
            > 0,
        "the scenario has full-text items"
    );
    assert_eq!(h.int(lacking).await, 0);
    assert_eq!(
        item_requests(&h),
        Vec::<String>::new(),
        "bodies on the tape cost nothing"
    );

    // The service now serves bodies on the item route only.
    h.emulator
        .emulator
        .set_quirks(fdsync_emulator::Quirks::parse("bodies_by_item").unwrap());
    h.clock.as_sim().unwrap().advance(Duration::from_secs(12 * 3600));
    run_ok(&h, &news_tape).await;
    let before = h.int(lacking).await;
    assert!(before > 10, "more lack a body than a day's budget: {before}");
    run_ok(&h, &bodies).await;
    let asked = item_requests(&h);
    assert_eq!(asked.len(), 10, "the day's budget: {asked:?}");
    let after = h.int(lacking).await;
    assert!(after <= before - 10, "{before} lacking, then {after}");
    // The most important first.
    let least_asked = h
        .int(&format!(
            "SELECT min(importance) FROM news_items WHERE id IN ({})",
            asked.iter().map(|id| format!("'{id}'")).collect::<Vec<_>>().join(", ")
        ))
        .await;
    let most_left = h
        .int("SELECT coalesce(max(importance), 0) FROM news_items WHERE licence_class = 'full_text' AND body IS NULL")
        .await;
    assert!(
        least_asked >= most_left,
        "asked down to {least_asked}, left up to {most_left}"
    );
    // Each body as the service has it, and each storyline member named.
    let world = h.emulator.emulator.world().clone();
    let now = h.clock.now();
    for id in &asked {
        let truth = news::item(&world, news::parse_id(id).unwrap(), now).unwrap();
        let stored = h
            .strings(&format!("SELECT body FROM news_items WHERE id = '{id}'"))
            .await;
        assert_eq!(stored, [truth.body.body.clone().unwrap()], "{id}");
        let member = h
            .int(&format!(
                "SELECT count(*) FROM news_storylines WHERE news_id = '{id}' AND storyline_id = '{}'",
                truth.body.storyline_id
            ))
            .await;
        assert_eq!(member, 1, "{id} in its storyline");
    }
    assert!(
        h.int("SELECT count(*) FROM news_storylines").await > 10,
        "the rest of each storyline too"
    );
    h.assert_unique("news_storylines", "storyline_id, news_id").await;

    // The same day: the budget is spent. The next: ten more.
    run_ok(&h, &bodies).await;
    assert_eq!(item_requests(&h).len(), 10);
    h.clock.as_sim().unwrap().advance(Duration::from_secs(24 * 3600));
    run_ok(&h, &bodies).await;
    assert_eq!(item_requests(&h).len(), 20);

    // The route refused to the key: the pipeline fails naming it, after
    // one request, rather than spend the day's budget item by item.
    h.emulator
        .emulator
        .set_quirks(fdsync_emulator::Quirks::parse("bodies_by_item,refuse=item:403").unwrap());
    h.clock.as_sim().unwrap().advance(Duration::from_secs(24 * 3600));
    let (report, result) = h.syncer.run_once(&bodies).await;
    assert!(result.is_err(), "{report:?}");
    assert_eq!(report.outcomes[0].status, RunStatus::Failed, "{report:?}");
    assert!(
        report.outcomes[0]
            .error
            .as_deref()
            .unwrap_or("")
            .contains("/news/items/"),
        "{report:?}"
    );
    assert_eq!(report.outcomes[0].requests, 1);
}

/// A service that serves no body for a full-text item, on the tapes or on
/// the item route (a licence withheld): nothing is invented, an item asked
/// waits a week before it is asked again, and a wait that is over is
/// forgotten, so the marks left are a week of asking at most.
#[tokio::test]
async fn a_body_the_item_route_withholds_is_asked_again_after_a_week_and_then_forgotten() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    h.emulator
        .emulator
        .set_quirks(fdsync_emulator::Quirks::parse("withheld_bodies").unwrap());
    let mut news_tape = h.only(&["news"]);
    news_tape[0].params.backfill_days = Some(1);
    let mut bodies = h.only(&["news_bodies"]);
    bodies[0].params.daily_requests = Some(10);
    h.emulator.emulator.record_served();
    run_ok(&h, &news_tape).await;
    let lacking = "SELECT count(*) FROM news_items WHERE licence_class = 'full_text' AND body IS NULL";
    let before = h.int(lacking).await;
    assert!(before > 20, "more lack a body than two days' budget: {before}");
    let mut seen = 0;
    let mut asked_next = async || {
        run_ok(&h, &bodies).await;
        let asked: BTreeSet<String> = h
            .emulator
            .emulator
            .served()
            .iter()
            .filter(|s| s.target.starts_with("/api/v1/news/items/"))
            .skip(seen)
            .map(|s| s.target.trim_start_matches("/api/v1/news/items/").to_owned())
            .collect();
        seen += asked.len();
        let waiting: BTreeSet<String> = h
            .strings(
                "SELECT substr(\"partition\", 7) FROM _sync_checkpoints \
                 WHERE pipeline = 'news_bodies' AND starts_with(\"partition\", 'asked:')",
            )
            .await
            .into_iter()
            .collect();
        (asked, waiting)
    };
    let sim = h.clock.as_sim().unwrap().clone();

    let (first, waiting) = asked_next().await;
    assert_eq!(first.len(), 10, "the day's budget");
    assert_eq!(waiting, first, "each item asked and not served waits");
    assert_eq!(h.int(lacking).await, before, "no body invented");
    assert_eq!(h.int("SELECT count(*) FROM news_items WHERE body IS NOT NULL").await, 0);

    sim.advance(Duration::from_secs(24 * 3600));
    let (second, waiting) = asked_next().await;
    assert_eq!(second.len(), 10);
    assert!(
        first.is_disjoint(&second),
        "a waiting item is not asked: {first:?} {second:?}"
    );
    assert_eq!(waiting, first.union(&second).cloned().collect());

    // Eight days on: both waits are over, so both are forgotten, and the
    // most important items (the first day's) are asked again.
    sim.advance(Duration::from_secs(7 * 24 * 3600));
    let (third, waiting) = asked_next().await;
    assert_eq!(third, first, "the most important again once their week is over");
    assert_eq!(waiting, third, "the waits that were over are forgotten");
}
