//! `fdsync demo`: the emulator in-process, a fresh warehouse, one full sync and
//! one incremental sync, then what landed and a few SQL queries over it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;

use fdsync_core::clock::Clock;
use fdsync_core::config::Config;
use fdsync_core::feeds::Fetch;
use fdsync_core::pipeline;
use fdsync_core::sink::SinkError;
use fdsync_core::sync::{SyncError, Syncer};
use fdsync_emulator::{self as emulator, EmulatorConfig};

/// Example queries the demo runs and prints, as a data engineer would start.
/// Timestamps are shown as text: the Arrow printer knows only offset time zones.
pub const EXAMPLE_QUERIES: &[(&str, &str)] = &[
    (
        "Price history per company",
        "SELECT company_key, symbol, count(*) AS bars, min(date) AS first_day, max(date) AS last_day,\n       round(arg_max(close, date), 2) AS last_close\nFROM prices_daily GROUP BY ALL ORDER BY company_key",
    ),
    (
        "Microsoft's latest dividends with derived yields",
        "SELECT ex_date, amount, ttm, change_pct, yield_at_ex_date_pct, yield_period_avg_pct\nFROM dividends WHERE symbol = 'MSFT' ORDER BY ex_date DESC LIMIT 5",
    ),
    (
        "Benchmarks by one-year return",
        "SELECT symbol, short_name, last_price_date, last_price, round(return_1y * 100, 2) AS return_1y_pct\nFROM index_snapshots ORDER BY return_1y DESC",
    ),
    (
        "The news tape: newest items with their attribution (withheld fields stay NULL)",
        "SELECT id, CAST(first_seen_at AS VARCHAR) AS first_seen_at, left(headline, 50) AS headline, licence_class, snippet IS NULL AS withheld,\n       attribution\nFROM news_items ORDER BY id DESC LIMIT 5",
    ),
    (
        "Rewritten headlines: every version kept",
        "SELECT id, CAST(updated_at AS VARCHAR) AS updated_at, left(headline, 60) AS headline FROM news_headline_revisions\nWHERE id IN (SELECT id FROM news_headline_revisions GROUP BY id HAVING count(*) > 1)\nORDER BY id, updated_at LIMIT 6",
    ),
    (
        "8-K events by family in the last week, with item texts fetched",
        "SELECT e.family, count(*) AS filings, count(t.accession) AS item_texts\nFROM events e LEFT JOIN event_item_texts t USING (accession)\nWHERE e.filing_date >= CAST(CAST(now() AS TIMESTAMP) AS DATE) - 7 GROUP BY ALL ORDER BY filings DESC LIMIT 6",
    ),
    (
        "Macro as of 30 days ago: what was known then, even if revised since",
        "SELECT country, series_key, period, vintage, value\nFROM macro_as_of(CAST(now() AS TIMESTAMP) - INTERVAL 30 DAY)\nWHERE series_key = 'CPI_YOY' ORDER BY country, period DESC LIMIT 6",
    ),
    (
        "Regulation exposure: documents by strongest link basis",
        "SELECT company_key, basis, count(*) AS documents FROM regulation_actions WHERE rank = 1 GROUP BY ALL ORDER BY ALL",
    ),
    (
        "TSMC monthly revenue, year over year",
        "SELECT month, revenue, yoy_pct, filed_at FROM monthly_revenue WHERE company_key = 'TW:2330'\nORDER BY month DESC LIMIT 4",
    ),
    (
        "Filings and section texts held",
        "SELECT f.company_key, f.form, count(DISTINCT f.accession) AS filings, count(s.section_key) AS sections\nFROM filings f LEFT JOIN filing_sections s USING (accession) GROUP BY ALL ORDER BY ALL LIMIT 8",
    ),
    (
        "Reviewed geo assets by layer today",
        "SELECT layer, count(*) AS countries, sum(count) AS assets FROM geo_country_counts\nWHERE observed_date = (SELECT max(observed_date) FROM geo_country_counts) GROUP BY ALL ORDER BY ALL",
    ),
    (
        "What each run did",
        "SELECT run_id, pipeline, status, requests, rows_written FROM _sync_runs ORDER BY started_at, pipeline",
    ),
];

fn query(conn: &duckdb::Connection, sql: &str) -> Result<Vec<RecordBatch>, duckdb::Error> {
    let mut stmt = conn.prepare(sql)?;
    Ok(stmt.query_arrow([])?.collect())
}

/// A syncer wired to an in-process emulator with its demo Build key, writing
/// to `warehouse`, and the enabled pipelines (for the demo and the benchmarks).
///
/// # Errors
/// An invalid pipeline directory, or a warehouse that cannot be opened.
pub async fn local_syncer(
    emulator: &emulator::RunningEmulator,
    config: Config,
    warehouse: &Path,
    clock: Clock,
) -> Result<(Syncer, Vec<pipeline::Pipeline>), SyncError> {
    let pipelines = pipeline::load_dir(&config.pipelines.dir, config.pipelines.enabled.as_deref())?;
    let syncer = Syncer::at(
        &emulator.base_url(),
        emulator::DEMO_BUILD_KEY,
        config,
        warehouse,
        clock,
        "fdsync demo",
    )
    .await?;
    Ok((syncer, pipelines))
}

/// Runs the demo, printing to `out`.
///
/// # Errors
/// When the emulator cannot bind loopback, the warehouse cannot be written, or
/// the sync fails.
pub async fn run(config: Config, warehouse: &Path, out: &mut (impl Write + Send)) -> Result<(), SyncError> {
    let clock = Clock::simulated(chrono::Utc::now(), 1.0);
    let emulator = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            ..EmulatorConfig::default()
        },
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| SyncError::Other(format!("cannot start the emulator on 127.0.0.1: {e}")))?;
    for stale in [
        warehouse.to_owned(),
        PathBuf::from(format!("{}.wal", warehouse.display())),
    ] {
        if stale.exists() {
            std::fs::remove_file(&stale).map_err(|e| {
                SyncError::Other(format!("cannot remove the old demo warehouse {}: {e}", stale.display()))
            })?;
        }
    }
    let first_sync_at = clock.now();
    let (syncer, mut pipelines) = local_syncer(&emulator, config.clone(), warehouse, clock.clone()).await?;
    trim_horizons(&mut pipelines);
    let sink = syncer.sink.clone();

    let w = |out: &mut dyn Write, s: String| writeln!(out, "{s}").map_err(|e| SyncError::Other(e.to_string()));
    w(
        out,
        format!(
            "fdsync demo: emulator on {}, warehouse {}",
            emulator.base_url(),
            warehouse.display()
        ),
    )?;
    w(out, format!("universe: {}", config.universe.companies.join(", ")))?;
    for label in [
        "first sync (full history)",
        "second sync (incremental, nothing changed upstream)",
    ] {
        let (report, result) = syncer.run_once(&pipelines).await;
        result?;
        w(out, format!("\n== {label}: run {}", report.run_id))?;
        report.write_text(out)?;
    }
    // Five simulated months on, the service has revised macro values and
    // restated one under its old vintage: the warehouse still knows what was
    // served before.
    if let Some(sim) = clock.as_sim() {
        sim.advance(std::time::Duration::from_secs(150 * 86_400));
        let macro_only: Vec<pipeline::Pipeline> = pipelines.iter().filter(|p| p.name == "macro").cloned().collect();
        let (report, result) = syncer.run_once(&macro_only).await;
        result?;
        w(
            out,
            format!("\n== five months later (simulated): macro only, run {}", report.run_id),
        )?;
        report.write_text(out)?;
    }
    let stats = emulator.emulator.stats();
    w(
        out,
        format!(
            "\nemulator answered {} requests, {} of them 429",
            stats.requests,
            stats.rate_limited + stats.quota_exceeded
        ),
    )?;

    let counts = sink.call(|s| s.row_counts()).await??;
    w(out, "\n== rows in the warehouse".into())?;
    for (table, n) in counts {
        w(out, format!("  {table:<22} {n:>8}"))?;
    }
    let as_of = format!(
        "SELECT o.country, o.series_key, o.period, o.vintage, o.value AS known_at_first_sync,\n       n.value AS served_now_for_that_vintage\n\
         FROM macro_as_of(TIMESTAMPTZ '{}') o\n\
         LEFT JOIN macro_observations n ON n.country = o.country AND n.series_key = o.series_key\n\
           AND n.period = o.period AND n.vintage = o.vintage AND n.last_seen_at = (SELECT max(last_seen_at) FROM macro_observations)\n\
         WHERE o.last_seen_at < (SELECT max(last_seen_at) FROM macro_observations) ORDER BY ALL LIMIT 5",
        first_sync_at.to_rfc3339()
    );
    let restated = [(
        "Macro as of the first sync: values restated since, which the service no longer serves",
        as_of.as_str(),
    )];
    for (title, sql) in EXAMPLE_QUERIES.iter().chain(restated.iter()) {
        let sql_owned = (*sql).to_owned();
        let batches = sink
            .call(move |s| query(s.connection(), &sql_owned))
            .await?
            .map_err(|source| SinkError::Sql {
                table: "-".into(),
                context: "running an example query",
                source,
            })?;
        let table =
            arrow::util::pretty::pretty_format_batches(&batches).map_err(|e| SyncError::Other(e.to_string()))?;
        w(out, format!("\n== {title}\n{sql};\n{table}"))?;
    }
    w(
        out,
        format!(
            "\nOpen it yourself:  duckdb {}   (or python -c \"import duckdb; duckdb.connect('{}').sql('FROM prices_daily LIMIT 5').show()\")",
            warehouse.display(),
            warehouse.display()
        ),
    )?;
    Ok(())
}

/// Shorter backfills and text horizons than the shipped pipelines, by fetch
/// engine, so the demo's first sync fits in well under a minute of the Build
/// plan's rate.
fn trim_horizons(pipelines: &mut [pipeline::Pipeline]) {
    for p in pipelines {
        let (backfill, text) = match &p.feed.fetch {
            Fetch::Cursor(_) | Fetch::SearchCursor(_) => (Some(1), None),
            Fetch::CompanyCursor(_) | Fetch::OffsetWindows(_) => (Some(3), None),
            Fetch::ParentTexts(_) => (None, Some(7)),
            Fetch::DocumentsAndSections(_) => (None, Some(200)),
            Fetch::Single(_)
            | Fetch::PerCompany(_)
            | Fetch::Universe(_)
            | Fetch::PerCountry(_)
            | Fetch::CompanyIndex(_)
            | Fetch::Layers(_)
            | Fetch::Details(_) => (None, None),
        };
        p.params.backfill_days = backfill.or(p.params.backfill_days);
        p.params.text_days = text.or(p.params.text_days);
    }
}
