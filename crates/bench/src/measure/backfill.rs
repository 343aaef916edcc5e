//! `fdsync-bench backfill`: a first `sync --once` of companies, news and
//! prices into a fresh warehouse, then a run that finds nothing new, each a
//! whole process of fdsync as an operator runs it; beside a bare process that
//! fetches the same pages, parses them and appends them with DuckDB's plain
//! Appender, and beside an earlier fdsync binary when one is given.
//!
//! Wall time is the process's; peak memory is its `VmHWM`, polled every few
//! milliseconds while it runs; file size is the warehouse file and its WAL
//! once the process has exited.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::ingest::{
    NEWS_PLAIN, PAGE_LIMIT, PRICES_PLAIN, REVISIONS_PLAIN, append_news_page, append_price_bars, backfill_days,
    baseline_fetch, bench_start, generated_companies, page_shape,
};
use super::{BENCH_KEY, BENCH_START, EmulatorProcess, failure, fresh_dir, memory_of, mib};

/// The environment variable the bench's config names for the key.
const KEY_ENV: &str = "FDSYNC_BENCH_API_KEY";

/// The pipelines a backfill runs: the universe, the news tape and price bars.
const PIPELINES: [&str; 3] = ["companies", "news", "prices"];

/// One benchmark size: generated companies (each one's whole price history)
/// and news items (the backfill horizon that holds them).
#[derive(Debug, Clone, Copy)]
pub struct Size {
    pub companies: u64,
    pub items: u64,
}

impl std::str::FromStr for Size {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> anyhow::Result<Size> {
        let parsed = s
            .split_once(':')
            .and_then(|(c, n)| Some((c.trim().parse().ok()?, n.trim().parse().ok()?)));
        match parsed {
            Some((companies, items)) if companies > 0 && items > 0 => Ok(Size { companies, items }),
            _ => Err(failure(format!(
                "size {s:?}: give COMPANIES:NEWS_ITEMS, both above zero, such as 2000:1000000"
            ))),
        }
    }
}

/// What one process did.
#[derive(Debug, Clone, Copy)]
struct Measured {
    seconds: f64,
    peak_kib: u64,
}

/// Runs `command` to its end, polling its peak memory, and fails with its
/// stderr (kept in `log`) when it fails.
fn measured(command: &mut Command, what: &str, log: &Path) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .map_err(|e| failure(format!("cannot start {what}: {e}")))?;
    let mut peak_kib = 0;
    let status = loop {
        // A reaped process has no memory left to read: poll before waiting.
        if let Some(memory) = memory_of(child.id()) {
            peak_kib = peak_kib.max(memory.peak_kib);
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let seconds = started.elapsed().as_secs_f64();
    if !status.success() {
        // Its last `error:` line says why it failed (DuckDB's messages end in
        // a line of advice); the warnings before it say what it did about it.
        let message = std::fs::read_to_string(log).unwrap_or_default();
        let mut lines = message.lines().rev().filter(|l| !l.trim().is_empty());
        let why = lines
            .clone()
            .find(|l| l.starts_with("error:"))
            .or_else(|| lines.next())
            .unwrap_or_default();
        return Err(failure(format!("{what} failed ({status}): {}", why.trim())));
    }
    Ok(Measured { seconds, peak_kib })
}

/// The warehouse file's size with its WAL, in bytes.
fn file_bytes(warehouse: &Path) -> u64 {
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    size(warehouse.to_owned()) + size(warehouse.with_extension("duckdb.wal"))
}

/// A pipelines folder holding `config`'s companies, news and prices
/// pipelines, the news backfill set to the horizon that holds `items`.
pub(super) fn pipelines_for(config: &fdsync_core::config::Config, dir: &Path, items: u64) -> anyhow::Result<PathBuf> {
    let pipelines = dir.join("pipelines");
    std::fs::create_dir_all(&pipelines)?;
    for name in PIPELINES {
        let from = config.pipelines.dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&from)
            .map_err(|e| failure(format!("cannot read the {name} pipeline {}: {e}", from.display())))?;
        let mut table: toml::Table = toml::from_str(&text).map_err(|e| failure(format!("{}: {e}", from.display())))?;
        if name == "news" {
            let params = table
                .entry("params")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let Some(params) = params.as_table_mut() {
                params.insert("backfill_days".into(), i64::from(backfill_days(items)).into());
                params.insert("page_limit".into(), i64::from(PAGE_LIMIT).into());
            }
        }
        std::fs::write(pipelines.join(format!("{name}.toml")), toml::to_string(&table)?)?;
    }
    Ok(pipelines)
}

/// The config every fdsync side runs with: the emulator, a warehouse, the
/// generated companies and the bench's pipelines, nothing tuned.
pub(super) fn config_for(base_url: &str, warehouse: &Path, pipelines: &Path, companies: u64) -> String {
    let names: Vec<String> = generated_companies(companies)
        .into_iter()
        .map(|c| format!("{c:?}"))
        .collect();
    format!(
        "[upstream]\nbase_url = {base_url:?}\napi_key_env = {KEY_ENV:?}\n\n\
         [warehouse]\nduckdb = {:?}\n\n[universe]\ncompanies = [{}]\n\n[pipelines]\ndir = {:?}\n",
        warehouse.display().to_string(),
        names.join(", "),
        pipelines.display().to_string(),
    )
}

/// The environment of an fdsync process the bench runs against its
/// emulator: the bench's key, the emulator's frozen clock, and
/// `memory_limit_mb` when given, else the config's (never the caller's
/// environment's).
pub(super) fn bench_environment(command: &mut Command, memory_limit_mb: Option<u64>) {
    command
        .env(KEY_ENV, BENCH_KEY)
        .env("FDSYNC_FROZEN_CLOCK", BENCH_START)
        .env_remove("FDSYNC_WAREHOUSE__MEMORY_LIMIT_MB");
    if let Some(mb) = memory_limit_mb {
        command.env("FDSYNC_WAREHOUSE__MEMORY_LIMIT_MB", mb.to_string());
    }
}

/// One side's figures at one size.
struct Row {
    side: String,
    /// The backfill, the file it left and the no-change run; or why the side
    /// failed, which the table shows rather than ending the bench.
    outcome: Result<Figures, String>,
}

/// A side's backfill, the file it left and its no-change run.
type Figures = (Measured, u64, Option<Measured>);

/// The median of each figure over `runs` (not empty): the upper middle one
/// when the count is even.
fn median_of(runs: &[Figures]) -> Figures {
    fn middle<T: Copy + PartialOrd>(mut values: Vec<T>) -> T {
        values.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        values[values.len() / 2]
    }
    let measured = |pick: &dyn Fn(&Figures) -> Option<Measured>| {
        let picked: Vec<Measured> = runs.iter().filter_map(pick).collect();
        (!picked.is_empty()).then(|| Measured {
            seconds: middle(picked.iter().map(|m| m.seconds).collect()),
            peak_kib: middle(picked.iter().map(|m| m.peak_kib).collect()),
        })
    };
    (
        measured(&|r| Some(r.0)).expect("at least one run"),
        middle(runs.iter().map(|r| r.1).collect()),
        measured(&|r| r.2),
    )
}

/// An fdsync binary's backfill and no-change run, `memory_limit_mb` set
/// through the environment when given.
fn fdsync_side(
    binary: &Path,
    config: &Path,
    warehouse: &Path,
    memory_limit_mb: Option<u64>,
) -> anyhow::Result<(Measured, u64, Measured)> {
    for file in [warehouse.to_owned(), warehouse.with_extension("duckdb.wal")] {
        let _ = std::fs::remove_file(file);
    }
    let run = || {
        let mut command = Command::new(binary);
        command
            .arg("--quiet")
            .arg("--config")
            .arg(config)
            // Every pipeline runs either way; `--all` also keeps binaries up
            // to c112d04, below memory_limit_mb 192, from reading the run
            // log of a new file, which failed there.
            .args(["sync", "--once", "--all"]);
        bench_environment(&mut command, memory_limit_mb);
        let log = warehouse.with_extension("stderr");
        measured(&mut command, &format!("{} sync --once", binary.display()), &log)
    };
    let backfill = run()?;
    let bytes = file_bytes(warehouse);
    let no_change = run()?;
    Ok((backfill, bytes, no_change))
}

/// The rows of each of `tables` in the warehouse at `path`, opened read only.
fn row_counts<const N: usize>(path: &Path, tables: [&str; N]) -> anyhow::Result<[u64; N]> {
    let config = duckdb::Config::default().access_mode(duckdb::AccessMode::ReadOnly)?;
    let conn = duckdb::Connection::open_with_flags(path, config)?;
    let mut counts = [0; N];
    for (count, table) in counts.iter_mut().zip(tables) {
        *count = conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))?;
    }
    Ok(counts)
}

/// The side by side at each size: the bare Appender, fdsync at its default
/// and at each `memory_limit_mb` of `limits`, and each of `earlier` (other
/// fdsync binaries) at its own default and at the same. Every side reads one emulator
/// process per size.
///
/// # Errors
/// When a side fails, or an fdsync side holds other rows than the Appender read.
pub async fn backfill(
    config: &fdsync_core::config::Config,
    sizes: &[Size],
    earlier: &[PathBuf],
    limits: &[u64],
    rounds: u64,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let this = std::env::current_exe()?;
    let mut binaries = vec![("fdsync".to_owned(), super::fdsync_binary().to_owned())];
    for earlier in earlier {
        let name = earlier
            .file_name()
            .map_or_else(|| "earlier".into(), |n| n.to_string_lossy().into_owned());
        binaries.push((name, earlier.to_owned()));
    }
    writeln!(
        out,
        "\n| companies | news items | side | backfill s | to Appender | peak MiB | file MiB | file to Appender | no-change s | no-change peak MiB |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|"
    )?;
    for &size in sizes {
        let emulator = EmulatorProcess::start()?;
        let dir = fresh_dir(&format!("backfill-{}-{}", size.companies, size.items))?;
        let pipelines = pipelines_for(config, &dir, size.items)?;
        let mut rows = Vec::new();

        let appender_file = dir.join("appender.duckdb");
        let mut command = Command::new(&this);
        command
            .args(["--quiet", "backfill-child", &emulator.base_url])
            .arg(&appender_file)
            .args([size.companies.to_string(), size.items.to_string()]);
        let appender = measured(&mut command, "the Appender side", &dir.join("appender.stderr"))?;
        let appender_bytes = file_bytes(&appender_file);
        rows.push(Row {
            side: "bare Appender".into(),
            outcome: Ok((appender, appender_bytes, None)),
        });
        let appender_rows = row_counts(&appender_file, ["news_plain", "prices_plain"])?;

        // Each round runs every side once, in turn, so a slow minute of the
        // machine lands on all of them; each figure is the median of its rounds.
        let sides: Vec<(&str, &Path, Option<u64>)> = binaries
            .iter()
            .flat_map(|(name, binary)| {
                std::iter::once(None)
                    .chain(limits.iter().copied().map(Some))
                    .map(move |limit| (name.as_str(), binary.as_path(), limit))
            })
            .collect();
        let mut runs: Vec<Vec<Figures>> = vec![Vec::new(); sides.len()];
        let mut failed: Vec<Option<String>> = vec![None; sides.len()];
        for _ in 0..rounds.max(1) {
            for (i, &(name, binary, memory_limit_mb)) in sides.iter().enumerate() {
                if failed[i].is_some() {
                    continue;
                }
                let tag = format!("{name}-{}", memory_limit_mb.map_or("default".into(), |m| m.to_string()));
                let warehouse = dir.join(format!("{tag}.duckdb"));
                let config_file = dir.join(format!("{tag}.toml"));
                std::fs::write(
                    &config_file,
                    config_for(&emulator.base_url, &warehouse, &pipelines, size.companies),
                )?;
                let outcome = fdsync_side(binary, &config_file, &warehouse, memory_limit_mb).and_then(
                    |(backfill, bytes, no_change)| {
                        let held = row_counts(&warehouse, ["news_items", "prices_daily"])?;
                        if held != appender_rows {
                            return Err(failure(format!(
                                "{tag} holds {} news items and {} price bars; the Appender read {} and {}",
                                held[0], held[1], appender_rows[0], appender_rows[1]
                            )));
                        }
                        Ok((backfill, bytes, Some(no_change)))
                    },
                );
                match outcome {
                    Ok(figures) => runs[i].push(figures),
                    Err(e) => failed[i] = Some(e.to_string().lines().next().unwrap_or_default().to_owned()),
                }
                let _ = std::fs::remove_file(&warehouse);
                let _ = std::fs::remove_file(warehouse.with_extension("duckdb.wal"));
            }
        }
        for (i, &(name, _, memory_limit_mb)) in sides.iter().enumerate() {
            rows.push(Row {
                side: match memory_limit_mb {
                    None => format!("{name}, its default"),
                    Some(mb) => format!("{name}, memory_limit_mb {mb}"),
                },
                outcome: match failed[i].take() {
                    Some(why) => Err(why),
                    None => Ok(median_of(&runs[i])),
                },
            });
        }
        for row in &rows {
            let (backfill, bytes, no_change) = match &row.outcome {
                Ok(figures) => *figures,
                Err(why) => {
                    writeln!(
                        out,
                        "| {} | {} | {} | failed: {why} |",
                        size.companies, size.items, row.side
                    )?;
                    continue;
                }
            };
            let (no_change_s, no_change_peak) = no_change.map_or(("-".into(), "-".into()), |m| {
                (format!("{:.1}", m.seconds), format!("{:.1}", mib(m.peak_kib)))
            });
            writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.2}x | {:.1} | {:.1} | {:.2}x | {no_change_s} | {no_change_peak} |",
                size.companies,
                size.items,
                row.side,
                backfill.seconds,
                backfill.seconds / appender.seconds,
                mib(backfill.peak_kib),
                bytes as f64 / f64::from(1 << 20),
                bytes as f64 / appender_bytes.max(1) as f64,
            )?;
        }
        writeln!(
            out,
            "|  |  | ({} news items, {} price bars) |  |  |  |  |  |  |  |",
            appender_rows[0], appender_rows[1]
        )?;
        out.flush()?;
        drop(emulator);
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(())
}

/// The bare side, in its own process: every company's whole price history
/// and the news tape back to the horizon that holds `items`, fetched one
/// page at a time as fdsync asks for them, each page parsed with serde and
/// appended row by row with DuckDB's plain Appender into plain tables (the
/// items, their headline revisions and the bars), one commit, file closed.
///
/// # Errors
/// When a request, a page or the warehouse fails.
pub async fn child(
    config: &fdsync_core::config::Config,
    base_url: &str,
    warehouse: &Path,
    companies: u64,
    items: u64,
) -> anyhow::Result<()> {
    let params = fdsync_core::pipeline::load_dir(&config.pipelines.dir, None)?
        .into_iter()
        .find(|p| std::ptr::eq(p.feed, &fdsync_core::feeds::prices::FEED))
        .map(|p| p.params)
        .unwrap_or_default();
    let http = reqwest::Client::new();
    let conn = duckdb::Connection::open(warehouse).map_err(|e| failure(format!("Appender warehouse: {e}")))?;
    conn.execute_batch(&format!("{NEWS_PLAIN}{REVISIONS_PLAIN}{PRICES_PLAIN}"))?;
    let mut news = ["news_plain", "revisions_plain"]
        .iter()
        .map(|t| conn.appender(t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut prices = conn.appender("prices_plain")?;
    let range = fdsync_core::feeds::prices::price_range(None, bench_start().date_naive(), &params);
    for company in generated_companies(companies) {
        let body = baseline_fetch(
            &http,
            &format!("{base_url}/api/v1/companies/{company}/prices?range={range}"),
        )
        .await?;
        append_price_bars(&mut prices, &company, &body)?;
    }
    let horizon = bench_start() - chrono::Duration::days(i64::from(backfill_days(items)));
    let mut before: Option<String> = None;
    loop {
        let mut url = format!("{base_url}/api/v1/news/feed?limit={PAGE_LIMIT}");
        if let Some(cursor) = &before {
            url.push_str("&before=");
            url.extend(url::form_urlencoded::byte_serialize(cursor.as_bytes()));
        }
        let body = baseline_fetch(&http, &url).await?;
        let (count, oldest, next) = page_shape(&body)?;
        append_news_page(&mut news, &body)?;
        if count == 0 || oldest.is_some_and(|t| t < horizon) {
            break;
        }
        match next {
            Some(next) => before = Some(next),
            None => break,
        }
    }
    for appender in news.iter_mut().chain([&mut prices]) {
        appender.flush()?;
    }
    drop((news, prices));
    conn.close().map_err(|(_, e)| failure(format!("Appender close: {e}")))?;
    Ok(())
}
