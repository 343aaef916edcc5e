//! What a real service may legally send where the specification leaves the
//! shape open, and its likely slips, each switched on in the emulator
//! (`docs/emulator.md`, "Quirks"): fdsync stores what the emulator holds,
//! or says loudly that it could not and loses nothing stored.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fdsync_core::clock::Clock;
use fdsync_core::feeds::catalogue;
use fdsync_core::pipeline::Pipeline;
use fdsync_core::sync::RunStatus;
use fdsync_emulator::{EmulatorConfig, PlanLimits, Quirks, events, news};

use crate::util::{
    Harness, TEST_KEY, UNIVERSE, emulator_config, frozen_clock, headline_versions, run_ok, run_ok_after,
};
use crate::wire::rows_of;

pub(crate) fn with_quirks(clock: &Clock, plan: PlanLimits, quirks: &str) -> EmulatorConfig {
    EmulatorConfig {
        quirks: Quirks::parse(quirks).unwrap(),
        ..emulator_config(clock, plan)
    }
}

pub(crate) fn roomy() -> PlanLimits {
    PlanLimits::scale(1_000_000, None)
}

/// The pipeline named `name` of `pipelines`.
fn named<'a>(pipelines: &'a mut [Pipeline], name: &str) -> &'a mut Pipeline {
    pipelines.iter_mut().find(|p| p.name == name).unwrap()
}

/// Rows of every data table (of `only`, when given) as text, lineage left out.
async fn tables(h: &Harness, only: Option<&[&str]>) -> BTreeMap<&'static str, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for table in
        catalogue().filter(|t| t.lineage && t.versions_of.is_none() && only.is_none_or(|o| o.contains(&t.name)))
    {
        out.insert(table.name, rows_of(h, table).await);
    }
    out
}

/// Where two warehouses differ, table by table.
fn differences(
    expected: &BTreeMap<&'static str, BTreeSet<String>>,
    found: &BTreeMap<&'static str, BTreeSet<String>>,
) -> Vec<String> {
    expected
        .iter()
        .filter(|(name, rows)| found.get(*name) != Some(*rows))
        .map(|(name, rows)| {
            let other = found.get(name).cloned().unwrap_or_default();
            let missing: Vec<_> = rows.difference(&other).take(3).collect();
            let extra: Vec<_> = other.difference(rows).take(3).collect();
            format!("{name}:\n  missing {missing:?}\n  extra {extra:?}")
        })
        .collect()
}

/// The pipelines and universe two syncs compare on, each run to completion.
async fn synced(quirks: &str, companies: &[&str], names: &[&str]) -> Harness {
    let h = Harness::with_emulator(with_quirks(&frozen_clock(), roomy(), quirks), companies).await;
    let pipelines = h.only(names);
    run_ok(&h, &pipelines).await;
    h
}

/// A wire that serves 37 events a page however many are asked, while
/// filings arrive between its pages: every event of the window is stored
/// once, and the wire was asked at most twice as often as 37 a page needs.
/// Before, the first short page ended the window and the backfill was
/// marked complete.
#[tokio::test]
async fn a_wire_capped_at_37_a_page_stores_every_event_once_in_at_most_twice_the_least_requests() {
    // Noon: the day's filings so far fill part of the first page.
    let clock = Clock::simulated("2026-11-25T12:00:00Z".parse().unwrap(), 0.0);
    let h = Harness::with_emulator(with_quirks(&clock, roomy(), "page_cap=37"), &["MSFT"]).await;
    let mut pipelines = h.only(&["events_wire"]);
    pipelines[0].params.backfill_days = Some(7);
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let t0 = h.clock.now();
    let served_before = h.emulator.emulator.stats().requests;
    let arrivals = async {
        for page in 1..=3 {
            while h.emulator.emulator.stats().requests < served_before + page {
                tokio::task::yield_now().await;
            }
            sim.advance(Duration::from_secs(3600));
        }
    };
    let (_, (report, result)) = tokio::join!(arrivals, h.syncer.run_once(&pipelines));
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    assert_eq!(report.outcomes[0].status, RunStatus::Ok, "{:?}", report.outcomes);
    let from = events::first_on_or_after(&world, (t0 - chrono::Duration::days(7)).date_naive());
    let at_start: BTreeSet<String> = (from..events::cadence(&world).count_at(world.seed, t0))
        .map(|n| events::event(&world, n).unwrap().accession)
        .collect();
    let first_run: BTreeSet<String> = h.strings("SELECT accession FROM events").await.into_iter().collect();
    let missed: Vec<_> = at_start.difference(&first_run).take(5).collect();
    assert!(
        missed.is_empty(),
        "the first run missed events it was asked for: {missed:?}"
    );
    h.assert_unique("events", "accession").await;
    // What arrived after the backfill had gone past today: the next run's fresh read.
    run_ok(&h, &pipelines).await;

    let now = h.clock.now();
    let truth: BTreeSet<String> = (from..events::cadence(&world).count_at(world.seed, now))
        .map(|n| events::event(&world, n).unwrap().accession)
        .collect();
    let stored: BTreeSet<String> = h.strings("SELECT accession FROM events").await.into_iter().collect();
    let missing: Vec<_> = truth.difference(&stored).take(5).collect();
    assert!(
        missing.is_empty(),
        "{} of {} missing: {missing:?}",
        truth.len() - stored.len().min(truth.len()),
        truth.len()
    );
    assert_eq!(stored, truth);
    h.assert_unique("events", "accession").await;
    let asked = h
        .int("SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/events/wire%'")
        .await as usize;
    let least = truth.len().div_ceil(37);
    assert!(
        asked <= 2 * least,
        "{asked} wire requests for {} events: the least is {least}",
        truth.len()
    );
    println!(
        "capped wire: {} events in {asked} requests (least {least})",
        truth.len()
    );
}

/// The families the renamed-envelope test renames, and the pipeline each feeds.
const RENAMED: &[(&str, &str)] = &[
    ("wire", "events_wire"),
    ("geo", "geo"),
    ("filings", "filings"),
    ("monthly_revenue", "monthly_revenue"),
    ("regulation", "regulation"),
];

/// After a normal sync, a service whose lists are named otherwise on the
/// wire, geo, filings, monthly revenue and regulation: the run exits 1,
/// each affected pipeline is not `ok`, each body it could not read is in
/// `_sync_quarantine` (asked once, not retried), no table loses a row (the
/// regulation actions replaced per company among them), and the other
/// pipelines finish `ok`.
#[tokio::test]
async fn renamed_envelope_lists_fail_loudly_quarantine_the_bodies_and_lose_no_row() {
    let h = Harness::with_emulator(emulator_config(&frozen_clock(), roomy()), UNIVERSE).await;
    run_ok(&h, &h.all_pipelines).await;
    let before: BTreeMap<&str, i64> = {
        let mut counts = BTreeMap::new();
        for t in catalogue().filter(|t| !t.is_bookkeeping()) {
            counts.insert(t.name, h.int(&format!("SELECT count(*) FROM \"{}\"", t.name)).await);
        }
        counts
    };
    assert!(before["regulation_actions"] > 0, "regulation stored actions to lose");
    h.clock.as_sim().unwrap().advance(Duration::from_secs(3 * 3600));
    let families: Vec<&str> = RENAMED.iter().map(|(f, _)| *f).collect();
    h.emulator
        .emulator
        .set_quirks(Quirks::parse(&format!("rename={}", families.join("+"))).unwrap());
    let (report, result) = h.syncer.run_once(&h.all_pipelines).await;
    let error = result.expect_err("the run fails");
    assert_eq!(error.exit_code(), 1, "{error}");
    let affected: Vec<&str> = RENAMED.iter().map(|(_, p)| *p).collect();
    for o in &report.outcomes {
        if affected.contains(&o.pipeline.as_str()) {
            assert_ne!(o.status, RunStatus::Ok, "{o:?}");
            assert!(o.unreadable > 0, "{o:?}");
            assert!(o.error.as_deref().unwrap_or("").contains("unreadable"), "{o:?}");
        } else {
            assert_eq!(o.status, RunStatus::Ok, "{o:?}");
        }
    }
    let wire = report.outcomes.iter().find(|o| o.pipeline == "events_wire").unwrap();
    assert_eq!(wire.requests, 1, "an unreadable answer is not asked again: {wire:?}");
    for (family, pipeline) in RENAMED {
        let route = match *family {
            "wire" => "/api/v1/events/wire%",
            "geo" => "/api/v1/geo/countries%",
            "filings" => "/api/v1/companies/%/filing-notes",
            "monthly_revenue" => "/api/v1/companies/%/monthly-revenue",
            _ => "/api/v1/companies/%/regulation",
        };
        let kept = h
            .int(&format!(
                "SELECT count(*) FROM _sync_quarantine WHERE route LIKE '{route}' \
                 AND error LIKE 'unreadable response: missing field%' AND error LIKE '%top-level fields%data%' \
                 AND record LIKE '%\"data\":%'"
            ))
            .await;
        let outcome = report.outcomes.iter().find(|o| o.pipeline == *pipeline).unwrap();
        assert_eq!(kept as u64, outcome.unreadable, "{pipeline}: bodies kept for {route}");
    }
    for (table, count) in &before {
        let after = h.int(&format!("SELECT count(*) FROM \"{table}\"")).await;
        assert!(after >= *count, "{table}: {count} rows before, {after} after");
    }
    assert_eq!(
        h.int("SELECT count(*) FROM regulation_actions").await,
        before["regulation_actions"],
        "nothing replaced on an answer that could not be read"
    );
    let said: Vec<String> = report
        .outcomes
        .iter()
        .filter(|o| o.unreadable > 0)
        .map(|o| format!("{} {} ({} unreadable)", o.pipeline, o.status, o.unreadable))
        .collect();
    println!("quirks: renamed lists: exit 1; {}", said.join(", "));
}

/// A `null` list is unreadable too: not retried as a failed transfer, and
/// a per-company route goes on with its other companies.
#[tokio::test]
async fn a_null_list_is_unreadable_and_not_asked_again() {
    let h = Harness::with_emulator(
        with_quirks(&frozen_clock(), roomy(), "null=regulation+news"),
        &["MSFT", "AAPL"],
    )
    .await;
    let mut pipelines = h.only(&["companies", "regulation", "news"]);
    named(&mut pipelines, "news").params.backfill_days = Some(1);
    let (report, result) = h.syncer.run_once(&pipelines).await;
    assert_eq!(result.expect_err("the run fails").exit_code(), 1);
    let of = |name: &str| report.outcomes.iter().find(|o| o.pipeline == name).unwrap();
    assert_eq!(of("regulation").status, RunStatus::Partial, "{:?}", of("regulation"));
    assert_eq!((of("regulation").requests, of("regulation").unreadable), (2, 2));
    assert_eq!((of("news").status, of("news").requests), (RunStatus::Failed, 1));
    assert_eq!(of("companies").status, RunStatus::Ok);
    assert_eq!(h.int("SELECT count(*) FROM regulation_actions").await, 0);
    assert_eq!(
        h.int("SELECT count(*) FROM _sync_quarantine WHERE error LIKE 'unreadable response:%null%'")
            .await,
        3
    );
}

/// A service that writes CIKs without their padding (`789019`), the
/// universe naming one company three ways: the warehouse is the one a
/// padded service gives, every company key ten digits, no company split
/// in two, and every item text of the company's filings stored.
#[tokio::test]
async fn unpadded_ciks_are_one_company_key_and_store_what_padded_ones_store() {
    let companies = ["MSFT", "789019", "0000789019", "AAPL"];
    let names = [
        "companies",
        "dividends",
        "events",
        "events_wire",
        "event_texts",
        "company_news",
    ];
    let padded = synced("", &companies, &names).await;
    let unpadded = synced("unpadded_ciks", &companies, &names).await;
    let tables_of = [
        "companies",
        "company_versions",
        "dividends",
        "events",
        "event_item_texts",
        "news_items",
        "news_company_items",
    ];
    let expected = tables(&padded, Some(&tables_of)).await;
    let found = tables(&unpadded, Some(&tables_of)).await;
    let differ = differences(&expected, &found);
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert!(!expected["event_item_texts"].is_empty() && !expected["dividends"].is_empty());
    assert!(
        unpadded
            .int("SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/companies/789019/%'")
            .await
            == 0,
        "members are asked by their padded key"
    );
    assert_eq!(
        unpadded
            .int("SELECT count(DISTINCT company_key) FROM events WHERE company_key LIKE '%789019'")
            .await,
        1
    );
    assert_eq!(
        unpadded
            .int("SELECT count(*) FROM events WHERE company_key NOT SIMILAR TO '[0-9]{10}' AND company_key NOT LIKE '%:%'")
            .await,
        0
    );
    assert!(
        unpadded
            .int("SELECT count(*) FROM companies WHERE raw->>'cik' = '789019'")
            .await
            == 1,
        "raw keeps the cik as served"
    );
}

/// A forward page that holds the newest items after the cursor rather than
/// the oldest (newest first, more than a page having arrived): the items
/// between would be skipped, so the pipeline fails loudly, nothing of the
/// page is stored and the cursor stays; once the service pages properly the
/// tape has no gap.
#[tokio::test]
async fn an_after_page_that_does_not_follow_on_fails_loudly_and_leaves_no_gap() {
    let h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let mut pipelines = h.only(&["news"]);
    pipelines[0].params.backfill_days = Some(1);
    run_ok(&h, &pipelines).await;
    let cursor = "SELECT \"cursor\" FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''";
    let (items, checkpoint) = (h.int("SELECT count(*) FROM news_items").await, h.strings(cursor).await);
    // Four hours of news: more than a page of 200.
    h.clock.as_sim().unwrap().advance(Duration::from_secs(4 * 3600));
    h.emulator
        .emulator
        .set_quirks(Quirks::parse("after_newest_first").unwrap());
    let (report, result) = h.syncer.run_once(&pipelines).await;
    assert_eq!(result.expect_err("the run fails").exit_code(), 1);
    let news = &report.outcomes[0];
    assert_eq!(news.status, RunStatus::Failed, "{news:?}");
    assert!(
        news.error.as_deref().unwrap().contains("does not follow on"),
        "{news:?}"
    );
    assert_eq!(
        h.int("SELECT count(*) FROM news_items").await,
        items,
        "nothing of the page stored"
    );
    assert_eq!(h.strings(cursor).await, checkpoint, "the cursor stays");

    h.emulator.emulator.set_quirks(Quirks::default());
    run_ok(&h, &pipelines).await;
    let world = h.emulator.emulator.world();
    let count = news::CADENCE.count_at(world.seed, h.clock.now());
    let ids = h.strings("SELECT id FROM news_items ORDER BY id").await;
    let first = news::parse_id(&ids[0]).unwrap();
    assert_eq!(
        ids.len() as u64,
        count - first,
        "no gap from the oldest stored item to the newest"
    );
}

/// Item texts served empty the first time: none is stored as a text, the
/// run says how many it is short, the next run right after asks for none of
/// them (they wait), and once the wait is over each is asked again and stored.
#[tokio::test]
async fn empty_item_texts_are_asked_again_after_a_wait_not_every_run() {
    // Noon: the wait below ends the same day, so the texts' window of days stays put.
    let clock = Clock::simulated("2026-11-25T12:00:00Z".parse().unwrap(), 0.0);
    let h = Harness::with_emulator(with_quirks(&clock, PlanLimits::build(), "empty_texts"), &["MSFT"]).await;
    let mut pipelines = h.only(&["companies", "events", "event_texts"]);
    named(&mut pipelines, "event_texts").params.text_days = Some(30);
    let (report, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let texts = report.outcomes.iter().find(|o| o.pipeline == "event_texts").unwrap();
    assert_eq!(texts.status, RunStatus::Partial, "{texts:?}");
    assert!(texts.shortfall > 0 && texts.requests >= texts.shortfall, "{texts:?}");
    assert_eq!(h.int("SELECT count(*) FROM event_item_texts").await, 0);
    assert_eq!(
        h.int("SELECT shortfall FROM _sync_runs WHERE pipeline = 'event_texts'")
            .await as u64,
        texts.shortfall
    );
    let waiting = h
        .int("SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'event_texts' AND \"partition\" LIKE 'empty:%'")
        .await;
    assert_eq!(waiting as u64, texts.shortfall, "each empty text remembered");

    // No new filings from here on: the texts only.
    let texts_only: Vec<Pipeline> = pipelines.into_iter().filter(|p| p.name == "event_texts").collect();
    let (report, result) = h.syncer.run_once(&texts_only).await;
    result.unwrap();
    assert_eq!(
        report.outcomes[0].requests, 0,
        "texts served empty wait: {:?}",
        report.outcomes
    );

    h.clock.as_sim().unwrap().advance(Duration::from_secs(7 * 3600));
    run_ok(&h, &texts_only).await;
    let stored = h.int("SELECT count(*) FROM event_item_texts WHERE text <> ''").await;
    assert_eq!(
        stored as u64, texts.shortfall,
        "each text asked again once its wait was over"
    );
    assert_eq!(h.int("SELECT count(*) FROM event_item_texts WHERE text = ''").await, 0);
}

/// Headlines rewritten while `updatedAt` stays put: every headline version
/// some run could have seen is a revision, each once.
#[tokio::test]
async fn a_headline_rewritten_without_updated_at_moving_is_still_a_revision() {
    let (h, versions) = news_over_a_day("frozen_updated_at").await;
    assert_eq!(
        h.int("SELECT count(*) FROM news_items WHERE updated_at <> first_seen_at")
            .await,
        0,
        "updatedAt never moved"
    );
    let revisions: BTreeSet<String> = h
        .strings("SELECT id || '|' || headline FROM news_headline_revisions")
        .await
        .into_iter()
        .collect();
    assert_eq!(revisions, versions, "every headline version seen, once");
    h.assert_unique("news_headline_revisions", "id, updated_at").await;
    h.assert_unique("news_headline_revisions", "id, headline").await;
}

/// The news tape polled four times over a day from a service with `quirk`:
/// the harness, and every headline version one of those runs could have
/// seen (some of the stored headlines were rewritten).
async fn news_over_a_day(quirk: &str) -> (Harness, BTreeSet<String>) {
    let h = Harness::with_emulator(with_quirks(&frozen_clock(), PlanLimits::build(), quirk), &["MSFT"]).await;
    let mut pipelines = h.only(&["news"]);
    pipelines[0].params.backfill_days = Some(1);
    let world = h.emulator.emulator.world().clone();
    let run_times = run_ok_after(&h, &pipelines, &[0, 20, 100, 24 * 60]).await;
    let ids = h.strings("SELECT id FROM news_items ORDER BY id").await;
    let first = news::parse_id(&ids[0]).unwrap();
    let (versions, rewritten) = headline_versions(&world, first, &run_times);
    assert!(rewritten > 0, "headlines already stored were rewritten");
    (h, versions)
}

/// Timestamps served without an offset are read as UTC: nothing is
/// quarantined and every table holds what a service writing `Z` gives.
#[tokio::test]
async fn offsetless_timestamps_are_read_as_utc() {
    let names = ["companies", "events", "events_wire", "news", "regulation", "coverage"];
    let companies = ["MSFT", "AAPL"];
    let contract = synced("", &companies, &names).await;
    let offsetless = synced("offsetless_timestamps", &companies, &names).await;
    assert_eq!(
        offsetless.int("SELECT count(*) FROM _sync_quarantine").await,
        0,
        "{:?}",
        offsetless.strings("SELECT error FROM _sync_quarantine LIMIT 3").await
    );
    let differ = differences(&tables(&contract, None).await, &tables(&offsetless, None).await);
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert!(
        offsetless
            .int(
                "SELECT count(*) FROM news_items WHERE raw->>'firstSeenAt' NOT LIKE '%Z' AND first_seen_at IS NOT NULL"
            )
            .await
            > 0,
        "raw keeps the timestamps as served"
    );
}

/// A 429 without `code` once another client of the key has spent the day's
/// quota: `X-Quota-Remaining: 0` and a `Retry-After` to the window's end make
/// it the quota wall. The run stops at once with exit 75 rather than sleeping
/// (holding the warehouse's lock) until the quota resets.
#[tokio::test]
async fn a_429_without_code_at_zero_quota_is_the_quota_wall() {
    let h = Harness::with_emulator(with_quirks(&frozen_clock(), PlanLimits::free(), "bare_429"), &["MSFT"]).await;
    let http = reqwest::Client::new();
    for _ in 0..251 {
        http.get(format!("{}/api/v1/indices", h.emulator.base_url()))
            .header("X-API-KEY", TEST_KEY)
            .send()
            .await
            .unwrap();
    }
    let started = h.clock.now();
    let (report, result) = h.syncer.run_once(&h.only(&["indices", "coverage"])).await;
    let error = result.expect_err("the quota is spent");
    assert_eq!(error.exit_code(), 75, "{error}");
    assert_eq!(report.outcomes[0].status, RunStatus::QuotaExhausted, "{report:?}");
    assert_eq!(report.outcomes[0].requests, 1, "not retried: {report:?}");
    assert!(
        h.clock.now() - started < chrono::Duration::minutes(1),
        "the run did not wait for the reset"
    );
}

/// An event whose filing date the service restates (a year earlier) moves
/// to another lake partition: the publish removes its old copy there, so
/// the lake holds each accession once, with the warehouse's date.
#[tokio::test]
async fn a_row_whose_partition_changes_leaves_no_old_copy_in_the_lake() {
    let h = Harness::new(PlanLimits::build(), &["MSFT", "AAPL"]).await;
    let work = tempfile::tempdir().unwrap();
    let lake_dir = work.path().join("lake");
    let lake = fdsync_core::lake::Lake::open(&lake_dir.display().to_string(), work.path().join("scratch")).unwrap();
    let pipelines = h.only(&["companies", "events"]);
    run_ok(&h, &pipelines).await;
    lake.publish(&h.syncer.sink).await.unwrap();
    h.emulator.emulator.set_quirks(Quirks::parse("redated").unwrap());
    h.clock.as_sim().unwrap().advance(Duration::from_secs(24 * 3600));
    run_ok(&h, &pipelines).await;
    // Restated: a filing date a year before the filing was accepted.
    let restated = "filing_date + INTERVAL 300 DAY < CAST(left(CAST(accepted_at AS VARCHAR), 10) AS DATE)";
    let moved = h.int(&format!("SELECT count(*) FROM events WHERE {restated}")).await;
    lake.publish(&h.syncer.sink).await.unwrap();

    let table = &fdsync_core::feeds::events::EVENTS;
    let delta = fdsync_core::lake::delta::open_existing(lake.root(), table)
        .await
        .unwrap()
        .unwrap();
    let files: Vec<String> = fdsync_core::lake::delta::live_files(&delta, table)
        .unwrap()
        .into_iter()
        .map(|f| format!("'{}'", lake_dir.join("events").join(&f.path).display()))
        .collect();
    let sql = format!(
        "SELECT accession || '|' || CAST(filing_date AS VARCHAR) FROM read_parquet([{}], hive_partitioning = false)",
        files.join(", ")
    );
    let in_lake = h.strings(&sql).await;
    let distinct: BTreeSet<String> = in_lake.iter().cloned().collect();
    assert_eq!(in_lake.len(), distinct.len(), "an accession twice in the lake");
    let warehouse: BTreeSet<String> = h
        .strings("SELECT accession || '|' || CAST(filing_date AS VARCHAR) FROM events")
        .await
        .into_iter()
        .collect();
    assert_eq!(distinct, warehouse);
    let in_lake_restated = h
        .int(&format!(
            "SELECT count(*) FROM read_parquet([{}], hive_partitioning = false) WHERE {restated}",
            files.join(", ")
        ))
        .await;
    assert!(moved > 0, "rows moved to an earlier year");
    assert_eq!(in_lake_restated, moved);
}

/// The wire withholds one page (empty, its total true): the window ends
/// there, so the run holds its stored events against the service's count,
/// ends `partial` with the numbers in `_sync_runs`, the summary and the
/// metrics, and marks nothing complete; the next run fetches the rest.
#[tokio::test]
async fn a_withheld_page_is_a_shortfall_and_the_next_run_fetches_the_rest() {
    let h = Harness::with_emulator(
        with_quirks(&frozen_clock(), roomy(), "page_cap=37,withhold_page=37"),
        &["MSFT"],
    )
    .await;
    let mut pipelines = h.only(&["events_wire"]);
    pipelines[0].params.backfill_days = Some(7);
    let (report, result) = h.syncer.run_once(&pipelines).await;
    if let Err(e) = &result {
        panic!("{e}: {report:?}");
    }
    let wire = &report.outcomes[0];
    assert_eq!(wire.status, RunStatus::Partial, "{wire:?}");
    assert!(wire.shortfall > 0, "{wire:?}");
    assert!(
        wire.error
            .as_deref()
            .unwrap()
            .contains("incomplete: the service counts"),
        "{wire:?}"
    );
    let (status, shortfall) = (
        h.strings("SELECT status FROM _sync_runs WHERE pipeline = 'events_wire'")
            .await,
        h.int("SELECT shortfall FROM _sync_runs WHERE pipeline = 'events_wire'")
            .await,
    );
    assert_eq!((status, shortfall as u64), (vec!["partial".to_owned()], wire.shortfall));
    assert_ne!(
        h.strings(
            "SELECT \"cursor\" FROM _sync_checkpoints WHERE pipeline = 'events_wire' AND \"partition\" = 'backfill'"
        )
        .await,
        vec![fdsync_core::sync::BACKFILL_COMPLETE.to_owned()]
    );
    println!(
        "quirks: a withheld wire page: partial, {} short: {}",
        wire.shortfall,
        wire.error.as_deref().unwrap()
    );
    let status = h.syncer.status(&pipelines).await.unwrap();
    let mut text = Vec::new();
    fdsync_commands::status::write_text(&mut text, &status).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains(&format!("incomplete: {} record(s)", wire.shortfall)),
        "{text}"
    );
    let now = h.clock.now();
    let summary = fdsync_core::sync::RunSummary::new(
        &report,
        &result,
        status,
        fdsync_core::sync::QuotaLeft::default(),
        (now, now),
        &[],
    );
    let json = serde_json::to_value(&summary).unwrap();
    assert_eq!(json["shortfall"], serde_json::json!(wire.shortfall), "{json}");
    assert_eq!(
        json["pipelines"][0]["shortfall"],
        serde_json::json!(wire.shortfall),
        "{json}"
    );
    assert_eq!(json["status"], "partial");
    assert!(
        fdsync_core::metrics::render().contains("fdsync_pipeline_shortfall{pipeline=\"events_wire\"}"),
        "the gauge"
    );

    run_ok(&h, &pipelines).await;
    let world = h.emulator.emulator.world();
    let from = events::first_on_or_after(world, (h.clock.now() - chrono::Duration::days(7)).date_naive());
    let count = events::cadence(world).count_at(world.seed, h.clock.now());
    assert_eq!(h.int("SELECT count(*) FROM events").await as u64, count - from);
}

/// The regulation actions as stored: company, document, basis, rank.
async fn regulation_rows(h: &Harness) -> BTreeSet<String> {
    h.strings("SELECT company_key || '|' || document_id || '|' || basis || '|' || rank FROM regulation_actions")
        .await
        .into_iter()
        .collect()
}

/// After a normal sync, regulation answers that fdsync cannot read whole:
/// first every action's links under another name, then one action a
/// record of the wrong shape. Each run ends not `ok`, says the route and
/// why nothing was replaced, keeps the bodies or records in quarantine, and
/// no stored action is deleted; once the answers read whole again, the
/// table equals the service's.
#[tokio::test]
async fn a_renamed_inner_list_or_a_quarantined_action_deletes_no_stored_row() {
    let companies = ["MSFT", "TW:2330", "JP:7203"];
    let h = synced("", &companies, &["companies", "regulation"]).await;
    let regulation = h.only(&["regulation"]);
    let stored = regulation_rows(&h).await;
    assert!(stored.len() > 3, "actions to lose: {stored:?}");

    for slip in ["rename_inner", "bad_record"] {
        h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
        match slip {
            "rename_inner" => h
                .emulator
                .emulator
                .set_quirks(Quirks::parse("rename_inner=regulation").unwrap()),
            _ => h.emulator.emulator.set_faults(fdsync_emulator::Faults {
                bad_record: 1.0,
                ..Default::default()
            }),
        }
        let (report, result) = h.syncer.run_once(&regulation).await;
        result.unwrap();
        let outcome = &report.outcomes[0];
        assert_eq!(outcome.status, RunStatus::Partial, "{slip}: {outcome:?}");
        let said = outcome.error.as_deref().unwrap_or("");
        assert!(
            said.contains("regulation_actions of") && said.contains("/regulation was not read whole"),
            "{slip}: {said}"
        );
        assert!(said.contains("stored rows are kept"), "{slip}: {said}");
        let after = regulation_rows(&h).await;
        let lost: Vec<_> = stored.difference(&after).collect();
        assert!(lost.is_empty(), "{slip}: stored actions deleted: {lost:?}");
        h.emulator.emulator.set_quirks(Quirks::default());
        h.emulator.emulator.set_faults(fdsync_emulator::Faults::default());
    }
    assert!(
        h.int("SELECT count(*) FROM _sync_quarantine WHERE route LIKE '%/regulation'")
            .await
            >= 2,
        "the unread actions kept"
    );

    // Read whole again: the service's own set, as a clean sync stores it.
    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    run_ok(&h, &regulation).await;
    let fresh = synced("", &companies, &["companies", "regulation"]).await;
    fresh.clock.as_sim().unwrap().advance_to(h.clock.now());
    run_ok(&fresh, &fresh.only(&["regulation"])).await;
    assert_eq!(regulation_rows(&h).await, regulation_rows(&fresh).await);
}

/// Prices refused for one company of five (402 `upgrade_required`: the
/// key's plan does not include the route for it): the other four get every
/// bar, the pipeline ends `ok` with the refusal reported in the outcome and
/// in `fdsync status` in words, and the next runs within a day do not ask
/// the refused route again; a day later it is asked once more.
#[tokio::test]
async fn a_402_for_one_company_of_five_leaves_the_other_four_synced_and_is_remembered() {
    let companies = ["AAPL", "MSFT", "TW:2330", "JP:7203", "O"];
    let config = with_quirks(&frozen_clock(), roomy(), "unserved=prices@TW:2330:402");
    let h = Harness::with_emulator(config, &companies).await;
    let pipelines = h.only(&["companies", "prices"]);
    let (report, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let prices = report.outcomes.iter().find(|o| o.pipeline == "prices").unwrap();
    assert_eq!(prices.status, RunStatus::Ok, "{prices:?}");
    assert_eq!(prices.not_served.len(), 1, "{prices:?}");
    assert!(
        prices.not_served[0].contains("402 upgrade_required") && prices.not_served[0].contains("plan"),
        "{prices:?}"
    );
    let with_bars = h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await;
    assert_eq!(with_bars, 4, "every company but the refused one");
    let world = h.emulator.emulator.world().clone();
    for id in ["AAPL", "MSFT", "JP:7203", "O"] {
        let cik = world.resolve(id).unwrap().cik;
        assert!(
            h.int(&format!(
                "SELECT count(*) FROM prices_daily WHERE company_key = '{cik}'"
            ))
            .await
                > 200,
            "{id}: a year of bars"
        );
    }
    let status = h.syncer.status(&h.all_pipelines).await.unwrap();
    let mut text = Vec::new();
    fdsync_commands::status::write_text(&mut text, &status).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        text.contains("not served: TW:2330 (402 upgrade_required: the key's plan does not include this route at"),
        "{text}"
    );

    let refused_asks = || async {
        h.int("SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/companies/TW%3A2330/prices%'")
            .await
    };
    assert_eq!(refused_asks().await, 1);
    for hours in [6, 12] {
        h.clock.as_sim().unwrap().advance(Duration::from_secs(hours * 3600));
        let (report, result) = h.syncer.run_once(&h.only(&["prices"])).await;
        result.unwrap();
        assert_eq!(report.outcomes[0].status, RunStatus::Ok, "{report:?}");
        assert!(report.outcomes[0].not_served[0].contains("not asked"), "{report:?}");
    }
    assert_eq!(refused_asks().await, 1, "not asked again within the day");
    h.clock.as_sim().unwrap().advance(Duration::from_secs(7 * 3600));
    run_ok(&h, &h.only(&["prices"])).await;
    assert_eq!(refused_asks().await, 2, "asked again a day later");
}

/// A service that reads a filter's several values from repeated parameters
/// takes the contract's comma list for one value and serves an empty tape:
/// the run ends `partial` saying so and what to set, and marks nothing
/// complete. With `[news] list_form = "repeated"` the tape is the one a
/// service reading comma lists serves for the same filter.
#[tokio::test]
async fn news_filters_go_in_the_form_the_service_reads_or_the_run_says_so() {
    let tickers = vec!["MSFT".to_owned(), "AAPL".to_owned()];
    let mut h = Harness::with_emulator(with_quirks(&frozen_clock(), roomy(), "repeated_filters"), &["MSFT"]).await;
    h.restart(|c| c.news.tickers = tickers.clone()).await;
    let mut news = h.only(&["news"]);
    news[0].params.backfill_days = Some(2);
    let (report, result) = h.syncer.run_once(&news).await;
    result.unwrap();
    let outcome = &report.outcomes[0];
    assert_eq!(outcome.status, RunStatus::Partial, "{outcome:?}");
    let said = outcome.error.as_deref().unwrap_or("");
    assert!(
        said.contains("/api/v1/news/feed") && said.contains("list_form = \"repeated\""),
        "{said}"
    );
    assert_eq!(h.int("SELECT count(*) FROM news_items").await, 0);

    h.restart(|c| c.news.list_form = fdsync_core::config::ListForm::Repeated)
        .await;
    run_ok(&h, &news).await;
    let mut comma = Harness::with_emulator(with_quirks(&frozen_clock(), roomy(), ""), &["MSFT"]).await;
    comma.restart(|c| c.news.tickers = tickers.clone()).await;
    run_ok(&comma, &news).await;
    let ids = "SELECT id FROM news_items ORDER BY id";
    let stored = h.strings(ids).await;
    assert!(stored.len() > 10, "{} items", stored.len());
    assert_eq!(stored, comma.strings(ids).await);
}

/// News pages without `serverTime`: the forward poll still asks for the
/// headlines rewritten since its last page, from the newest first sighting
/// it saw, so every headline version a run could have seen is a revision,
/// as with the contract's pages.
#[tokio::test]
async fn news_pages_without_server_time_still_bring_every_rewrite() {
    let (h, versions) = news_over_a_day("no_server_time").await;
    let revisions: BTreeSet<String> = h
        .strings("SELECT id || '|' || headline FROM news_headline_revisions")
        .await
        .into_iter()
        .collect();
    let missing: Vec<_> = versions.difference(&revisions).take(3).collect();
    assert!(missing.is_empty(), "headline versions never stored: {missing:?}");
    assert_eq!(revisions, versions);
    let asked = h
        .int("SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/news/feed?after=%&changedSince=%'")
        .await;
    assert!(asked >= 3, "every forward poll asked for rewrites: {asked}");
}

/// A wire whose `from` and `to` leave out the days they name: the first run
/// reads, then asks for a one-day window of a day it stored, finds it
/// empty and fails naming the route; the next run asks that first and
/// stops before reading. Once the wire includes its edge days, the check
/// passes once and is not asked again.
#[tokio::test]
async fn a_wire_whose_dates_leave_out_the_edge_days_is_refused_before_reading() {
    let h = Harness::with_emulator(with_quirks(&frozen_clock(), roomy(), "exclusive_dates"), &["MSFT"]).await;
    let mut wire = h.only(&["events_wire"]);
    wire[0].params.backfill_days = Some(3);
    let probes = "SELECT count(*) FROM _sync_requests WHERE route LIKE '/api/v1/events/wire?%limit=1&offset=0'";
    let (report, result) = h.syncer.run_once(&wire).await;
    assert_eq!(result.expect_err("the run fails").exit_code(), 1);
    let outcome = &report.outcomes[0];
    assert_eq!(outcome.status, RunStatus::Failed, "{outcome:?}");
    let said = outcome.error.as_deref().unwrap_or("");
    assert!(
        said.contains("/api/v1/events/wire?") && said.contains("leave out the edge days"),
        "{said}"
    );
    assert_eq!(h.int(probes).await, 1);

    h.clock.as_sim().unwrap().advance(Duration::from_secs(3600));
    let (report, result) = h.syncer.run_once(&wire).await;
    assert!(result.is_err());
    assert_eq!(report.outcomes[0].requests, 1, "stopped before reading: {report:?}");

    h.emulator.emulator.set_quirks(Quirks::default());
    for _ in 0..2 {
        h.clock.as_sim().unwrap().advance(Duration::from_secs(3600));
        run_ok(&h, &wire).await;
    }
    assert_eq!(h.int(probes).await, 3, "checked once the wire includes its edge days");
}

/// A field the service adds at envelope level, beside the record lists, on
/// every route: named by `fdsync status` once per route as `$.<field>`, its
/// value kept for every response in `_sync_envelope_fields`, and the data
/// tables what they are without it.
#[tokio::test]
async fn a_field_added_at_envelope_level_is_named_by_status_and_kept_for_each_response() {
    let names = ["prices", "news", "events_wire", "geo"];
    let plain = synced("", &["MSFT", "AAPL"], &names).await;
    let quirked = synced("envelope_field=factSource", &["MSFT", "AAPL"], &names).await;
    let diff = differences(&tables(&plain, None).await, &tables(&quirked, None).await);
    assert!(diff.is_empty(), "{}", diff.join("\n"));
    assert_eq!(plain.int("SELECT count(*) FROM _sync_unknown_fields").await, 0);

    let routes = quirked
        .strings("SELECT route FROM _sync_unknown_fields WHERE field = '$.factSource' ORDER BY 1")
        .await;
    for route in [
        "/api/v1/companies/{id}/prices",
        "/api/v1/news/feed",
        "/api/v1/events/wire",
        "/api/v1/geo/countries",
    ] {
        assert!(routes.iter().any(|r| r == route), "{route} not among {routes:?}");
    }
    let status = quirked.syncer.status(&quirked.all_pipelines).await.unwrap();
    let mut text = Vec::new();
    fdsync_commands::status::write_text(&mut text, &status).unwrap();
    let text = String::from_utf8(text).unwrap();
    for route in [
        "/api/v1/companies/{id}/prices",
        "/api/v1/news/feed",
        "/api/v1/events/wire",
    ] {
        assert!(text.contains(&format!("{route} $.factSource")), "{text}");
    }
    // Kept as served, once for every answer with an envelope: a company's
    // own payload is its record, kept whole in `raw` of companies.
    let answers = quirked
        .int(
            "SELECT count(*) FROM _sync_requests WHERE status = 200 \
             AND NOT regexp_matches(route, '^/api/v1/companies/[^/?]+$')",
        )
        .await;
    let kept = quirked
        .int("SELECT count(DISTINCT (route, fetched_at)) FROM _sync_envelope_fields WHERE field = '$.factSource'")
        .await;
    assert_eq!(kept, answers);
    let values = quirked
        .strings("SELECT DISTINCT json_extract_string(value, '$.source') FROM _sync_envelope_fields")
        .await;
    assert_eq!(values, ["EDGAR full-text index"]);
}
