//! `fdsync-bench lake`: publishing a news backfill to the lake against
//! DuckDB's own `COPY ... TO` Parquet of the same rows, each side in its own
//! process.

use std::io::Write;
use std::time::Instant;

use fdsync_clock::Clock;
use fdsync_core::sync::SyncError;

use super::{BENCH_START, child_report, failure, fresh_dir, local_syncer, memory_of, mib};

/// What one side of the lake bench measured, in its own process.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct LakeChildReport {
    pub rows: u64,
    pub seconds: f64,
    pub peak_kib: u64,
}

/// A warehouse at `path` whose `news_items` holds `rows` rows: one page the
/// emulator really serves, synced by the news pipeline, repeated further back
/// in time with new ids, so sizes, text and months spanned are the tape's own
/// (a million items cover about 17 months, as on the real tape).
pub async fn lake_warehouse(
    config: &fdsync_core::config::Config,
    path: &std::path::Path,
    rows: u64,
) -> anyhow::Result<()> {
    use fdsync_emulator::{self as emulator, EmulatorConfig};

    let clock = Clock::simulated(BENCH_START.parse().expect("start time"), 0.0);
    let running = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            ..EmulatorConfig::default()
        },
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| failure(format!("cannot start the emulator: {e}")))?;
    let (syncer, mut pipelines) = local_syncer(&running, config.clone(), path, clock).await?;
    pipelines.retain(|p| p.name == "news");
    syncer.client.limit_requests(1);
    let (_, result) = syncer.run_once(&pipelines).await;
    match result {
        Ok(()) | Err(SyncError::BudgetSpent { .. }) => {}
        Err(e) => return Err(e.into()),
    }
    let news = fdsync_core::feeds::news::FEED.tables[0];
    syncer
        .sink
        .call(move |s| crate::warehouse::repeat_rows(s.connection(), news, "id", &["published_at", "updated_at"], rows))
        .await??;
    syncer.sink.close().await;
    Ok(())
}

/// One side of the lake bench, run in a child process so that its peak
/// memory is its own: `copy` is DuckDB's own `COPY ... TO` Parquet (zstd) of
/// `news_items`, `publish` is fdsync's publish of it to a lake at `target`.
pub async fn child(
    mode: &str,
    warehouse: &std::path::Path,
    target: &std::path::Path,
) -> anyhow::Result<LakeChildReport> {
    let sink = fdsync_core::sink::SinkHandle::open_duckdb(warehouse.to_owned()).await?;
    let started = Instant::now();
    let rows = match mode {
        "copy" => {
            let (target, news) = (target.to_owned(), fdsync_core::feeds::news::FEED.tables[0]);
            sink.call(move |s| crate::warehouse::copy_to_parquet(s.connection(), news, &target))
                .await??
        }
        "publish" => {
            let scratch = fdsync_core::lake::Lake::scratch_beside(warehouse);
            let lake = fdsync_core::lake::Lake::open(&target.display().to_string(), scratch)?;
            let report = lake.publish(&sink).await?;
            report
                .tables
                .iter()
                .find(|t| t.table == "news_items")
                .map_or(0, |t| t.rows)
        }
        other => return Err(failure(format!("unknown lake bench side {other}"))),
    };
    let seconds = started.elapsed().as_secs_f64();
    sink.close().await;
    let peak_kib = memory_of(std::process::id()).map_or(0, |m| m.peak_kib);
    Ok(LakeChildReport {
        rows,
        seconds,
        peak_kib,
    })
}

/// Publishing a news backfill to the lake against DuckDB's own `COPY ... TO`
/// Parquet of the same rows, at each size in `sizes`; each side runs in a
/// fresh process of this binary.
pub async fn lake(config: &fdsync_core::config::Config, sizes: &[u64], out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "| rows | COPY TO rows/s | lake rows/s | lake / COPY time | COPY peak MiB | lake peak MiB |\n|---|---|---|---|---|---|"
    )?;
    for &rows in sizes {
        let dir = fresh_dir(&format!("lake-{rows}"))?;
        let warehouse = dir.join("bench.duckdb");
        lake_warehouse(config, &warehouse, rows).await?;
        let side = |mode: &str, target: std::path::PathBuf| -> anyhow::Result<LakeChildReport> {
            child_report("lake", mode, [warehouse.as_os_str(), target.as_os_str()])
        };
        let copy = side("copy", dir.join("copy.parquet"))?;
        let publish = side("publish", dir.join("lake"))?;
        let rate = |r: &LakeChildReport| r.rows as f64 / r.seconds;
        writeln!(
            out,
            "| {rows} | {:.0} | {:.0} | {:.2}x | {:.1} | {:.1} |",
            rate(&copy),
            rate(&publish),
            publish.seconds / copy.seconds,
            mib(copy.peak_kib),
            mib(publish.peak_kib)
        )?;
        out.flush()?;
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}
