//! `fdsync bench`: figures for BENCHMARKS.md, each measured against a baseline
//! taken in the same invocation so that a noisy machine shifts both alike.
//!
//! Benchmarks run the release binary itself (not `cargo bench`, whose profile
//! would rebuild the bundled DuckDB) and talk to an emulator on loopback.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::sync::SyncError;

mod cold_start;
mod ingest;
pub use cold_start::{child as cold_start_child, cold_starts};
pub use ingest::{Feed, IngestChildReport, child as ingest_child, ingest};

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
    fn start() -> Result<EmulatorProcess, SyncError> {
        let exe = std::env::current_exe().map_err(|e| SyncError::Other(format!("cannot find fdsync itself: {e}")))?;
        let mut child = Command::new(exe)
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
            .map_err(|e| SyncError::Other(format!("cannot start the emulator: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| SyncError::Other(format!("emulator did not start: {e}")))?;
        let base_url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .ok_or_else(|| SyncError::Other(format!("emulator did not announce its address: {line:?}")))?
            .to_owned();
        Ok(EmulatorProcess { child, base_url })
    }

    fn memory(&self) -> Result<Memory, SyncError> {
        memory_of(self.child.id()).ok_or_else(|| SyncError::Other("cannot read /proc/<pid>/status (Linux only)".into()))
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
pub async fn emulator_tape_pass(items: u64) -> Result<TapePass, SyncError> {
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
                .map_err(|e| SyncError::Other(format!("feed request failed: {e}")))?
                .bytes()
                .await
                .map_err(|e| SyncError::Other(format!("feed body failed: {e}")))?;
            let page: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| SyncError::Other(format!("feed page is not JSON: {e}")))?;
            Ok::<_, SyncError>((body.len() as u64, page))
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
pub async fn emulator_memory(sizes: &[u64], out: &mut impl Write) -> Result<(), SyncError> {
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
    pub identifiers: usize,
    pub companies: usize,
    pub first: Vec<(String, u64, u64)>,
    pub incremental: Vec<(String, u64, u64)>,
    pub throttled: u64,
}

#[derive(Clone, Copy)]
struct UniverseSizes {
    identifiers: usize,
    companies: usize,
    countries: usize,
    series: usize,
}

/// What the paged and text pipelines' floors depend on: the data the first
/// sync brought, counted in the warehouse after it.
#[derive(Clone, Copy, Default)]
struct PagedFloors {
    /// Pages of the news feed: its items at the largest page (200).
    news: u64,
    /// Pages of every company's news tape, one at least per company.
    company_news: u64,
    /// Pages of the events wire: one filing date at a time, 200 a page.
    events_wire: u64,
    /// One request per stored item text.
    event_texts: u64,
    /// One request per stored filing section.
    filing_sections: u64,
    /// Companies with a monthly-revenue mandate: the only ones asked again
    /// before the recheck is due.
    revenue_mandates: u64,
}

/// The largest page the news feed and the events wire serve.
const LARGEST_PAGE: u64 = 200;

/// Counts what the first sync brought: every floor of a paged pipeline is a
/// number of pages of data that must be read at least once.
fn paged_floors(conn: &duckdb::Connection, companies: u64, wire_days: i64) -> duckdb::Result<PagedFloors> {
    let count = |sql: &str| conn.query_row(sql, [], |r| r.get::<_, i64>(0)).map(|n| n.max(0) as u64);
    let pages = |n: u64| n.div_ceil(LARGEST_PAGE).max(1);
    let feed = count("SELECT count(*) FROM news_items WHERE _route LIKE '/api/v1/news/feed%'")?;
    let linked = count(&format!(
        "SELECT coalesce(sum(greatest(1, ceil(n / {LARGEST_PAGE})::BIGINT)), 0) FROM \
         (SELECT count(*) AS n FROM news_company_items GROUP BY company_key)"
    ))?;
    let companies_with_news = count("SELECT count(DISTINCT company_key) FROM news_company_items")?;
    let today = BENCH_START
        .parse::<chrono::DateTime<chrono::Utc>>()
        .expect("start time")
        .date_naive();
    let from = today - chrono::Duration::days(wire_days);
    let wire_filled = count(&format!(
        "SELECT coalesce(sum(greatest(1, ceil(n / {LARGEST_PAGE})::BIGINT)), 0) FROM \
         (SELECT count(*) AS n FROM events WHERE filing_date BETWEEN DATE '{from}' AND DATE '{today}' GROUP BY filing_date)"
    ))?;
    let wire_days_with_events = count(&format!(
        "SELECT count(DISTINCT filing_date) FROM events WHERE filing_date BETWEEN DATE '{from}' AND DATE '{today}'"
    ))?;
    Ok(PagedFloors {
        news: pages(feed),
        company_news: linked + companies.saturating_sub(companies_with_news),
        events_wire: wire_filled + (wire_days as u64 + 1).saturating_sub(wire_days_with_events),
        event_texts: count("SELECT count(*) FROM event_item_texts")?,
        filing_sections: count("SELECT count(*) FROM filing_sections")?,
        revenue_mandates: count(
            "SELECT count(*) FROM _sync_checkpoints WHERE pipeline = 'monthly_revenue' AND \"cursor\" NOT LIKE 'no_mandate:%'",
        )?,
    })
}

/// The least a run can spend: one request per identifier never resolved (the
/// service alone knows that `MSFT` and `789019` are one company), one per
/// company for each per-company pipeline, one per single-route pipeline.
/// For macro: one list per country and one history per series listed (no
/// route says which series changed). For the paged and text pipelines: the
/// pages of data the first sync found ([`PagedFloors`]), and one request per
/// tape or company when nothing changed.
fn minimum(pipeline: &crate::pipeline::Pipeline, sizes: &UniverseSizes, paged: &PagedFloors, first: bool) -> u64 {
    use crate::feeds::Fetch;
    let UniverseSizes {
        identifiers,
        companies,
        countries,
        series,
    } = *sizes;
    let companies = companies as u64;
    match &pipeline.feed.fetch {
        Fetch::Universe if first => identifiers as u64,
        Fetch::Universe => 0,
        Fetch::Cursor if first => paged.news,
        Fetch::CompanyCursor if first => paged.company_news,
        Fetch::OffsetWindows if first => paged.events_wire,
        Fetch::ParentTexts { .. } if first => paged.event_texts,
        Fetch::ParentTexts { .. } => 0,
        Fetch::DocumentsAndSections if first => companies + paged.filing_sections,
        Fetch::PerCompany(p) if p.absent_on_404 && !first => paged.revenue_mandates,
        Fetch::PerCompany(_) | Fetch::CompanyCursor | Fetch::CompanyIndex | Fetch::DocumentsAndSections => companies,
        Fetch::PerCountry => (countries + series) as u64,
        Fetch::Single(_) | Fetch::Cursor | Fetch::OffsetWindows | Fetch::Layers => 1,
    }
}

/// A first full sync and a no-change incremental sync of `universe`, against
/// an in-process emulator on loopback (Build plan, frozen clock).
pub async fn count_requests(config: &crate::config::Config, universe: Vec<String>) -> Result<RequestCount, SyncError> {
    use crate::clock::Clock;
    use crate::emulator::{self, EmulatorConfig};

    let clock = Clock::simulated(BENCH_START.parse().expect("start time"), 0.0);
    let running = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            generated_companies: 5000,
            ..EmulatorConfig::default()
        },
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| SyncError::Other(format!("cannot start the emulator: {e}")))?;
    let dir = tempfile_dir()?;
    let mut config = config.clone();
    config.universe.companies = universe;
    let (syncer, pipelines) =
        crate::demo::local_syncer(&running, config.clone(), &dir.join("bench.duckdb"), clock).await?;
    let wire_days = pipelines
        .iter()
        .find(|p| matches!(p.feed.fetch, crate::feeds::Fetch::OffsetWindows))
        .map_or(7, |p| i64::from(p.params.backfill_days.unwrap_or(7)));
    let sink = syncer.sink.clone();
    let mut runs = Vec::new();
    for _ in 0..2 {
        let (report, result) = syncer.run_once(&pipelines).await;
        result?;
        runs.push(report);
    }
    let (companies, series, paged): (i64, i64, PagedFloors) = sink
        .call(move |s| {
            let (companies, series) = s.connection().query_row(
                "SELECT (SELECT count(*) FROM companies), (SELECT count(*) FROM macro_series)",
                [],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )?;
            let paged = paged_floors(s.connection(), companies.max(0) as u64, wire_days)?;
            Ok::<_, duckdb::Error>((companies, series, paged))
        })
        .await?
        .map_err(|e| SyncError::Other(format!("counting what the sync brought: {e}")))?;
    sink.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    let sizes = UniverseSizes {
        identifiers: config.universe.companies.len(),
        companies: companies as usize,
        countries: config.universe.countries.len(),
        series: series as usize,
    };
    let by_pipeline = |report: &crate::sync::SyncReport, first: bool| {
        pipelines
            .iter()
            .map(|p| {
                let spent = report
                    .outcomes
                    .iter()
                    .find(|o| o.pipeline == p.name)
                    .map_or(0, |o| o.requests);
                (p.name.clone(), spent, minimum(p, &sizes, &paged, first))
            })
            .collect()
    };
    let stats = running.emulator.stats();
    Ok(RequestCount {
        identifiers: sizes.identifiers,
        companies: sizes.companies,
        first: by_pipeline(&runs[0], true),
        incremental: by_pipeline(&runs[1], false),
        throttled: stats.rate_limited + stats.quota_exceeded,
    })
}

/// Runs `fdsync bench <bench>-child <mode> <args>` (this binary, in its own
/// process so that its peak memory is its own) and reads its JSON report.
fn child_report<T: serde::de::DeserializeOwned>(
    bench: &str,
    mode: &str,
    args: impl IntoIterator<Item = impl AsRef<std::ffi::OsStr>>,
) -> Result<T, SyncError> {
    let output = Command::new(std::env::current_exe()?)
        .args(["--quiet", "bench", &format!("{bench}-child"), mode])
        .args(args)
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(SyncError::Other(format!("the {mode} side of the {bench} bench failed")));
    }
    serde_json::from_slice(&output.stdout).map_err(|e| SyncError::Other(format!("the {mode} side's report: {e}")))
}

fn tempfile_dir() -> Result<std::path::PathBuf, SyncError> {
    let dir = std::env::temp_dir().join(format!("fdsync-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Request efficiency at several universe sizes: the configured universe, then
/// the first N generated companies for each N in `sizes`.
pub async fn requests(config: &crate::config::Config, sizes: &[usize], out: &mut impl Write) -> Result<(), SyncError> {
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
        let count = count_requests(config, universe).await?;
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
    clock: crate::clock::Clock,
    speed: f64,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<Vec<f64>, SyncError> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let response = reqwest::Client::new()
        .get(format!("{base_url}/api/v1/news/stream"))
        .header("X-API-KEY", crate::emulator::DEMO_BUILD_KEY)
        .send()
        .await
        .map_err(|e| SyncError::Other(format!("baseline stream: {e}")))?;
    let mut events = response.bytes_stream().eventsource();
    let mut lags = Vec::new();
    loop {
        let event = tokio::select! {
            e = events.next() => e,
            () = shutdown.cancelled() => break,
        };
        let Some(Ok(event)) = event else { break };
        let page: serde_json::Value =
            serde_json::from_str(&event.data).map_err(|e| SyncError::Other(format!("baseline frame: {e}")))?;
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
    config: &crate::config::Config,
    items: u64,
    speed: f64,
    out: &mut impl Write,
) -> Result<(), SyncError> {
    use crate::clock::Clock;
    use crate::emulator::{self, EmulatorConfig, StreamTiming, news};

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
    .map_err(|e| SyncError::Other(format!("cannot start the emulator: {e}")))?;
    let dir = tempfile_dir()?;
    let (syncer, pipelines) =
        crate::demo::local_syncer(&running, config.clone(), &dir.join("lag.duckdb"), clock.clone()).await?;
    let news_pipeline = pipelines
        .into_iter()
        .find(|p| p.params.stream_route.is_some())
        .ok_or_else(|| SyncError::Other("no pipeline with params.stream_route to measure".into()))?;
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
        return Err(SyncError::Other("no item arrived while the stream was measured".into()));
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
    config: &crate::config::Config,
    path: &std::path::Path,
    rows: u64,
) -> Result<(), SyncError> {
    use crate::clock::Clock;
    use crate::emulator::{self, EmulatorConfig};

    let clock = Clock::simulated(BENCH_START.parse().expect("start time"), 0.0);
    let running = emulator::spawn(
        EmulatorConfig {
            clock: clock.clone(),
            ..EmulatorConfig::default()
        },
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .map_err(|e| SyncError::Other(format!("cannot start the emulator: {e}")))?;
    let (syncer, mut pipelines) = crate::demo::local_syncer(&running, config.clone(), path, clock).await?;
    pipelines.retain(|p| p.name == "news");
    syncer.client.limit_requests(1);
    let (_, result) = syncer.run_once(&pipelines).await;
    match result {
        Ok(()) | Err(SyncError::BudgetSpent { .. }) => {}
        Err(e) => return Err(e),
    }
    syncer
        .sink
        .call(move |s| {
            let conn = s.connection();
            let page: i64 = conn.query_row("SELECT count(*) FROM news_items", [], |r| r.get(0))?;
            let copies = rows.div_ceil(page.max(1) as u64);
            // Time arithmetic on UTC text: the bundled DuckDB has no ICU for TIMESTAMPTZ.
            conn.execute_batch(&format!(
                "CREATE TEMP MACRO utc(ts) AS CAST(left(CAST(ts AS VARCHAR), 19) AS TIMESTAMP);
                 CREATE TEMP TABLE page AS SELECT * FROM news_items;
                 DELETE FROM news_items;
                 INSERT INTO news_items
                 SELECT page.* REPLACE (id || '-' || k AS id,
                                        CAST(utc(published_at) - k * span AS TIMESTAMPTZ) AS published_at,
                                        CAST(utc(updated_at) - k * span AS TIMESTAMPTZ) AS updated_at)
                 FROM page, range({copies}) r(k),
                      (SELECT max(utc(published_at)) - min(utc(published_at)) + INTERVAL 45 SECOND AS span FROM page) s
                 LIMIT {rows};"
            ))
        })
        .await?
        .map_err(|e| SyncError::Other(format!("filling the bench warehouse: {e}")))?;
    syncer.sink.close().await;
    Ok(())
}

/// One side of the lake bench, run in a child process so that its peak
/// memory is its own: `copy` is DuckDB's own `COPY ... TO` Parquet (zstd) of
/// `news_items`, `publish` is fdsync's publish of it to a lake at `target`.
pub async fn lake_child(
    mode: &str,
    warehouse: &std::path::Path,
    target: &std::path::Path,
) -> Result<LakeChildReport, SyncError> {
    let sink = crate::sink::SinkHandle::open_duckdb(warehouse.to_owned()).await?;
    let started = Instant::now();
    let rows = match mode {
        "copy" => {
            let target = target.to_owned();
            sink.call(move |s| {
                crate::lake::rewrite::copy_count(
                    s.connection(),
                    &format!(
                        "COPY (SELECT * FROM news_items) TO '{}' (FORMAT parquet, COMPRESSION zstd)",
                        target.display()
                    ),
                )
            })
            .await?
            .map_err(|e| SyncError::Other(format!("COPY failed: {e}")))?
        }
        "publish" => {
            let scratch = crate::lake::Lake::scratch_beside(warehouse);
            let lake = crate::lake::Lake::open(&target.display().to_string(), scratch)?;
            let report = lake.publish(&sink).await?;
            report
                .tables
                .iter()
                .find(|t| t.table == "news_items")
                .map_or(0, |t| t.rows)
        }
        other => return Err(SyncError::Other(format!("unknown lake bench side {other}"))),
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
pub async fn lake(config: &crate::config::Config, sizes: &[u64], out: &mut impl Write) -> Result<(), SyncError> {
    writeln!(
        out,
        "| rows | COPY TO rows/s | lake rows/s | lake / COPY time | COPY peak MiB | lake peak MiB |\n|---|---|---|---|---|---|"
    )?;
    for &rows in sizes {
        let dir = tempfile_dir()?.join(format!("lake-{rows}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let warehouse = dir.join("bench.duckdb");
        lake_warehouse(config, &warehouse, rows).await?;
        let side = |mode: &str, target: std::path::PathBuf| -> Result<LakeChildReport, SyncError> {
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
