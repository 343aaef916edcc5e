use fdsync_emulator::PlanLimits;

use crate::util::{Harness, UNIVERSE};

const ENTITY_TABLES: &[(&str, &str)] = &[
    ("companies", "company_key"),
    ("prices_daily", "company_key, date"),
    ("dividends", "company_key, ex_date, type"),
    ("dividend_summaries", "company_key, as_of_date"),
    ("index_snapshots", "symbol, last_price_date"),
    ("coverage_snapshots", "observed_date, market, data_type"),
];

#[tokio::test]
async fn syncing_twice_writes_nothing_twice() {
    let h = Harness::new(PlanLimits::build(), UNIVERSE).await;
    let (first, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    for (table, _) in ENTITY_TABLES {
        assert!(
            h.int(&format!("SELECT count(*) FROM {table}")).await > 0,
            "{table} is empty"
        );
    }
    // MSFT and 0000789019 are one company.
    assert_eq!(h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await, 5);
    let before: Vec<i64> = {
        let mut v = Vec::new();
        for (table, _) in ENTITY_TABLES {
            v.push(h.int(&format!("SELECT count(*) FROM {table}")).await);
        }
        v
    };

    let (second, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert_ne!(first.run_id, second.run_id);
    for o in &second.outcomes {
        assert_eq!(o.rows_written, 0, "{} rewrote rows on a no-change sync", o.pipeline);
    }
    for ((table, key), n) in ENTITY_TABLES.iter().zip(before) {
        assert_eq!(h.int(&format!("SELECT count(*) FROM {table}")).await, n, "{table} grew");
        let dupes = h
            .int(&format!(
                "SELECT count(*) FROM (SELECT {key} FROM {table} GROUP BY ALL HAVING count(*) > 1)"
            ))
            .await;
        assert_eq!(dupes, 0, "{table} has duplicate keys");
        let rewritten = h
            .int(&format!(
                "SELECT count(*) FROM {table} WHERE _run_id = '{}'",
                second.run_id
            ))
            .await;
        assert_eq!(rewritten, 0, "{table}: rows rewritten by the second run");
    }
    // The second run asked about no company again: the universe is resolved once.
    let company_requests = h
        .int(&format!(
            "SELECT count(*) FROM _sync_requests WHERE run_id = '{}' AND regexp_matches(route, '^/api/v1/companies/[^/]+$')",
            second.run_id
        ))
        .await;
    assert_eq!(company_requests, 0);
    let runs = h.int("SELECT count(*) FROM _sync_runs WHERE status = 'ok'").await;
    assert_eq!(runs as usize, first.outcomes.len() + second.outcomes.len());
}

/// Every bar in the warehouse as (date, close, volume), for comparing with the service.
async fn stored_bars(h: &Harness, company_key: &str) -> Vec<(String, f64, i64)> {
    let key = company_key.to_owned();
    h.syncer
        .sink
        .call(move |s| {
            let mut stmt = s
                .connection()
                .prepare("SELECT date::VARCHAR, close, volume FROM prices_daily WHERE company_key = ? ORDER BY date")?;
            let rows = stmt.query_map([key], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
            rows.collect::<Result<Vec<_>, _>>()
        })
        .await
        .unwrap()
        .unwrap()
}

/// Ground truth: prices.
#[tokio::test]
async fn new_and_restated_bars_land_and_match_the_service() {
    let h = Harness::new(PlanLimits::build(), &["AAPL", "MSFT"]).await;
    let (_, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    let bars = h.int("SELECT count(*) FROM prices_daily").await;
    assert_eq!(
        h.strings("SELECT max(date)::VARCHAR FROM prices_daily").await,
        ["2026-11-25"]
    );

    // Thursday's and Friday's sessions close; Tuesday's and Wednesday's bars are restated.
    h.clock
        .as_sim()
        .unwrap()
        .advance(std::time::Duration::from_secs(48 * 3600));
    let (run, result) = h.syncer.run_once(&h.pipelines).await;
    result.unwrap();
    assert_eq!(h.int("SELECT count(*) FROM prices_daily").await, bars + 4);
    let routes = h
        .strings(&format!(
            "SELECT route FROM _sync_requests WHERE run_id = '{}' AND route LIKE '%/prices%' ORDER BY route",
            run.run_id
        ))
        .await;
    assert_eq!(routes.len(), 2);
    assert!(routes.iter().all(|r| r.ends_with("range=1M")), "{routes:?}");
    let prices = run.outcomes.iter().find(|o| o.pipeline == "prices").unwrap();
    assert!(
        prices.rows_written > 4,
        "restated bars were replaced too: {}",
        prices.rows_written
    );
    assert!(
        prices.rows_written < 20,
        "only new and restated bars are written: {}",
        prices.rows_written
    );

    let world = h.emulator.emulator.world();
    for id in ["AAPL", "MSFT"] {
        let company = world.resolve(id).unwrap();
        let truth: Vec<(String, f64, i64)> = world
            .daily_bars(&company, h.clock.now())
            .into_iter()
            .map(|(d, b)| (d.to_string(), b.c, b.v.unwrap()))
            .collect();
        assert_eq!(
            stored_bars(&h, &company.cik).await,
            truth,
            "{id}: warehouse differs from the service"
        );
    }
}

/// The universe resolves in one pass of concurrent lookups: an identifier the
/// service does not know is named and skipped, two spellings of one company
/// are one member, and a second run asks only about the unknown one again.
#[tokio::test]
async fn an_unknown_company_is_named_and_the_others_resolve() {
    let universe = ["AAPL", "NOPE", "MSFT", "0000789019", "AAPL", "TW:2330"];
    let h = Harness::new(PlanLimits::build(), &universe).await;
    let pipelines = h.only(&["companies", "prices"]);
    let (first, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let companies = &first.outcomes[0];
    assert_eq!(companies.pipeline, "companies");
    assert_eq!(companies.status, fdsync_core::sync::RunStatus::Partial);
    let error = companies.error.as_deref().unwrap_or_default();
    assert!(error.contains("\"NOPE\" is unknown to the service"), "{error}");
    assert_eq!(companies.requests, 5, "each distinct identifier asked once");
    assert_eq!(h.int("SELECT count(*) FROM companies").await, 3);
    assert_eq!(h.int("SELECT count(DISTINCT company_key) FROM prices_daily").await, 3);
    assert_eq!(
        h.int("SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'companies' AND NOT starts_with(\"partition\", 'asked:')")
            .await,
        4,
        "a checkpoint per spelling resolved"
    );
    assert_eq!(
        h.int("SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'companies' AND starts_with(\"partition\", 'asked:')")
            .await,
        3,
        "and per company, when it was last asked"
    );

    let (second, result) = h.syncer.run_once(&pipelines).await;
    result.unwrap();
    let asked = h
        .strings(&format!(
            "SELECT route FROM _sync_requests WHERE run_id = '{}' AND regexp_matches(route, '^/api/v1/companies/[^/]+$')",
            second.run_id
        ))
        .await;
    assert_eq!(asked, ["/api/v1/companies/NOPE"]);
}

/// The universe changes under a running warehouse: a company added is
/// backfilled while the others ask only what is new; a company removed is
/// asked nothing and keeps its rows; added back five weeks later, its gap
/// is filled and its bars equal the service's.
#[tokio::test]
async fn a_company_added_removed_and_added_back_ends_equal_to_the_service() {
    let mut h = Harness::new(PlanLimits::build(), &["MSFT"]).await;
    let pipelines = h.only(&["companies", "prices", "dividends"]);
    let sim = h.clock.as_sim().unwrap().clone();
    let world = h.emulator.emulator.world().clone();
    let aapl = world.resolve("AAPL").unwrap();
    let truth = |h: &Harness| -> Vec<(String, f64, i64)> {
        world
            .daily_bars(&aapl, h.clock.now())
            .into_iter()
            .map(|(d, b)| (d.to_string(), b.c, b.v.unwrap()))
            .collect()
    };
    let run = async |h: &Harness| {
        let (report, result) = h.syncer.run_once(&pipelines).await;
        result.unwrap_or_else(|e| panic!("{e}: {report:?}"));
        report.run_id
    };
    let aapl_requests = async |h: &Harness, run_id: &str| {
        h.int(&format!(
            "SELECT count(*) FROM _sync_requests WHERE run_id = '{run_id}' \
             AND (contains(route, '{}') OR contains(route, 'AAPL'))",
            aapl.cik
        ))
        .await
    };
    run(&h).await;

    // Added: AAPL is backfilled whole, MSFT asks only its last month.
    sim.advance(std::time::Duration::from_secs(24 * 3600));
    h.restart(|c| c.universe.companies = vec!["MSFT".into(), "AAPL".into()])
        .await;
    let added = run(&h).await;
    assert_eq!(stored_bars(&h, &aapl.cik).await, truth(&h), "AAPL backfilled");
    let msft_prices = h
        .strings(&format!(
            "SELECT route FROM _sync_requests WHERE run_id = '{added}' AND route LIKE '%/prices%' \
             AND NOT contains(route, '{}') AND NOT contains(route, 'AAPL')",
            aapl.cik
        ))
        .await;
    assert!(
        !msft_prices.is_empty() && msft_prices.iter().all(|r| r.ends_with("range=1M")),
        "MSFT asks only what is new: {msft_prices:?}"
    );
    let kept = h
        .int(&format!(
            "SELECT count(*) FROM prices_daily WHERE company_key = '{}'",
            aapl.cik
        ))
        .await;

    // Removed: nothing about AAPL is asked; its rows stay.
    sim.advance(std::time::Duration::from_secs(24 * 3600));
    h.restart(|c| c.universe.companies = vec!["MSFT".into()]).await;
    let removed = run(&h).await;
    assert_eq!(aapl_requests(&h, &removed).await, 0, "a removed company is not asked");
    sim.advance(std::time::Duration::from_secs(35 * 24 * 3600));
    let removed = run(&h).await;
    assert_eq!(aapl_requests(&h, &removed).await, 0);
    assert_eq!(
        h.int(&format!(
            "SELECT count(*) FROM prices_daily WHERE company_key = '{}'",
            aapl.cik
        ))
        .await,
        kept,
        "a removed company's rows are kept"
    );

    // Added back: the five weeks it was away are filled.
    h.restart(|c| c.universe.companies = vec!["MSFT".into(), "AAPL".into()])
        .await;
    run(&h).await;
    let bars = stored_bars(&h, &aapl.cik).await;
    assert!(bars.len() as i64 > kept, "the gap was filled");
    assert_eq!(bars, truth(&h), "AAPL equals the service again");
    h.assert_unique("prices_daily", "company_key, date").await;
}
