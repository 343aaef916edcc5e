//! `fdsync demo`: the emulator in-process, a fresh warehouse, one full sync and
//! one incremental sync, then what landed and a few SQL queries over it.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;

use crate::clock::Clock;
use crate::config::{ApiKey, Config};
use crate::emulator::{self, EmulatorConfig};
use crate::pipeline;
use crate::sink::{SinkError, SinkHandle};
use crate::sync::{SyncError, SyncReport, Syncer};
use crate::upstream::Client;

/// Example queries the demo runs and prints, as a data engineer would start.
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
    mut config: Config,
    warehouse: &Path,
    clock: Clock,
) -> Result<(Syncer, Vec<pipeline::Pipeline>), SyncError> {
    config.upstream.base_url = emulator.base_url();
    config.upstream.api_key_file = None;
    config.warehouse.duckdb = warehouse.to_owned();
    let key = ApiKey::parse(emulator::DEMO_BUILD_KEY, "the emulator's demo key")?;
    let pipelines = pipeline::load_dir(&config.pipelines.dir, config.pipelines.enabled.as_deref())?;
    let client = Client::new(&config.upstream, Some(key), clock.clone())
        .map_err(|e| SyncError::Other(format!("cannot build the HTTP client: {e}")))?;
    let sink = SinkHandle::open_duckdb(warehouse.to_owned()).await?;
    let syncer = Syncer {
        config,
        client,
        sink,
        clock,
    };
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
    let (syncer, pipelines) = local_syncer(&emulator, config.clone(), warehouse, clock).await?;
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
        print_report(out, &report)?;
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

    let counts = sink
        .call(|s| {
            let mut lines = Vec::new();
            for table in crate::tables::TABLES {
                let n: i64 = s
                    .connection()
                    .query_row(
                        &format!("SELECT count(*) FROM {}", crate::sink::duckdb::ident(table.name)),
                        [],
                        |r| r.get(0),
                    )
                    .map_err(|source| SinkError::Sql {
                        table: table.name.into(),
                        context: "counting rows",
                        source,
                    })?;
                lines.push(format!("  {:<22} {n:>8}", table.name));
            }
            Ok::<_, SinkError>(lines)
        })
        .await??;
    w(out, "\n== rows in the warehouse".into())?;
    for line in counts {
        w(out, line)?;
    }
    for (title, sql) in EXAMPLE_QUERIES {
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

/// Prints one line per pipeline of a run.
pub fn print_report(out: &mut dyn Write, report: &SyncReport) -> Result<(), SyncError> {
    let io = |e: std::io::Error| SyncError::Other(e.to_string());
    writeln!(
        out,
        "  {:<14} {:<16} {:>8} {:>12}  note",
        "pipeline", "status", "requests", "rows written"
    )
    .map_err(io)?;
    for o in &report.outcomes {
        writeln!(
            out,
            "  {:<14} {:<16} {:>8} {:>12}  {}",
            o.pipeline,
            o.status.to_string(),
            o.requests,
            o.rows_written,
            o.error.as_deref().unwrap_or("")
        )
        .map_err(io)?;
    }
    for name in &report.deferred {
        writeln!(
            out,
            "  {name:<14} {:<16} {:>8} {:>12}  request budget spent",
            "deferred", 0, 0
        )
        .map_err(io)?;
    }
    Ok(())
}
