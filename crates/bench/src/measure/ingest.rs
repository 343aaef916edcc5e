//! `fdsync-bench ingest`: a news backfill and companies' full price histories
//! from the emulator's JSON to committed DuckDB rows, against a baseline that
//! only parses the same bytes and appends them with a plain Appender. Both
//! sides are timed until their database file is closed: the checkpoint at
//! close is work the load left to do.
//!
//! Each side runs in its own process of this binary, so that its peak memory
//! is its own; both read the same pages from the same emulator process.

use std::io::Write;
use std::time::Instant;

use chrono::{DateTime, Duration, Utc};

use super::{BENCH_KEY, BENCH_START, EmulatorProcess, child_report, failure, fresh_dir, memory_of, mib};
use fdsync_core::feeds::news::{NewsItem, NewsPage};
use fdsync_core::feeds::prices;

/// The tape's mean spacing (docs/emulator.md): one item every 45 seconds.
const SECONDS_PER_ITEM: u64 = 45;
pub(super) const PAGE_LIMIT: u32 = 200;

/// What the bench feeds through both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feed {
    /// A news backfill of about N items.
    News,
    /// The full daily price history of N generated companies.
    Prices,
}

impl std::str::FromStr for Feed {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Feed> {
        match s {
            "news" => Ok(Feed::News),
            "prices" => Ok(Feed::Prices),
            other => Err(failure(format!("unknown ingest feed {other:?}: use news or prices"))),
        }
    }
}

impl std::fmt::Display for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Feed::News => "news",
            Feed::Prices => "prices",
        })
    }
}

/// The generated companies the prices feed syncs: the emulator's `S0000`, ...
pub(super) fn generated_companies(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("S{i:04}")).collect()
}

/// What one side of the bench did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct IngestChildReport {
    /// Items read from the feed (rows of `news_items`).
    pub rows: u64,
    pub requests: u64,
    /// fdsync: the whole sync. Baseline: parsing and appending only.
    pub seconds: f64,
    /// Baseline only: fetching the pages before the timed part.
    pub fetch_seconds: f64,
    pub peak_kib: u64,
}

/// The backfill horizon that holds about `items` items of the tape.
pub(super) fn backfill_days(items: u64) -> u32 {
    (items * SECONDS_PER_ITEM).div_ceil(86_400).max(1) as u32
}

pub(super) fn bench_start() -> DateTime<Utc> {
    BENCH_START.parse().expect("bench start time")
}

/// One side of the bench for `feed` at `size` (items or companies).
///
/// # Errors
/// When the emulator, the warehouse or a sync fails.
pub async fn child(
    feed: Feed,
    mode: &str,
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    size: u64,
) -> anyhow::Result<IngestChildReport> {
    match (feed, mode) {
        (Feed::News, "fdsync") => child_fdsync_news(config, base_url, warehouse, size).await,
        (Feed::News, "baseline") => child_baseline_news(config, base_url, warehouse, size, false).await,
        (Feed::News, "baseline-two-tables") => child_baseline_news(config, base_url, warehouse, size, true).await,
        (Feed::Prices, "fdsync") => child_fdsync_prices(config, base_url, warehouse, size).await,
        (Feed::Prices, "baseline") => child_baseline_prices(config, base_url, warehouse, size).await,
        (_, other) => Err(failure(format!("unknown ingest bench side {other:?}"))),
    }
}

/// fdsync's news pipeline, as `sync --once` runs it, into a fresh warehouse.
async fn child_fdsync_news(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    items: u64,
) -> anyhow::Result<IngestChildReport> {
    let mut pipelines = fdsync_core::pipeline::load_dir(&config.pipelines.dir, None)?;
    pipelines.retain(|p| p.name == "news");
    let news = pipelines
        .first_mut()
        .ok_or_else(|| failure(format!("no news pipeline in {}", config.pipelines.dir.display())))?;
    news.params.backfill_days = Some(backfill_days(items));
    news.params.page_limit = Some(PAGE_LIMIT);
    let clock = fdsync_core::clock::Clock::simulated(bench_start(), 0.0);
    let syncer = fdsync_core::sync::Syncer::at(
        base_url,
        BENCH_KEY,
        config.clone(),
        warehouse,
        clock,
        "fdsync-bench ingest",
    )
    .await?;
    timed_sync(&syncer, &pipelines, "news_items").await
}

/// Runs `pipelines` once, timed, and reports the rows `table` then holds.
async fn timed_sync(
    syncer: &fdsync_core::sync::Syncer,
    pipelines: &[fdsync_core::pipeline::Pipeline],
    table: &'static str,
) -> anyhow::Result<IngestChildReport> {
    let started = Instant::now();
    let (report, result) = syncer.run_once(pipelines).await;
    result?;
    let rows = syncer.sink.call(move |s| s.row_count(table)).await??;
    // Closing checkpoints what the run left in the WAL: work the run owes.
    syncer.sink.close().await;
    let seconds = started.elapsed().as_secs_f64();
    Ok(IngestChildReport {
        rows: rows as u64,
        requests: report.outcomes.iter().map(|o| o.requests).sum(),
        seconds,
        fetch_seconds: 0.0,
        peak_kib: memory_of(std::process::id()).map_or(0, |m| m.peak_kib),
    })
}

/// The baseline: the same pages fetched first (the same requests fdsync
/// sends, gzip and all), then timed: each page parsed with serde into the wire
/// types and every item appended row by row with DuckDB's Appender into a
/// plain table of the same columns, committed once. With `two_tables`, each
/// item also goes into a second plain table as its headline revision, with
/// its `raw`, as the warehouse contract has fdsync write it: what the
/// contract itself costs, apart from the rest of fdsync.
async fn child_baseline_news(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    items: u64,
    two_tables: bool,
) -> anyhow::Result<IngestChildReport> {
    let horizon = bench_start() - Duration::days(i64::from(backfill_days(items)));
    let http = reqwest::Client::builder()
        .build()
        .map_err(|e| failure(format!("cannot build the HTTP client: {e}")))?;
    let filters = config.news.query();
    let fetch_started = Instant::now();
    let mut pages: Vec<bytes::Bytes> = Vec::new();
    let mut before: Option<String> = None;
    loop {
        let mut url = format!("{base_url}/api/v1/news/feed?limit={PAGE_LIMIT}{filters}");
        if let Some(cursor) = &before {
            url.push_str(&format!(
                "&before={}",
                url::form_urlencoded::byte_serialize(cursor.as_bytes()).collect::<String>()
            ));
        }
        let body = baseline_fetch(&http, &url).await?;
        let (count, oldest, next) = page_shape(&body)?;
        pages.push(body);
        if count == 0 || oldest.is_some_and(|t| t < horizon) {
            break;
        }
        match next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    let fetch_seconds = fetch_started.elapsed().as_secs_f64();

    let mut create = String::from(NEWS_PLAIN);
    let mut tables = vec!["news_plain"];
    if two_tables {
        create.push_str(REVISIONS_PLAIN);
        tables.push("revisions_plain");
    }
    let (rows, seconds) = timed_append(warehouse, &create, &tables, &pages, |appenders, body, rows| {
        *rows += append_news_page(appenders, body)?;
        Ok(())
    })?;
    Ok(IngestChildReport {
        rows,
        requests: pages.len() as u64,
        seconds,
        fetch_seconds,
        peak_kib: memory_of(std::process::id()).map_or(0, |m| m.peak_kib),
    })
}

/// The plain tables the news baselines append to: the items, and their
/// headline revisions as the warehouse contract keeps them.
pub(super) const NEWS_PLAIN: &str =
    "CREATE TABLE news_plain (id VARCHAR, published_at TIMESTAMPTZ, first_seen_at TIMESTAMPTZ,
    updated_at TIMESTAMPTZ, headline VARCHAR, snippet VARCHAR, body VARCHAR, url VARCHAR,
    source_id VARCHAR, source_name VARCHAR, licence_class VARCHAR, attribution VARCHAR,
    display_policy VARCHAR, tickers VARCHAR, ciks VARCHAR, people VARCHAR, indicators VARCHAR,
    topics VARCHAR, storyline_id VARCHAR, importance BIGINT, flash BOOLEAN, form VARCHAR, raw VARCHAR);";
pub(super) const REVISIONS_PLAIN: &str =
    "CREATE TABLE revisions_plain (id VARCHAR, updated_at TIMESTAMPTZ, headline VARCHAR, raw VARCHAR);";

/// One news page parsed with serde, each item appended row by row to the
/// first appender and, when there is a second, as a headline revision to it;
/// returns the items.
pub(super) fn append_news_page(appenders: &mut [duckdb::Appender<'_>], body: &[u8]) -> anyhow::Result<u64> {
    let page: NewsPage = serde_json::from_slice(body).map_err(|e| failure(e.to_string()))?;
    for raw in &page.items {
        let item: NewsItem = serde_json::from_str(raw.get()).map_err(|e| failure(e.to_string()))?;
        let (items, revisions) = appenders.split_at_mut(1);
        let appended = append_news_item(&mut items[0], &item, raw.get()).and_then(|()| {
            revisions.iter_mut().try_for_each(|revisions| {
                revisions.append_row(duckdb::params![item.id, item.updated_at, item.headline, raw.get()])
            })
        });
        appended.map_err(|e| failure(format!("baseline append: {e}")))?;
    }
    Ok(page.items.len() as u64)
}

/// One news item as a row of the baseline's plain table, lists as JSON text
/// (the plain Appender has no list values).
fn append_news_item(appender: &mut duckdb::Appender<'_>, item: &NewsItem, raw: &str) -> duckdb::Result<()> {
    let source = item.source.as_ref();
    let list = |v: &Vec<String>| serde_json::to_string(v).unwrap_or_default();
    appender.append_row(duckdb::params![
        item.id,
        item.published_at,
        item.first_seen_at,
        item.updated_at,
        item.headline,
        item.snippet,
        item.body,
        item.url,
        source.map(|s| s.id.as_str()),
        source.and_then(|s| s.name.as_deref()),
        source.and_then(|s| s.licence_class.as_deref()),
        source.and_then(|s| s.attribution.as_deref()),
        source.and_then(|s| s.display_policy.as_deref()),
        list(&item.tickers),
        list(&item.ciks),
        list(&item.people),
        list(&item.indicators),
        list(&item.topics),
        item.storyline_id,
        item.importance,
        item.flash,
        item.form,
        raw,
    ])
}

/// fdsync's prices pipeline, as `sync --once` runs it, for `companies`
/// generated companies, into a fresh warehouse. The universe is resolved
/// first and not timed: this side is about bars.
async fn child_fdsync_prices(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    companies: u64,
) -> anyhow::Result<IngestChildReport> {
    let mut config = config.clone();
    config.universe.companies = generated_companies(companies);
    let mut pipelines = fdsync_core::pipeline::load_dir(&config.pipelines.dir, None)?;
    pipelines.retain(|p| p.resolves_universe() || std::ptr::eq(p.feed, &prices::FEED));
    let (resolve, prices): (Vec<_>, Vec<_>) = pipelines.into_iter().partition(|p| p.resolves_universe());
    if prices.is_empty() {
        return Err(failure(format!(
            "no prices pipeline in {}",
            config.pipelines.dir.display()
        )));
    }
    let clock = fdsync_core::clock::Clock::simulated(bench_start(), 0.0);
    let syncer =
        fdsync_core::sync::Syncer::at(base_url, BENCH_KEY, config, warehouse, clock, "fdsync-bench ingest").await?;
    let (_, resolved) = syncer.run_once(&resolve).await;
    resolved?;
    timed_sync(&syncer, &prices, "prices_daily").await
}

/// The baseline for prices: each company's full history fetched first (the
/// request fdsync sends for a first sync), then timed: parsed with serde and
/// every bar appended row by row into a plain table of the same columns.
async fn child_baseline_prices(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &std::path::Path,
    companies: u64,
) -> anyhow::Result<IngestChildReport> {
    let params = fdsync_core::pipeline::load_dir(&config.pipelines.dir, None)?
        .into_iter()
        .find(|p| std::ptr::eq(p.feed, &prices::FEED))
        .map(|p| p.params)
        .unwrap_or_default();
    let range = prices::price_range(None, bench_start().date_naive(), &params);
    let http = reqwest::Client::new();
    let fetch_started = Instant::now();
    let mut pages: Vec<(String, bytes::Bytes)> = Vec::new();
    for company in generated_companies(companies) {
        let url = format!("{base_url}/api/v1/companies/{company}/prices?range={range}");
        let body = baseline_fetch(&http, &url).await?;
        pages.push((company, body));
    }
    let fetch_seconds = fetch_started.elapsed().as_secs_f64();

    let (rows, seconds) = timed_append(
        warehouse,
        PRICES_PLAIN,
        &["prices_plain"],
        &pages,
        |appenders, (company, body), rows| {
            let [appender] = appenders else {
                unreachable!("one table")
            };
            *rows += append_price_bars(appender, company, body)?;
            Ok(())
        },
    )?;
    Ok(IngestChildReport {
        rows,
        requests: pages.len() as u64,
        seconds,
        fetch_seconds,
        peak_kib: memory_of(std::process::id()).map_or(0, |m| m.peak_kib),
    })
}

/// The plain table the price baselines append bars to.
pub(super) const PRICES_PLAIN: &str =
    "CREATE TABLE prices_plain (company_key VARCHAR, date DATE, symbol VARCHAR, t_ms BIGINT,
    open DOUBLE, high DOUBLE, low DOUBLE, close DOUBLE, volume BIGINT, raw VARCHAR);";

/// One company's price page parsed with serde, every bar appended row by
/// row to `prices_plain`; returns the bars appended.
pub(super) fn append_price_bars(
    appender: &mut duckdb::Appender<'_>,
    company: &str,
    body: &[u8],
) -> anyhow::Result<u64> {
    let page: prices::PricesPage = serde_json::from_slice(body).map_err(|e| failure(e.to_string()))?;
    for raw in &page.bars {
        let bar: prices::Bar = serde_json::from_str(raw.get()).map_err(|e| failure(e.to_string()))?;
        let date = DateTime::from_timestamp_millis(bar.t).map(|d| d.date_naive());
        appender
            .append_row(duckdb::params![
                company,
                date,
                page.symbol,
                bar.t,
                bar.o,
                bar.h,
                bar.l,
                bar.c,
                bar.v,
                raw.get(),
            ])
            .map_err(|e| failure(format!("baseline append: {e}")))?;
    }
    Ok(page.bars.len() as u64)
}

/// The baseline's timed part: fresh plain tables (`create`), every page
/// appended by `append` with one DuckDB Appender per table (counting its
/// rows), one flush each, the file closed. Returns the rows and the seconds
/// it took.
fn timed_append<P>(
    warehouse: &std::path::Path,
    create: &str,
    tables: &[&str],
    pages: &[P],
    mut append: impl FnMut(&mut [duckdb::Appender<'_>], &P, &mut u64) -> anyhow::Result<()>,
) -> anyhow::Result<(u64, f64)> {
    let conn = duckdb::Connection::open(warehouse).map_err(|e| failure(format!("baseline warehouse: {e}")))?;
    conn.execute_batch(create)
        .map_err(|e| failure(format!("baseline table: {e}")))?;
    let started = Instant::now();
    let mut rows = 0u64;
    let mut appenders = tables
        .iter()
        .map(|table| conn.appender(table))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failure(format!("baseline appender: {e}")))?;
    for page in pages {
        append(&mut appenders, page, &mut rows)?;
    }
    for appender in &mut appenders {
        appender.flush().map_err(|e| failure(format!("baseline flush: {e}")))?;
    }
    drop(appenders);
    // Timed to the closed file, as fdsync's side is.
    conn.close().map_err(|(_, e)| failure(format!("baseline close: {e}")))?;
    Ok((rows, started.elapsed().as_secs_f64()))
}

/// One baseline request, with the key, its body read whole.
pub(super) async fn baseline_fetch(http: &reqwest::Client, url: &str) -> anyhow::Result<bytes::Bytes> {
    let fetched = async {
        http.get(url)
            .header("X-API-KEY", BENCH_KEY)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await
    };
    fetched.await.map_err(|e| failure(format!("baseline fetch: {e}")))
}

/// Items on a page, the oldest `firstSeenAt` among them, and the `before`
/// cursor of the next page back: what the baseline needs to page as fdsync does.
pub(super) fn page_shape(body: &[u8]) -> anyhow::Result<(usize, Option<DateTime<Utc>>, Option<String>)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Seen {
        first_seen_at: Option<DateTime<Utc>>,
    }
    let page: NewsPage = serde_json::from_slice(body).map_err(|e| failure(format!("baseline page: {e}")))?;
    let oldest = page
        .items
        .iter()
        .filter_map(|raw| serde_json::from_str::<Seen>(raw.get()).ok()?.first_seen_at)
        .min();
    Ok((page.items.len(), oldest, page.next_cursor))
}

/// Each feed at each of its sizes (news: items; prices: companies), fdsync
/// against the baseline, each side in a fresh process and a fresh
/// warehouse, reading one emulator process. The sides take turns for
/// `rounds` rounds: a run of a second or two on a shared machine can catch
/// a slow moment that the other side's run does not, so each time is the
/// median of its rounds, each ratio the median of the rounds' ratios (a
/// round's sides run back to back), and the rounds' range of the ratio is
/// shown beside it. The peak is the highest of the rounds.
///
/// # Errors
/// When a side fails or the two sides read different rows.
pub async fn ingest(runs: &[(Feed, Vec<u64>)], rounds: usize, out: &mut impl Write) -> anyhow::Result<()> {
    let rounds = rounds.max(1);
    for (feed, sizes) in runs {
        if sizes.is_empty() {
            continue;
        }
        let unit = match feed {
            Feed::News => "items",
            Feed::Prices => "companies",
        };
        writeln!(
            out,
            "\n{feed} (medians of {rounds} rounds)\n\n| {unit} | rows | requests | fdsync s | fdsync rows/s | baseline parse+append s | baseline rows/s | ratio | rounds' ratios | baseline fetch s | ratio to fetch+parse+append | baseline, two tables s | ratio to it | fdsync peak MiB |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        for &size in sizes {
            let emulator = EmulatorProcess::start()?;
            let dir = fresh_dir(&format!("ingest-{feed}-{size}"))?;
            let side = |mode: &str| -> anyhow::Result<IngestChildReport> {
                let warehouse = dir.join(format!("{mode}.duckdb"));
                // Every round starts from nothing, as a first sync does.
                for file in [warehouse.clone(), warehouse.with_extension("duckdb.wal")] {
                    let _ = std::fs::remove_file(file);
                }
                let size = size.to_string();
                let feed = feed.to_string();
                child_report(
                    "ingest",
                    mode,
                    [
                        feed.as_str().as_ref(),
                        emulator.base_url.as_str().as_ref(),
                        warehouse.as_os_str(),
                        size.as_str().as_ref(),
                    ],
                )
            };
            let mut fdsync = Vec::with_capacity(rounds);
            let mut baseline = Vec::with_capacity(rounds);
            let mut two_tables = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let ours = side("fdsync")?;
                let theirs = side("baseline")?;
                if ours.rows != theirs.rows {
                    return Err(failure(format!(
                        "the sides read different {feed}: fdsync {} rows, baseline {}",
                        ours.rows, theirs.rows
                    )));
                }
                // News only: a price bar is one row of one table either way.
                if *feed == Feed::News {
                    two_tables.push(side("baseline-two-tables")?);
                }
                fdsync.push(ours);
                baseline.push(theirs);
            }
            let seconds = |reports: &[IngestChildReport]| median(reports.iter().map(|r| r.seconds));
            // Each round's fdsync time against `other`'s time in the same round.
            let ratios_to = |other: &[IngestChildReport], time: fn(&IngestChildReport) -> f64| -> Vec<f64> {
                fdsync.iter().zip(other).map(|(f, o)| f.seconds / time(o)).collect()
            };
            let ratios = ratios_to(&baseline, |b| b.seconds);
            let (lowest, highest) = ratios
                .iter()
                .fold((f64::INFINITY, 0f64), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
            let two_tables = if two_tables.is_empty() {
                "- | -".to_owned()
            } else {
                format!(
                    "{:.1} | {:.2}x",
                    seconds(&two_tables),
                    median(ratios_to(&two_tables, |t| t.seconds).into_iter())
                )
            };
            let (fdsync_s, baseline_s) = (seconds(&fdsync), seconds(&baseline));
            writeln!(
                out,
                "| {size} | {} | {} | {fdsync_s:.1} | {:.0} | {baseline_s:.1} | {:.0} | {:.2}x | {lowest:.2}-{highest:.2}x | {:.1} | {:.2}x | {two_tables} | {:.1} |",
                fdsync[0].rows,
                fdsync[0].requests,
                fdsync[0].rows as f64 / fdsync_s,
                baseline[0].rows as f64 / baseline_s,
                median(ratios.iter().copied()),
                median(baseline.iter().map(|b| b.fetch_seconds)),
                median(ratios_to(&baseline, |b| b.seconds + b.fetch_seconds).into_iter()),
                mib(fdsync.iter().map(|f| f.peak_kib).max().unwrap_or(0)),
            )?;
            out.flush()?;
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(())
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}
