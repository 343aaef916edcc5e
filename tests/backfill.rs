//! Backfills complete by default: each reaches everything the service
//! serves, newest first, with what the quota leaves after the fresh polls,
//! over as many runs as that takes; `fdsync status` says how far each got.

use std::collections::BTreeSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fdsync_commands::status::BackfillStatus;
use fdsync_core::clock::Clock;
use fdsync_emulator::{PlanLimits, company_docs, events, news};

use crate::util::{Harness, emulator_config};

/// The rows of a two-column query.
async fn pairs(h: &Harness, sql: &str) -> BTreeSet<(String, String)> {
    let sql = format!("SELECT a || '|' || b FROM ({sql}) AS t(a, b)");
    h.strings(&sql)
        .await
        .into_iter()
        .map(|r| {
            let (a, b) = r.split_once('|').unwrap();
            (a.to_owned(), b.to_owned())
        })
        .collect()
}

/// Each pipeline's backfill as `fdsync status` reads it.
fn backfills(h: &Harness, pipelines: &[fdsync_core::pipeline::Pipeline]) -> Vec<Option<BackfillStatus>> {
    let path = h.syncer.config.warehouse.duckdb.clone();
    let status = fdsync_commands::status::read(&path, pipelines, h.clock.now()).unwrap();
    status.pipelines.into_iter().map(|p| p.backfill).collect()
}

/// A backfill under a small budget: five requests a run, a day apart, on a
/// sparse wire with no horizon. Every run first takes the filings that
/// arrived since the last, then reaches further back, newest first, so what
/// is stored is always everything from some day on; `fdsync status` says
/// how far it reached and what is left; the runs converge on the whole wire.
#[tokio::test]
async fn a_wire_backfill_under_a_small_budget_converges_newest_first_polling_fresh_filings_every_run() {
    let config = fdsync_emulator::EmulatorConfig {
        filing_spacing_minutes: 2880,
        ..emulator_config(&crate::util::frozen_clock(), PlanLimits::scale(1_000_000, None))
    };
    let mut h = Harness::with_emulator(config, &["MSFT"]).await;
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let mut wire = h.only(&["events_wire"]);
    wire[0].params.backfill_days = None;
    let cadence = events::cadence(&world);
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs <= 12, "the backfill did not converge in 12 runs");
        h.restart(|_| {}).await;
        h.syncer.client.limit_requests(5);
        let _ = h.syncer.run_once(&wire).await;
        let count = cadence.count_at(world.seed, h.clock.now());
        let newest = events::event(&world, count - 1).unwrap().accession;
        let stored: BTreeSet<String> = h.strings("SELECT accession FROM events").await.into_iter().collect();
        assert!(
            stored.contains(&newest),
            "run {runs}: the newest filing is polled first"
        );
        // Newest first: stored is every filing from the oldest stored one on.
        let oldest = (0..count)
            .find(|&n| stored.contains(&events::event(&world, n).unwrap().accession))
            .unwrap();
        assert_eq!(
            stored.len() as u64,
            count - oldest,
            "run {runs}: no gap newer than the oldest stored"
        );
        let path = h.syncer.config.warehouse.duckdb.clone();
        let status = fdsync_commands::status::read(&path, &wire, h.clock.now()).unwrap();
        let backfill = status.pipelines[0].backfill.as_ref().expect("a backfill status");
        if oldest == 0 {
            assert!(backfill.complete, "run {runs}: {backfill:?}");
            break;
        }
        assert_eq!(backfill.records_left, Some(oldest), "run {runs}: {backfill:?}");
        sim.advance(Duration::from_secs(24 * 3600));
    }
    println!("wire: a 4,000-filing backfill at 5 requests a run converged in {runs} runs");
    assert!(runs >= 4, "the budget did cut the backfill");
}

/// The news tape and a company's tape with no horizon, five requests a run,
/// an hour apart, on a tape that began a day and a half before. Every run
/// first takes what arrived since the last, on both tapes, then goes back
/// from where the last run stopped (the head a first, one-page horizon
/// left, not read again), so what is stored is always everything from some
/// item on; the runs converge on the whole tape, and status says how far.
#[tokio::test]
async fn a_news_backfill_under_a_small_budget_reaches_the_start_of_the_tape_newest_first_polling_fresh_items_every_run()
{
    let start: DateTime<Utc> = "2025-06-02T12:00:00Z".parse().unwrap();
    let clock = Clock::simulated(start, 0.0);
    let mut h = Harness::with_emulator(emulator_config(&clock, PlanLimits::build()), &["MSFT"]).await;
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let msft = world.resolve("MSFT").unwrap();
    let lineage: Vec<String> = std::iter::once(msft.cik.clone())
        .chain(msft.predecessors.clone())
        .collect();
    let ours =
        |n: u64, now| news::item(&world, n, now).is_some_and(|it| it.body.ciks.iter().any(|k| lineage.contains(k)));
    let (report, result) = h.syncer.run_once(&h.only(&["companies"])).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));

    let mut tapes = h.only(&["news", "company_news"]);
    // A first sync to a horizon of the head page alone.
    tapes[0].params.backfill_days = Some(0);
    let (report, result) = h.syncer.run_once(&tapes[..1]).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    assert_eq!(report.outcomes[0].requests, 1, "the head reaches past a horizon of now");
    let mut news_requests = 1;
    for p in &mut tapes {
        p.params.backfill_days = None;
    }
    let mut runs = 0;
    let mut reached_before = None;
    loop {
        runs += 1;
        assert!(runs <= 20, "the backfills did not converge in 20 runs");
        sim.advance(Duration::from_secs(3600));
        h.restart(|_| {}).await;
        h.syncer.client.limit_requests(5);
        let (report, _) = h.syncer.run_once(&tapes).await;
        news_requests += report.outcomes[0].requests;
        assert!(
            report.outcomes.len() == 2 && report.outcomes[1].requests >= 1,
            "run {runs}: the company's tape is polled too: {report:?}"
        );
        let now = h.clock.now();
        let count = news::CADENCE.count_at(world.seed, now);
        let stored: BTreeSet<u64> = h
            .strings("SELECT id FROM news_items")
            .await
            .iter()
            .map(|id| news::parse_id(id).unwrap())
            .collect();
        assert!(
            stored.contains(&(count - 1)),
            "run {runs}: the newest item is polled first"
        );
        // Newest first: every item since the oldest the tape reached is stored
        // (news_items also holds the company's older items, from its own tape).
        let cursor = h
            .strings("SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''")
            .await;
        let cursor: serde_json::Value = serde_json::from_str(&cursor[0]).unwrap();
        let from = match cursor["reached"].as_str() {
            Some(t) => news::CADENCE.first_at_or_after(t.parse().unwrap()) + 1,
            None => 0,
        };
        let gaps = (from..count).filter(|n| !stored.contains(n)).count();
        assert_eq!(
            gaps, 0,
            "run {runs}: no gap newer than where the tape reached: {cursor}"
        );
        let oldest = if cursor["complete"] == true { 0 } else { from };
        let newest_ours = (0..count).rev().find(|&n| ours(n, now)).unwrap();
        let company: BTreeSet<u64> = h
            .strings(&format!(
                "SELECT news_id FROM news_company_items WHERE company_key = '{}'",
                msft.cik
            ))
            .await
            .iter()
            .map(|id| news::parse_id(id).unwrap())
            .collect();
        assert!(
            company.contains(&newest_ours),
            "run {runs}: the company's newest item is polled every run"
        );
        let status = backfills(&h, &tapes);
        let (tape, company_tape) = (status[0].as_ref().unwrap(), status[1].as_ref().unwrap());
        if !tape.complete {
            let reached = tape.reached.expect("how far the tape reached");
            assert!(reached_before.is_none_or(|r| reached <= r), "run {runs}: {tape:?}");
            reached_before = Some(reached);
        }
        if tape.complete && company_tape.complete {
            assert_eq!(oldest, 0, "run {runs}: the whole tape");
            assert_eq!(stored.len() as u64, count, "run {runs}: the whole tape");
            let truth: BTreeSet<u64> = (0..count).filter(|&n| ours(n, now)).collect();
            assert_eq!(company, truth, "the company's whole tape");
            let share = company_tape.share.as_ref().unwrap();
            assert_eq!((share.done, share.total), (1, 1));
            let pages = count.div_ceil(200);
            println!(
                "news: a {count}-item tape at 5 requests a run converged in {runs} runs, {news_requests} requests ({pages} pages)"
            );
            assert!(
                news_requests <= pages + runs + 1,
                "{news_requests} news requests: pages read twice (the tape is {pages} pages, {runs} forward polls)"
            );
            break;
        }
    }
    assert!(runs >= 4, "the budget did cut the backfill");
    h.assert_unique("news_items", "id").await;
}

/// Item texts and filing sections with no horizon, forty requests a run, a
/// day apart: the index and the filing lists are polled every run, the
/// texts go newest first, so what is missing is always older than what is
/// stored; status counts what is stored of what is listed; the runs
/// converge on every text of the companies' whole history.
#[tokio::test]
async fn item_texts_and_sections_backfill_newest_first_to_the_whole_history_under_a_small_budget() {
    // A filing every two days since 2004: a company's share is a few dozen.
    let config = fdsync_emulator::EmulatorConfig {
        filing_spacing_minutes: 2880,
        ..emulator_config(&crate::util::frozen_clock(), PlanLimits::build())
    };
    let mut h = Harness::with_emulator(config, &["MSFT"]).await;
    let world = h.emulator.emulator.world().clone();
    let sim = h.clock.as_sim().unwrap().clone();
    let msft = world.resolve("MSFT").unwrap();
    let filer = events::filer_of(&world, &msft);
    let (report, result) = h.syncer.run_once(&h.only(&["companies"])).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let mut pipelines = h.only(&["events", "event_texts", "filings"]);
    for p in &mut pipelines {
        p.params.text_days = None;
    }
    let mut runs = 0;
    loop {
        runs += 1;
        assert!(runs <= 30, "the backfills did not converge in 30 runs");
        h.restart(|_| {}).await;
        h.syncer.client.limit_requests(40);
        let (report, _) = h.syncer.run_once(&pipelines).await;
        assert!(
            report.outcomes.len() == 3 && report.outcomes[2].requests >= 1,
            "run {runs}: the filing list is polled: {report:?}"
        );
        let today = h.clock.now().date_naive();
        let count = events::cadence(&world).count_at(world.seed, h.clock.now());
        // Every (date, document, part) the service lists, and which are stored.
        let mut texts = BTreeSet::new();
        for n in 0..count {
            if Some(events::filer(&world, n)) != filer {
                continue;
            }
            let e = events::event(&world, n).unwrap();
            let items: Vec<&str> = if e.items.is_empty() { vec![""] } else { e.items.clone() };
            for item in items {
                texts.insert((e.filing_date(), e.accession.clone(), item.to_owned()));
            }
        }
        let mut sections = BTreeSet::new();
        for f in company_docs::filings(&msft, today) {
            for s in f.sections {
                sections.insert((f.filed_at, f.accession.clone(), s.key.to_owned()));
            }
        }
        let stored_texts = pairs(&h, "SELECT accession, item FROM event_item_texts").await;
        let stored_sections = pairs(&h, "SELECT accession, section_key FROM filing_sections").await;
        let status = backfills(&h, &pipelines);
        let mut done = true;
        for (what, listed, stored, status) in [
            ("item texts", &texts, &stored_texts, status[1].as_ref()),
            ("sections", &sections, &stored_sections, status[2].as_ref()),
        ] {
            let is_stored =
                |(_, id, part): &&(chrono::NaiveDate, String, String)| stored.contains(&(id.clone(), part.clone()));
            let newest_missing = listed.iter().filter(|t| !is_stored(t)).map(|t| t.0).max();
            let oldest_stored = listed.iter().filter(is_stored).map(|t| t.0).min();
            assert_eq!(
                listed.iter().filter(is_stored).count(),
                stored.len(),
                "run {runs}: only {what} the service lists"
            );
            if let (Some(missing), Some(kept)) = (newest_missing, oldest_stored) {
                assert!(
                    missing <= kept,
                    "run {runs}: {what} newest first, yet {missing} is missing and {kept} stored"
                );
            }
            let status = status.unwrap_or_else(|| panic!("run {runs}: a status for {what}"));
            let share = status.share.as_ref().unwrap();
            assert_eq!(
                (share.done, share.total),
                (stored.len() as u64, listed.len() as u64),
                "run {runs}: {what}"
            );
            assert_eq!(status.complete, newest_missing.is_none(), "run {runs}: {what}");
            done &= status.complete;
        }
        if done {
            println!(
                "texts: {} item texts and {} sections at 40 requests a run in {runs} runs",
                texts.len(),
                sections.len()
            );
            break;
        }
        sim.advance(Duration::from_secs(24 * 3600));
    }
    assert!(runs >= 3, "the budget did cut the backfill");
    h.assert_unique("event_item_texts", "accession, item").await;
    h.assert_unique("filing_sections", "accession, section_key").await;
}

/// The first sync of every pipeline over a short tape (240 items, five
/// companies; the news backfill as shipped, to the start of the tape, the
/// others with the tests' horizons): the news backfill's last page lands its
/// checkpoint after the pages held before it, so the tape ends complete, and
/// the next run sends no `before=` request. Each answer takes 50 ms, as on a
/// real network: the last page then lands apart from the full page before it.
#[tokio::test]
async fn a_first_sync_of_every_shipped_pipeline_leaves_the_news_backfill_complete() {
    let start = news::CADENCE.epoch + chrono::Duration::seconds(240 * 45);
    let clock = Clock::simulated(start, 0.0);
    let config = fdsync_emulator::EmulatorConfig {
        faults: fdsync_emulator::Faults::parse("slow=1,slow_ms=50").unwrap(),
        ..emulator_config(&clock, PlanLimits::build())
    };
    let h = Harness::with_emulator(config, &["AAPL", "MSFT", "TW:2330", "JP:7203", "O"]).await;
    let mut every = crate::util::test_pipelines();
    for p in &mut every {
        if p.name == "news" {
            p.params.backfill_days = None;
        }
    }
    let count = news::CADENCE.count_at(h.emulator.emulator.world().seed, h.clock.now());
    assert!((200..=240).contains(&count), "{count} items: more than one page");
    let _ = h.syncer.run_once(&every).await;
    let cursor = h
        .strings("SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'news' AND \"partition\" = ''")
        .await;
    let cursor: serde_json::Value = serde_json::from_str(&cursor[0]).unwrap();
    assert_eq!(cursor["complete"], true, "{cursor}");
    assert_eq!(h.int("SELECT count(*) FROM news_items").await, count as i64);

    h.clock.as_sim().unwrap().advance(Duration::from_secs(3600));
    let (report, _) = h.syncer.run_once(&h.only(&["news"])).await;
    let back = h
        .int(&format!(
            "SELECT count(*) FROM _sync_requests WHERE run_id = '{}' AND route LIKE '%before=%'",
            report.run_id
        ))
        .await;
    assert_eq!(back, 0, "the finished backfill asks for nothing older");
}

/// A company removed while its news tape's backfill is unfinished: the tape
/// retires, so the pipeline's backfill is the configured companies' alone
/// (complete once theirs are, keeping nothing due); added back, the tape goes
/// on from where it stood.
#[tokio::test]
async fn a_company_removed_mid_backfill_retires_its_tape_and_added_back_goes_on() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT", "AAPL"]).await;
    let (report, result) = h.syncer.run_once(&h.only(&["companies"])).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let msft = h.emulator.emulator.world().resolve("MSFT").unwrap().cik;
    let mut tape = h.only(&["company_news"]);
    tape[0].params.backfill_days = None;
    h.syncer.client.limit_requests(3);
    let _ = h.syncer.run_once(&tape).await;
    let unfinished = backfills(&h, &tape).remove(0).expect("a backfill started");
    assert!(!unfinished.complete, "{unfinished:?}");
    let cursor_of = async |h: &Harness| -> serde_json::Value {
        let sql = format!(
            "SELECT cursor FROM _sync_checkpoints WHERE pipeline = 'company_news' AND \"partition\" = '{msft}'"
        );
        serde_json::from_str(&h.strings(&sql).await[0]).unwrap()
    };
    let stood = cursor_of(&h).await;
    assert!(stood["complete"].is_null() && stood["before"].is_string(), "{stood}");

    // MSFT removed: its tape retires where it stood; AAPL's backfill is all.
    h.restart(|c| c.universe.companies = vec!["AAPL".into()]).await;
    let (report, result) = h.syncer.run_once(&tape).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let retired = cursor_of(&h).await;
    assert_eq!(retired["retired"], true, "{retired}");
    assert_eq!(retired["before"], stood["before"], "not read while retired");
    let backfill = backfills(&h, &tape).remove(0).unwrap();
    assert!(backfill.complete, "a retired tape keeps nothing due: {backfill:?}");

    // Added back: read again from where it stood, to the start of its tape.
    h.restart(|c| c.universe.companies = vec!["MSFT".into(), "AAPL".into()])
        .await;
    let (report, result) = h.syncer.run_once(&tape).await;
    result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let back = cursor_of(&h).await;
    assert!(back["retired"].is_null(), "{back}");
    assert_eq!(back["complete"], true, "{back}");
    assert!(backfills(&h, &tape).remove(0).unwrap().complete);
}
