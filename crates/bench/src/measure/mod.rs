//! Figures for BENCHMARKS.md, each measured against a baseline taken in the
//! same invocation so that a noisy machine shifts both alike.
//!
//! Benchmarks run release binaries (not `cargo bench`, whose profile would
//! rebuild the bundled DuckDB) and talk to an emulator on loopback.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

use fdsync_clock::Clock;
use fdsync_core::config::Config;
use fdsync_core::pipeline::{self, Pipeline};
use fdsync_core::sync::{SyncError, Syncer};
use fdsync_emulator::RunningEmulator;

/// The fdsync binary the benches run, chosen once at start.
pub static FDSYNC: OnceLock<PathBuf> = OnceLock::new();

/// The fdsync binary the benches run.
fn fdsync_binary() -> &'static Path {
    FDSYNC.get().expect("main sets the fdsync binary first")
}

/// The `fdsync` that cargo built into the folder this bench runs from.
///
/// # Errors
/// When there is none: build it (`cargo build --release`) or pass `--fdsync`.
pub fn fdsync_beside_this() -> anyhow::Result<PathBuf> {
    let this = std::env::current_exe()?;
    let beside = this.with_file_name(format!("fdsync{}", std::env::consts::EXE_SUFFIX));
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(failure(format!(
            "no fdsync binary at {}: build it with `cargo dist` (the shipped build; `cargo build --release` for an everyday one), or name one with --fdsync",
            beside.display()
        )))
    }
}

/// A syncer wired to an in-process emulator with its demo Build key, writing
/// to `warehouse`, and the enabled pipelines.
async fn local_syncer(
    emulator: &RunningEmulator,
    config: Config,
    warehouse: &Path,
    clock: Clock,
) -> Result<(Syncer, Vec<Pipeline>), SyncError> {
    let pipelines = pipeline::load_dir(&config.pipelines.dir, config.pipelines.enabled.as_deref())?;
    let base_url = emulator.base_url();
    let key = fdsync_emulator::DEMO_BUILD_KEY;
    let syncer = Syncer::at(&base_url, key, config, warehouse, clock, "fdsync-bench").await?;
    Ok((syncer, pipelines))
}

/// A bench's own failure.
fn failure(message: String) -> anyhow::Error {
    anyhow::Error::msg(message)
}

mod backfill;
mod cold_start;
mod ingest;
mod lake;
mod symbol_order;
pub use backfill::{Size as BackfillSize, backfill, child as backfill_child};
pub use cold_start::{child as cold_start_child, cold_starts};
pub use ingest::{Feed, child as ingest_child, ingest};
pub use lake::{child as lake_child, lake};
pub use symbol_order::symbol_order;

const BENCH_KEY: &str = "pk_live_bench_unlimited_0001";
/// A Wednesday evening: the news tape then holds a little over a million items.
const BENCH_START: &str = "2026-11-25T23:00:00Z";

/// Memory of a process, from `/proc/<pid>/status` (Linux).
#[derive(Debug, Clone, Copy)]
pub struct Memory {
    pub rss_kib: u64,
    pub peak_kib: u64,
}

pub fn memory_of(pid: u32) -> Option<Memory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Memory {
        rss_kib: field("VmRSS:")?,
        peak_kib: field("VmHWM:")?,
    })
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `fdsync emulator` as a child process on a free loopback port, with a
/// frozen clock and an account without limits, so the bench measures serving
/// and nothing else.
struct EmulatorProcess {
    child: Child,
    base_url: String,
}

impl EmulatorProcess {
    fn start() -> anyhow::Result<EmulatorProcess> {
        let mut child = Command::new(fdsync_binary())
            .args([
                "--quiet",
                "emulator",
                "--addr",
                "127.0.0.1:0",
                "--speed",
                "0",
                "--start",
                BENCH_START,
            ])
            .args(["--key", &format!("{BENCH_KEY}=scale:100000000")])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| failure(format!("cannot start the emulator: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| failure(format!("emulator did not start: {e}")))?;
        let base_url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or_else(|| failure(format!("emulator did not announce its address: {line:?}")))?
            .to_owned();
        Ok(EmulatorProcess { child, base_url })
    }

    fn memory(&self) -> anyhow::Result<Memory> {
        memory_of(self.child.id()).ok_or_else(|| failure("cannot read /proc/<pid>/status (Linux only)".into()))
    }
}

impl Drop for EmulatorProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct TapePass {
    pub items: u64,
    pub requests: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub idle: Memory,
    pub after: Memory,
}

/// Pages the news feed back from the newest item with `before` cursors until
/// `items` were served, in a fresh emulator process.
pub async fn emulator_tape_pass(items: u64) -> anyhow::Result<TapePass> {
    let emulator = EmulatorProcess::start()?;
    let http = reqwest::Client::new();
    // One request first, so the baseline includes a warmed-up server.
    let feed = format!("{}/api/v1/news/feed", emulator.base_url);
    let fetch = |cursor: Option<String>| {
        let mut req = http
            .get(&feed)
            .header("X-API-KEY", BENCH_KEY)
            .query(&[("limit", "200")]);
        if let Some(c) = cursor {
            req = req.query(&[("before", c)]);
        }
        async move {
            let body = req
                .send()
                .await
                .and_then(|r| r.error_for_status())
                .map_err(|e| failure(format!("feed request failed: {e}")))?
                .bytes()
                .await
                .map_err(|e| failure(format!("feed body failed: {e}")))?;
            let page: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| failure(format!("feed page is not JSON: {e}")))?;
            Ok::<_, anyhow::Error>((body.len() as u64, page))
        }
    };
    fetch(None).await?;
    let idle = emulator.memory()?;
    let started = Instant::now();
    let (mut served, mut requests, mut bytes, mut cursor) = (0u64, 0u64, 0u64, None);
    while served < items {
        let (len, page) = fetch(cursor.take()).await?;
        requests += 1;
        bytes += len;
        served += page["items"].as_array().map_or(0, |a| a.len() as u64);
        match page["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(TapePass {
        items: served,
        requests,
        bytes,
        seconds,
        idle,
        after: emulator.memory()?,
    })
}

/// The emulator's peak memory over full passes at three tape sizes; the
/// baseline is the same process's resident memory before the pass.
pub async fn emulator_memory(sizes: &[u64], out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(
        out,
        "emulator peak memory while serving the news tape back to front (limit=200 pages)"
    )?;
    writeln!(
        out,
        "| items served | requests | MiB of JSON (gzipped on the wire) | seconds | idle RSS MiB (baseline) | peak RSS MiB | peak / idle |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|")?;
    for &size in sizes {
        let pass = emulator_tape_pass(size).await?;
        writeln!(
            out,
            "| {} | {} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} |",
            pass.items,
            pass.requests,
            pass.bytes as f64 / (1024.0 * 1024.0),
            pass.seconds,
            mib(pass.idle.rss_kib),
            mib(pass.after.peak_kib),
            pass.after.peak_kib as f64 / pass.idle.rss_kib.max(1) as f64,
        )?;
        out.flush()?;
    }
    Ok(())
}

/// Requests one pair of syncs spent, by pipeline, beside the least the routes allow.
pub struct RequestCount {
    pub companies: usize,
    pub first: Vec<(String, u64, u64)>,
    pub incremental: Vec<(String, u64, u64)>,
    pub throttled: u64,
}

/// The largest page the paged routes serve.
const LARGEST_PAGE: u64 = 200;

/// The least a pipeline's first and no-change syncs can spend, counted in
/// the warehouse after the first sync: one request per identifier never
/// resolved (the service alone knows that `MSFT` and `789019` are one
/// company), one per company for each per-company pipeline, one per
/// single-route pipeline. A per-country list and one history per entity
/// listed (no route says which changed). For the paged and text engines: the
/// pages of data the first sync found, and one request per tape or company
/// when nothing changed.
fn floors(
    s: &fdsync_core::sink::duckdb::DuckDbSink,
    pipeline: &fdsync_core::pipeline::Pipeline,
    identifiers: u64,
    companies: u64,
    countries: u64,
) -> anyhow::Result<(u64, u64)> {
    use fdsync_core::feeds::Fetch;
    let today = BENCH_START
        .parse::<chrono::DateTime<chrono::Utc>>()
        .expect("start time")
        .date_naive();
    let first_table = pipeline.feed.tables[0];
    Ok(match &pipeline.feed.fetch {
        // Each identifier resolved once; a company is asked again only once
        // the schedule fires after that (not within a frozen-clock bench).
        Fetch::Universe(_) => (identifiers, 0),
        Fetch::Cursor(_) => {
            let (pages, _) = crate::warehouse::pages(
                s.connection(),
                first_table,
                LARGEST_PAGE,
                None,
                Some(&pipeline.route),
                None,
            )?;
            (pages, 1)
        }
        Fetch::CompanyCursor(_) => {
            // Each company's tape: its pages, one at least when it has none.
            let table = pipeline
                .feed
                .tables
                .iter()
                .find(|t| t.columns.iter().any(|c| c.name == "company_key"))
                .expect("a company tape stores which company served each item");
            let (pages, with_rows) =
                crate::warehouse::pages(s.connection(), table, LARGEST_PAGE, Some("company_key"), None, None)?;
            (pages + companies.saturating_sub(with_rows), companies)
        }
        Fetch::SearchCursor(_) => {
            // Each saved search's tape (one checkpoint each): its pages, one
            // at least when it found nothing.
            let searches = s.checkpoints(&pipeline.name)?.len() as u64;
            let (pages, with_rows) =
                crate::warehouse::pages(s.connection(), first_table, LARGEST_PAGE, Some("search"), None, None)?;
            (pages + searches.saturating_sub(with_rows), searches)
        }
        Fetch::OffsetWindows(windows) => {
            // Every record from the horizon (none: all) in full pages; again,
            // those from the first day with a record still pending (only a
            // read of its day shows it filled in), one page at least.
            let dated = windows.stored.dated;
            let from = pipeline
                .params
                .backfill_days
                .map_or(chrono::NaiveDate::from_ymd_opt(1900, 1, 1).expect("a date"), |days| {
                    today - chrono::Duration::days(i64::from(days))
                });
            let (pages, _) = crate::warehouse::pages(
                s.connection(),
                windows.stored.table,
                LARGEST_PAGE,
                None,
                None,
                Some((dated, from, today)),
            )?;
            let lookback = today - chrono::Duration::days(fdsync_core::sync::PENDING_LOOKBACK_DAYS);
            let again = match s.earliest_pending(windows.stored, windows.pending, lookback)? {
                Some(day) => {
                    crate::warehouse::pages(
                        s.connection(),
                        windows.stored.table,
                        LARGEST_PAGE,
                        None,
                        None,
                        Some((dated, day, today)),
                    )?
                    .0
                }
                None => 1,
            };
            (pages.max(1), again.max(1))
        }
        Fetch::ParentTexts(texts) => (s.row_count(texts.texts.table.name)?.max(0) as u64, 0),
        // The emulator's tapes carry every body: no item lacks one.
        Fetch::Details(_) => (0, 0),
        Fetch::DocumentsAndSections(parts) => (
            companies + s.row_count(parts.parts.table.name)?.max(0) as u64,
            companies,
        ),
        Fetch::PerCompany(p) if p.absent_on_404 => {
            // Only companies with a mandate are asked again before the recheck is due.
            let asked_again = s
                .checkpoints(&pipeline.name)?
                .values()
                .filter(|c| !c.cursor.starts_with("no_mandate:"))
                .count() as u64;
            (companies, asked_again)
        }
        Fetch::PerCompany(_) | Fetch::CompanyIndex(_) => (companies, companies),
        Fetch::PerCountry(_) => {
            let listed = countries + s.row_count(first_table.name)?.max(0) as u64;
            (listed, listed)
        }
        Fetch::Single(_) | Fetch::Layers(_) => (1, 1),
    })
}

/// The horizons the full-sync figures in BENCHMARKS.md are measured at (the
/// shipped ones until every backfill became complete by default): the
/// emulator's whole news tape is a million items.
fn limit_horizons(pipelines: &mut [fdsync_core::pipeline::Pipeline]) {
    for p in pipelines {
        let (backfill, text) = match p.name.as_str() {
            "news" | "events_wire" => (Some(7), None),
            "company_news" => (Some(30), None),
            "event_texts" => (None, Some(30)),
            "filings" => (None, Some(730)),
            _ => (None, None),
        };
        p.params.backfill_days = p.params.backfill_days.or(backfill);
        p.params.text_days = p.params.text_days.or(text);
    }
}

/// A wire of its own density read alone: minutes between filings, and the
/// wire's horizon (none: everything since 2004).
#[derive(Clone, Copy)]
pub struct WireCase {
    pub filing_spacing_minutes: i64,
    pub backfill_days: Option<u32>,
}

/// A first full sync and a no-change incremental sync of `universe`, against
/// an in-process emulator on loopback (Build plan, frozen clock); with
/// `wire`, of the wire alone.
pub async fn count_requests(
    config: &fdsync_core::config::Config,
    universe: Vec<String>,
    wire: Option<WireCase>,
) -> anyhow::Result<RequestCount> {
    use fdsync_emulator::{self as emulator, EmulatorConfig};

    let clock = Clock::simulated(BENCH_START.parse().expect("start time"), 0.0);
    let running = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            generated_companies: 5000,
            filing_spacing_minutes: wire.map_or(EmulatorConfig::default().filing_spacing_minutes, |w| {
                w.filing_spacing_minutes
            }),
            ..EmulatorConfig::default()
        },
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| failure(format!("cannot start the emulator: {e}")))?;
    let dir = tempfile_dir()?;
    let mut config = config.clone();
    config.universe.companies = universe;
    let (syncer, mut pipelines) = local_syncer(&running, config.clone(), &dir.join("bench.duckdb"), clock).await?;
    match wire {
        Some(wire) => {
            pipelines.retain(|p| matches!(p.feed.fetch, fdsync_core::feeds::Fetch::OffsetWindows(_)));
            for p in &mut pipelines {
                p.params.backfill_days = wire.backfill_days;
            }
        }
        None => limit_horizons(&mut pipelines),
    }
    let sink = syncer.sink.clone();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (report, result) = syncer.run_once(&pipelines).await;
        result?;
        runs.push(report);
    }
    let identifiers = config.universe.companies.len();
    let countries = config.universe.countries.len() as u64;
    let counted = pipelines.clone();
    let (companies, floors) = sink
        .call(move |s| -> anyhow::Result<_> {
            let companies = s.row_count("companies")?.max(0) as u64;
            let floors = counted
                .iter()
                .map(|p| Ok((p.name.clone(), floors(s, p, identifiers as u64, companies, countries)?)))
                .collect::<anyhow::Result<std::collections::HashMap<_, _>>>()?;
            Ok((companies, floors))
        })
        .await??;
    sink.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    let by_pipeline = |report: &fdsync_core::sync::SyncReport, first: bool| {
        pipelines
            .iter()
            .map(|p| {
                let spent = report
                    .outcomes
                    .iter()
                    .find(|o| o.pipeline == p.name)
                    .map_or(0, |o| o.requests);
                let (at_first, later) = floors[&p.name];
                (p.name.clone(), spent, if first { at_first } else { later })
            })
            .collect()
    };
    let stats = running.emulator.stats();
    Ok(RequestCount {
        companies: companies as usize,
        first: by_pipeline(&runs[0], true),
        incremental: by_pipeline(&runs[1], false),
        throttled: stats.rate_limited + stats.quota_exceeded,
    })
}

/// Runs `fdsync-bench <bench>-child <mode> <args>` (this binary, in its own
/// process so that its peak memory is its own) and reads its JSON report.
fn child_report<T: serde::de::DeserializeOwned>(
    bench: &str,
    mode: &str,
    args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
) -> anyhow::Result<T> {
    let output = Command::new(std::env::current_exe()?)
        .args(["--quiet", &format!("{bench}-child"), mode])
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(failure(format!("the {mode} side of the {bench} bench failed")));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| failure(format!("the {mode} side's report: {e}")))
}

fn tempfile_dir() -> anyhow::Result<std::path::PathBuf> {
    let dir = std::env::temp_dir().join(format!("fdsync-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// An empty folder `name` in the bench's temp folder: what an earlier run
/// left there is removed, so every size starts from nothing.
fn fresh_dir(name: &str) -> anyhow::Result<std::path::PathBuf> {
    let dir = tempfile_dir()?.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Request efficiency at several universe sizes: the configured universe, then
/// the first N generated companies for each N in `sizes`.
pub async fn requests(
    config: &fdsync_core::config::Config,
    sizes: &[usize],
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let mut universes = vec![config.universe.companies.clone()];
    universes.extend(sizes.iter().map(|&n| (0..n).map(|i| format!("S{i:04}")).collect()));
    writeln!(
        out,
        "requests spent against the least the routes allow (Build plan, frozen clock)"
    )?;
    writeln!(
        out,
        "| universe | sync | spent | minimum | ratio | 429s | by pipeline (spent/minimum) |"
    )?;
    writeln!(out, "|---|---|---:|---:|---:|---:|---|")?;
    for universe in universes {
        let label = if universe.first().is_some_and(|c| c.starts_with('S')) {
            format!("{} generated", universe.len())
        } else {
            format!("config ({} ids)", universe.len())
        };
        let count = count_requests(config, universe, None).await?;
        for (sync, rows) in [("first", &count.first), ("no-change", &count.incremental)] {
            let spent: u64 = rows.iter().map(|r| r.1).sum();
            let least: u64 = rows.iter().map(|r| r.2).sum();
            let detail: Vec<String> = rows.iter().map(|(n, s, m)| format!("{n} {s}/{m}")).collect();
            writeln!(
                out,
                "| {label}, {} companies | {sync} | {spent} | {least} | {:.2} | {} | {} |",
                count.companies,
                spent as f64 / least.max(1) as f64,
                count.throttled,
                detail.join(", ")
            )?;
        }
        out.flush()?;
    }
    for (label, wire) in [
        (
            "sparse wire: a filing every 2 days since 2004, no horizon",
            WireCase {
                filing_spacing_minutes: 2880,
                backfill_days: None,
            },
        ),
        (
            "dense wire: 288 filings a day, 30-day horizon",
            WireCase {
                filing_spacing_minutes: 5,
                backfill_days: Some(30),
            },
        ),
    ] {
        let count = count_requests(config, config.universe.companies.clone(), Some(wire)).await?;
        for (sync, rows) in [("first", &count.first), ("no-change", &count.incremental)] {
            let spent: u64 = rows.iter().map(|r| r.1).sum();
            let least: u64 = rows.iter().map(|r| r.2).sum();
            writeln!(
                out,
                "| {label} | {sync} | {spent} | {least} | {:.2} | {} | events_wire |",
                spent as f64 / least.max(1) as f64,
                count.throttled,
            )?;
        }
        out.flush()?;
    }
    Ok(())
}

/// Lags of one delivery path, in real seconds, in arrival order.
struct Lags {
    seconds: Vec<f64>,
}

impl Lags {
    fn quantile(&self, q: f64) -> f64 {
        let mut sorted = self.seconds.clone();
        sorted.sort_by(f64::total_cmp);
        let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
        sorted[rank - 1]
    }
}

/// Reads the stream with a bare SSE client that parses each frame and keeps
/// nothing: the floor any consumer of the stream could reach (the emulator's
/// own push delay and the network), measured beside fdsync in the same run.
async fn bare_stream_lags(
    base_url: String,
    clock: fdsync_core::clock::Clock,
    speed: f64,
    shutdown: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Vec<f64>> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let response = reqwest::Client::new()
        .get(format!("{base_url}/api/v1/news/stream"))
        .header("X-API-KEY", fdsync_emulator::DEMO_BUILD_KEY)
        .send()
        .await
        .map_err(|e| failure(format!("baseline stream: {e}")))?;
    let mut events = response.bytes_stream().eventsource();
    let mut lags = Vec::new();
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = shutdown.cancelled() => break,
        };
        let Some(Ok(event)) = event else { break };
        let page: serde_json::Value =
            serde_json::from_str(&event.data).map_err(|e| failure(format!("baseline frame: {e}")))?;
        let now = clock.now();
        for item in page["items"].as_array().into_iter().flatten() {
            if item["rewritten"].as_bool() == Some(true) {
                continue;
            }
            if let Some(seen) = item["firstSeenAt"]
                .as_str()
                .and_then(|t| t.parse::<chrono::DateTime<chrono::Utc>>().ok())
            {
                lags.push((now - seen).num_microseconds().unwrap_or(0) as f64 / 1e6 / speed);
            }
        }
    }
    Ok(lags)
}

/// News lag in daemon mode: from an item's arrival in the emulator
/// (`firstSeenAt`) to its row committed by fdsync's live stream, over
/// `items` arrivals, against a bare SSE reader on the same emulator at the
/// same time. The emulator's clock runs `speed` times real time so that many
/// items arrive in a short run; lags are converted back to real seconds.
pub async fn news_lag(
    config: &fdsync_core::config::Config,
    items: u64,
    speed: f64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    use fdsync_emulator::{self as emulator, EmulatorConfig, StreamTiming, news};

    let clock = Clock::simulated(BENCH_START.parse().expect("start time"), speed);
    let running = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            generated_companies: 5000,
            stream: StreamTiming {
                poll: std::time::Duration::from_millis(5),
                ..StreamTiming::default()
            },
            ..EmulatorConfig::default()
        },
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| failure(format!("cannot start the emulator: {e}")))?;
    let dir = tempfile_dir()?;
    let (syncer, pipelines) = local_syncer(&running, config.clone(), &dir.join("lag.duckdb"), clock.clone()).await?;
    let news_pipeline = pipelines
        .into_iter()
        .find(|p| p.params.stream_route.is_some())
        .ok_or_else(|| failure("no pipeline with params.stream_route to measure".into()))?;
    let seed = running.emulator.world().seed;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let first = news::CADENCE.count_at(seed, clock.now());
    let stop = {
        let shutdown = shutdown.clone();
        let clock = clock.clone();
        async move {
            // Past the last measured arrival, plus a real second for its commit.
            let last = news::CADENCE.at(seed, first + items + 1);
            while clock.now() < last {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            shutdown.cancel();
        }
    };
    let started = Instant::now();
    let (fdsync, bare, ()) = tokio::join!(
        syncer.run_stream(&news_pipeline, &shutdown, true),
        bare_stream_lags(running.base_url(), clock.clone(), speed, shutdown.clone()),
        stop
    );
    let elapsed = started.elapsed();
    let report = fdsync?;
    let bare = bare?;
    syncer.sink.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    let fdsync = Lags {
        seconds: report
            .lags
            .unwrap_or_default()
            .into_iter()
            .take(items as usize)
            .map(|l| l / speed)
            .collect(),
    };
    let bare = Lags {
        seconds: bare.into_iter().take(items as usize).collect(),
    };
    if fdsync.seconds.is_empty() || bare.seconds.is_empty() {
        return Err(failure("no item arrived while the stream was measured".into()));
    }
    writeln!(
        out,
        "news lag, arrival in the emulator to committed row ({} items over {:.0} s; emulator clock x{speed}, stream pushes within 5 ms)",
        fdsync.seconds.len(),
        elapsed.as_secs_f64()
    )?;
    writeln!(out, "| path | items | p50 ms | p99 ms | max ms |")?;
    writeln!(out, "|---|---:|---:|---:|---:|")?;
    for (name, lags) in [
        ("fdsync stream -> DuckDB commit", &fdsync),
        ("baseline: bare SSE reader, parse only", &bare),
    ] {
        writeln!(
            out,
            "| {name} | {} | {:.1} | {:.1} | {:.1} |",
            lags.seconds.len(),
            lags.quantile(0.5) * 1000.0,
            lags.quantile(0.99) * 1000.0,
            lags.quantile(1.0) * 1000.0
        )?;
    }
    writeln!(
        out,
        "fdsync's own share (commit included): p50 +{:.1} ms, p99 +{:.1} ms; {} frames in {} commits, {} connections",
        (fdsync.quantile(0.5) - bare.quantile(0.5)) * 1000.0,
        (fdsync.quantile(0.99) - bare.quantile(0.99)) * 1000.0,
        report.frames,
        report.commits,
        report.connections
    )?;
    Ok(())
}
