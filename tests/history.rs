//! What the service said before stays queryable: a row the service changes
//! or withdraws is kept in its table's versions, and `<table>_as_of(ts)`
//! reads the table as fdsync knew it at `ts`.

use std::time::Duration;

use fdsync_emulator::Quirks;

use crate::util::{Harness, frozen_clock, run_ok};

/// A local lake in `work`, published to after each step of a test.
fn local_lake(work: &tempfile::TempDir) -> fdsync_core::lake::Lake {
    let dir = work.path().join("lake");
    fdsync_core::lake::Lake::open(&dir.display().to_string(), work.path().join("scratch")).unwrap()
}

/// The lake holds as many rows of each of `tables` as the warehouse.
async fn lake_matches(h: &Harness, work: &tempfile::TempDir, tables: &[&str]) {
    let in_lake = crate::reliability::lake_rows(&work.path().join("lake")).await;
    for table in tables {
        let stored = h.int(&format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(in_lake.get(*table).copied().unwrap_or(0), stored, "{table} in the lake");
    }
}

/// The test account on a roomy plan, with `quirks` switched on.
fn with_quirks(quirks: &str) -> fdsync_emulator::EmulatorConfig {
    crate::quirks::with_quirks(&frozen_clock(), crate::quirks::roomy(), quirks)
}

const COMPANIES: [&str; 4] = ["AAPL", "MSFT", "O", "TW:2330"];
const PIPELINES: [&str; 3] = ["companies", "dividends", "monthly_revenue"];
const DIVIDENDS: &str = "company_key, ex_date, type, amount";
const MONTHS: &str = "company_key, month, revenue";

/// `columns` of `from` as one text per row, in order.
fn rows(columns: &str, from: &str) -> String {
    format!("SELECT concat_ws('|', {columns}) AS row FROM {from} ORDER BY row")
}

/// A dividend retyped and a month of revenue withdrawn after a normal sync:
/// the next run leaves both tables equal to what the service serves now (a
/// fresh sync of the same service), keeps the rows they held in their
/// versions tables, closed when the change was seen, and `<table>_as_of` a
/// moment before the change reads the tables as they were.
#[tokio::test]
async fn a_retyped_dividend_and_a_withdrawn_month_are_current_as_served_and_kept_as_versions() {
    let h = Harness::with_emulator(with_quirks(""), &COMPANIES).await;
    let pipelines = h.only(&PIPELINES);
    run_ok(&h, &pipelines).await;
    let work = tempfile::tempdir().unwrap();
    let lake = local_lake(&work);
    lake.publish(&h.syncer.sink).await.unwrap();
    let dividends_then = h.strings(&rows(DIVIDENDS, "dividends")).await;
    let months_then = h.strings(&rows(MONTHS, "monthly_revenue")).await;
    assert!(
        dividends_then.len() > 4 && months_then.len() > 4,
        "{dividends_then:?} {months_then:?}"
    );
    let before = h.clock.now();

    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    let changed_at = h.clock.now();
    h.emulator
        .emulator
        .set_quirks(Quirks::parse("retyped_dividend,withdrawn_month").unwrap());
    run_ok(&h, &h.only(&["dividends", "monthly_revenue"])).await;
    lake.publish(&h.syncer.sink).await.unwrap();
    lake_matches(
        &h,
        &work,
        &[
            "dividends",
            "dividends_versions",
            "monthly_revenue",
            "monthly_revenue_versions",
        ],
    )
    .await;

    let fresh = Harness::with_emulator(with_quirks("retyped_dividend,withdrawn_month"), &COMPANIES).await;
    fresh.clock.as_sim().unwrap().advance_to(changed_at);
    run_ok(&fresh, &fresh.only(&PIPELINES)).await;
    for (table, columns) in [("dividends", DIVIDENDS), ("monthly_revenue", MONTHS)] {
        let sql = rows(columns, table);
        assert_eq!(
            h.strings(&sql).await,
            fresh.strings(&sql).await,
            "{table}: not what the service serves"
        );
    }
    // One event per company paying dividends left its key (retyped), one
    // month per company filing monthly revenue was withdrawn: each kept.
    let payers = h.int("SELECT count(DISTINCT company_key) FROM dividends").await;
    let filers = h.int("SELECT count(DISTINCT company_key) FROM monthly_revenue").await;
    assert!(payers >= 2 && filers >= 1, "{payers} {filers}");
    let closed = format!("_superseded_at = TIMESTAMPTZ '{}'", changed_at.to_rfc3339());
    assert_eq!(
        h.int(&format!(
            "SELECT count(*) FROM dividends_versions WHERE _change = 'withdrawn' AND type = 'Cash' AND {closed}"
        ))
        .await,
        payers
    );
    assert_eq!(
        h.int(&format!(
            "SELECT count(*) FROM monthly_revenue_versions WHERE _change = 'withdrawn' AND {closed}"
        ))
        .await,
        filers
    );
    // As known before the change: the tables as they were, whatever came after.
    let as_of =
        |table: &str, at: chrono::DateTime<chrono::Utc>| format!("{table}_as_of(TIMESTAMPTZ '{}')", at.to_rfc3339());
    assert_eq!(
        h.strings(&rows(DIVIDENDS, &as_of("dividends", before))).await,
        dividends_then
    );
    assert_eq!(
        h.strings(&rows(MONTHS, &as_of("monthly_revenue", before))).await,
        months_then
    );
    // And as known now: today's tables.
    assert_eq!(
        h.strings(&rows(DIVIDENDS, &as_of("dividends", changed_at))).await,
        h.strings(&rows(DIVIDENDS, "dividends")).await
    );

    // Served the same again: nothing more is kept.
    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    let kept = h.int("SELECT count(*) FROM dividends_versions").await;
    run_ok(&h, &h.only(&["dividends"])).await;
    assert_eq!(h.int("SELECT count(*) FROM dividends_versions").await, kept);
}

const BARS: &str = "company_key, date, open, high, low, close, volume";

/// A 2:1 split restating older bars after a normal sync: the next run's
/// refetch changes stored bars older than `restate_days`, so it reads each
/// company's whole history again. `prices_daily` then equals the service's
/// adjusted history (a fresh sync's), `prices_daily_as_of` before the split
/// returns the unadjusted series, and the run names the restatement with
/// its factor.
#[tokio::test]
async fn a_split_restating_older_bars_is_read_again_whole_and_the_unadjusted_series_kept() {
    let companies = ["AAPL", "MSFT"];
    let h = Harness::with_emulator(with_quirks(""), &companies).await;
    run_ok(&h, &h.only(&["companies", "prices"])).await;
    let work = tempfile::tempdir().unwrap();
    let lake = local_lake(&work);
    lake.publish(&h.syncer.sink).await.unwrap();
    let bars_then = h.strings(&rows(BARS, "prices_daily")).await;
    let before = h.clock.now();

    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    let split = format!("split={}", (before - chrono::Duration::days(3)).date_naive());
    h.emulator.emulator.set_quirks(Quirks::parse(&split).unwrap());
    let (report, result) = h.syncer.run_once(&h.only(&["prices"])).await;
    result.unwrap();
    let outcome = &report.outcomes[0];
    assert_eq!(outcome.status, fdsync_core::sync::RunStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.restated.len(), 2, "{outcome:?}");
    assert!(
        outcome
            .restated
            .iter()
            .all(|r| r.starts_with("prices_daily ") && r.contains("(factor 0.5000)")),
        "{:?}",
        outcome.restated
    );
    lake.publish(&h.syncer.sink).await.unwrap();
    lake_matches(&h, &work, &["prices_daily", "prices_daily_versions"]).await;

    let fresh = Harness::with_emulator(with_quirks(&split), &companies).await;
    fresh.clock.as_sim().unwrap().advance_to(h.clock.now());
    run_ok(&fresh, &fresh.only(&["companies", "prices"])).await;
    let adjusted = fresh.strings(&rows(BARS, "prices_daily")).await;
    assert_eq!(h.strings(&rows(BARS, "prices_daily")).await, adjusted);
    let as_of = format!("prices_daily_as_of(TIMESTAMPTZ '{}')", before.to_rfc3339());
    assert_eq!(h.strings(&rows(BARS, &as_of)).await, bars_then);
    assert!(
        h.int("SELECT count(*) FROM prices_daily_versions WHERE _change = 'changed'")
            .await
            > 100
    );

    // The next run finds nothing restated: what it keeps is at most a
    // recent bar corrected, never an older one.
    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    let run_at = h.clock.now();
    let (report, result) = h.syncer.run_once(&h.only(&["prices"])).await;
    result.unwrap();
    assert!(report.outcomes[0].restated.is_empty(), "{:?}", report.outcomes[0]);
    let week_ago = (run_at - chrono::Duration::days(7)).date_naive();
    assert_eq!(
        h.int(&format!(
            "SELECT count(*) FROM prices_daily_versions WHERE _superseded_at >= TIMESTAMPTZ '{}' AND date < DATE '{week_ago}'",
            run_at.to_rfc3339()
        ))
        .await,
        0
    );
}

/// Bars stamped at their exchange's local midnight (Tokyo's and Taipei's
/// fall on the UTC day before, New York's on the same one) carry their
/// trading date: the table equals a sync of bars stamped at UTC midnight,
/// the wire contract's convention.
#[tokio::test]
async fn bars_stamped_at_local_midnight_carry_their_trading_date() {
    let companies = ["JP:7203", "TW:2330", "MSFT"];
    let utc = Harness::with_emulator(with_quirks(""), &companies).await;
    run_ok(&utc, &utc.only(&["companies", "prices"])).await;
    let local = Harness::with_emulator(with_quirks("local_midnight_bars"), &companies).await;
    run_ok(&local, &local.only(&["companies", "prices"])).await;
    let sql = rows("company_key, date, close", "prices_daily");
    let expected = utc.strings(&sql).await;
    for key in ["JP:7203|", "TW:2330|", "0000789019|"] {
        assert!(expected.iter().any(|r| r.starts_with(key)), "{key}");
    }
    assert_eq!(local.strings(&sql).await, expected);
    assert_eq!(
        local
            .int("SELECT count(*) FROM prices_daily WHERE t_ms % 86400000 = 0")
            .await,
        0,
        "every stamp was a local midnight"
    );
}

/// A service that ignores the lookback parameter (it serves its default
/// year whatever range is asked): the refetch that asks a month is reported,
/// naming the parameter, `price_windows` keeps what each response said it
/// served, and a history read again whole (a split) replaces nothing older
/// than the window it served.
#[tokio::test]
async fn a_service_that_ignores_the_lookback_is_reported_and_replaces_nothing_older_than_it_served() {
    let companies = ["AAPL", "MSFT"];
    let h = Harness::with_emulator(with_quirks(""), &companies).await;
    run_ok(&h, &h.only(&["companies", "prices"])).await;
    let before = h.clock.now();
    let year_ago = (before - chrono::Duration::days(400)).date_naive();
    let older = format!("SELECT count(*) FROM prices_daily WHERE date < DATE '{year_ago}'");
    let older_then = h.int(&older).await;
    assert!(older_then > 0, "a history longer than the default year");
    assert_eq!(
        h.int("SELECT count(*) FROM price_windows WHERE range_asked = 'ALL' AND asked_from IS NULL AND display_from <= first_bar")
            .await,
        2
    );

    h.clock.as_sim().unwrap().advance(Duration::from_secs(86_400));
    let split = format!(
        "ignored_lookback,split={}",
        (before - chrono::Duration::days(3)).date_naive()
    );
    h.emulator.emulator.set_quirks(Quirks::parse(&split).unwrap());
    let (report, result) = h.syncer.run_once(&h.only(&["prices"])).await;
    result.unwrap();
    let outcome = &report.outcomes[0];
    assert_eq!(outcome.status, fdsync_core::sync::RunStatus::Partial, "{outcome:?}");
    let said = outcome.error.clone().unwrap_or_default();
    assert!(
        said.contains(fdsync_core::feeds::prices::LOOKBACK_IGNORED) && said.contains("2 compan(ies)"),
        "{said}"
    );
    assert!(said.contains("prices_daily of 0000320193 not replaced"), "{said}");
    assert_eq!(outcome.restated.len(), 2, "{outcome:?}");
    // The bars older than the year served are still current, unadjusted.
    assert_eq!(h.int(&older).await, older_then);
    assert_eq!(
        h.int("SELECT count(*) FROM prices_daily_versions WHERE _change = 'withdrawn'")
            .await,
        0
    );
    assert_eq!(
        h.int("SELECT count(*) FROM price_windows WHERE range_asked = '1M' AND display_from < asked_from - 300")
            .await,
        2
    );
}

/// A day's geo counts read again the same day without one country: the
/// count is withdrawn from the day's snapshot and kept in its versions. With
/// only some layers configured, an answer does not hold the day's whole set,
/// so it withdraws nothing.
#[tokio::test]
async fn a_geo_count_no_longer_served_that_day_is_withdrawn_and_kept() {
    let h = Harness::with_emulator(with_quirks(""), &COMPANIES).await;
    let geo = h.only(&["geo"]);
    run_ok(&h, &geo).await;
    let counts = "SELECT count(*) FROM geo_country_counts";
    let served = h.int(counts).await;
    assert!(served > 1, "{served}");
    let work = tempfile::tempdir().unwrap();
    let lake = local_lake(&work);
    lake.publish(&h.syncer.sink).await.unwrap();
    h.emulator
        .emulator
        .set_quirks(Quirks::parse("withdrawn_country").unwrap());
    run_ok(&h, &geo).await;
    assert_eq!(h.int(counts).await, served - 1);
    lake.publish(&h.syncer.sink).await.unwrap();
    lake_matches(
        &h,
        &work,
        &["geo_country_counts", "geo_country_counts_versions", "geo_layers"],
    )
    .await;
    assert_eq!(
        h.int("SELECT count(*) FROM geo_country_counts_versions WHERE _change = 'withdrawn' AND _superseded_at IS NOT NULL")
            .await,
        1
    );

    let mut some = Harness::with_emulator(with_quirks(""), &COMPANIES).await;
    some.restart(|c| c.universe.geo_layers = vec!["power_plants".into()])
        .await;
    let geo = some.only(&["geo"]);
    run_ok(&some, &geo).await;
    let served = some.int(counts).await;
    some.emulator
        .emulator
        .set_quirks(Quirks::parse("withdrawn_country").unwrap());
    run_ok(&some, &geo).await;
    assert_eq!(some.int(counts).await, served);
    assert_eq!(some.int("SELECT count(*) FROM geo_country_counts_versions").await, 0);
}

/// `fdsync verify` on a warehouse whose service changed behind its back (a
/// dividend retyped, a month of revenue withdrawn, no run since): within its
/// budget it reads the companies never verified first, finds the change,
/// repairs it (the old rows kept as versions), records it in `_sync_verify`
/// and `status`, and a second pass covers the companies the first left.
#[tokio::test]
async fn verify_finds_and_repairs_what_changed_behind_its_back_within_its_budget() {
    let h = Harness::with_emulator(with_quirks(""), &COMPANIES).await;
    run_ok(&h, &h.only(&PIPELINES)).await;
    let changed = "retyped_dividend,withdrawn_month";
    h.emulator.emulator.set_quirks(Quirks::parse(changed).unwrap());
    h.clock.as_sim().unwrap().advance(Duration::from_secs(3_600));
    let dividends = h.only(&["dividends"]);

    let (report, result) = h.syncer.verify(&dividends, 2).await;
    result.unwrap();
    assert_eq!(report.requests, 2, "{report:?}");
    assert_eq!(report.verified.len(), 2, "two companies, one table: {report:?}");
    assert!(
        report
            .verified
            .iter()
            .all(|v| v.table == "dividends" && v.withdrawn == 1 && v.missing == 1 && v.changed == 0),
        "{report:?}"
    );
    assert!(report.verified.iter().all(|v| v.equal + 1 == v.stored), "{report:?}");
    let first: Vec<String> = report.verified.iter().map(|v| v.company.clone()).collect();
    let mut text = Vec::new();
    report.write_text(&mut text).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(text.contains("repaired dividends"), "{text}");

    // The next pass, an hour on, takes the companies not verified yet first.
    h.clock.as_sim().unwrap().advance(Duration::from_secs(3_600));
    let (report, result) = h.syncer.verify(&h.only(&["dividends", "monthly_revenue"]), 10).await;
    result.unwrap();
    let second: Vec<&str> = report
        .verified
        .iter()
        .filter(|v| v.table == "dividends")
        .map(|v| v.company.as_str())
        .collect();
    assert!(
        second.iter().take(2).all(|c| !first.iter().any(|f| f == c)),
        "{first:?} then {second:?}"
    );
    let months: u64 = report
        .verified
        .iter()
        .filter(|v| v.table == "monthly_revenue")
        .map(|v| v.withdrawn)
        .sum();
    assert!(months >= 1, "{report:?}");

    // Now equal to what the service serves, the old rows kept.
    let fresh = Harness::with_emulator(with_quirks(changed), &COMPANIES).await;
    fresh.clock.as_sim().unwrap().advance_to(h.clock.now());
    run_ok(&fresh, &fresh.only(&PIPELINES)).await;
    for (columns, table) in [(DIVIDENDS, "dividends"), (MONTHS, "monthly_revenue")] {
        assert_eq!(
            h.strings(&rows(columns, table)).await,
            fresh.strings(&rows(columns, table)).await,
            "{table}"
        );
    }
    assert!(
        h.int("SELECT count(*) FROM dividends_versions WHERE _change = 'withdrawn'")
            .await
            >= 2
    );
    assert!(
        h.int("SELECT count(*) FROM _sync_verify WHERE table_name = 'dividends' AND withdrawn = 1")
            .await
            >= 2
    );
    let status = h.syncer.status(&h.only(&PIPELINES)).await.unwrap();
    let seen = status.verification.expect("status shows the last verification");
    assert_eq!(seen.run_id, report.run_id);
    assert!(
        fdsync_core::metrics::render().contains("fdsync_verified_rows_total{table=\"dividends\",result=\"withdrawn\"}")
    );
}

/// The first sync of a service that ignores the lookback asks for the whole
/// history and gets the default year: nothing stored can tell, but every
/// company's window starting where `range=1Y` would is reported, naming the
/// route.
#[tokio::test]
async fn a_first_sync_given_the_default_window_for_the_whole_history_is_reported() {
    let companies = ["AAPL", "MSFT"];
    let h = Harness::with_emulator(with_quirks("ignored_lookback"), &companies).await;
    let (report, result) = h.syncer.run_once(&h.only(&["companies", "prices"])).await;
    result.unwrap();
    let prices = &report.outcomes[1];
    assert_eq!(prices.status, fdsync_core::sync::RunStatus::Partial, "{prices:?}");
    let said = prices.error.clone().unwrap_or_default();
    assert!(
        said.contains(fdsync_core::feeds::prices::LOOKBACK_IGNORED)
            && said.contains("where range=1Y starts")
            && said.contains("/api/v1/companies/"),
        "{said}"
    );
}
