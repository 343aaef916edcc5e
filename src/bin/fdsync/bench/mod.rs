//! `fdsync bench`: the benchmarks of BENCHMARKS.md, each against a baseline
//! measured in the same invocation.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use fdsync::config::Config;

mod measure;
use measure as bench;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The emulator's peak memory while serving the news tape back to front, at
    /// several tape sizes, against its own idle memory.
    ///
    /// Example: fdsync bench emulator-memory --items 100000,300000,1000000
    EmulatorMemory {
        /// Items served per pass, comma-separated; each pass uses a fresh emulator process.
        #[arg(long, value_delimiter = ',', default_value = "100000,300000,1000000")]
        items: Vec<u64>,
    },
    /// Cold start: a no-change `sync --once` of every pipeline, the whole
    /// process timed, after a first sync of N generated companies; against a
    /// process that sends the same requests and does nothing else.
    ///
    /// Example: fdsync bench cold-start --companies 5,25,100
    ColdStart {
        /// Universe sizes (generated companies), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "5,25,100")]
        companies: Vec<usize>,
    },
    /// The baseline side of `bench cold-start`: sends the routes in a file.
    #[command(hide = true)]
    ColdStartChild {
        base_url: String,
        routes: PathBuf,
        concurrency: usize,
    },
    /// Requests a first full sync and a no-change sync spend, against the least
    /// the routes allow: for the configured universe, then for N generated companies.
    ///
    /// Example: fdsync bench requests --companies 25,100
    Requests {
        /// Sizes of generated universes to run after the configured one.
        #[arg(long, value_delimiter = ',', default_value = "25,100")]
        companies: Vec<usize>,
    },
    /// Publishing a news backfill to the lake (a local folder) against
    /// DuckDB's own COPY ... TO Parquet of the same rows: rows per second and
    /// peak memory of each, in separate processes, at several sizes.
    ///
    /// Example: fdsync bench lake --rows 100000,300000,1000000
    Lake {
        /// news_items rows per run, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "100000,300000,1000000")]
        rows: Vec<u64>,
    },
    /// Ingest throughput: a news backfill and companies' full price
    /// histories from the emulator (unthrottled, in its own process) to
    /// committed DuckDB rows, against a baseline that only parses the same
    /// pages and appends them with a plain Appender; with fdsync's peak
    /// memory. Each side runs in a fresh process and a fresh warehouse; the
    /// sides take turns for `--rounds` rounds, and each figure is the median
    /// of its rounds.
    ///
    /// Example: fdsync bench ingest --news 100000,300000,1000000 --prices 200,600,2000
    ///
    /// Give an empty list (`--news ''`) to skip a feed.
    Ingest {
        /// News items per run, comma-separated (the backfill horizon that holds them).
        #[arg(long, value_delimiter = ',', default_value = "100000,300000,1000000")]
        news: Vec<u64>,
        /// Generated companies per run, comma-separated (each one's whole history).
        #[arg(long, value_delimiter = ',', default_value = "200,600,2000")]
        prices: Vec<u64>,
        /// Rounds per size: the sides take turns, and each figure is the
        /// median of its rounds (one round: each side once).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
        rounds: u64,
    },
    /// A backfill and a run that finds nothing new, each a whole `fdsync sync
    /// --once` process as an operator runs it: fdsync at its default and at
    /// each of `--limits`, and an earlier fdsync binary when given, beside
    /// a bare process that fetches the same pages, parses them and appends
    /// them with DuckDB's plain Appender. Wall time, peak memory (VmHWM) and
    /// the warehouse file's size of each.
    ///
    /// Example: fdsync bench backfill --sizes 200:100000,2000:1000000 --earlier /opt/fdsync-0.1/fdsync
    ///
    /// Example, the file at more settings: fdsync bench backfill --sizes 200:100000 --limits 32,48,96
    Backfill {
        /// Sizes as COMPANIES:NEWS_ITEMS (generated companies' whole price
        /// histories, and the news backfill that holds that many items), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "200:100000,2000:1000000")]
        sizes: Vec<bench::BackfillSize>,
        /// An earlier fdsync binary to run beside this one, at its own default
        /// and at each of `--limits`.
        #[arg(long)]
        earlier: Option<PathBuf>,
        /// The `memory_limit_mb` settings each binary runs at besides its
        /// default, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "32",
              value_parser = clap::value_parser!(u64).range(fdsync::config::MIN_MEMORY_LIMIT_MB..))]
        limits: Vec<u64>,
    },
    /// The functions a small backfill, its no-change run and `fdsync status`
    /// execute, each run under callgrind (valgrind must be installed), written
    /// for the linker to place together (build.rs): run it after changes that
    /// add or rename much code, from a build of the current source, and
    /// rebuild. Takes a few minutes.
    ///
    /// Example: fdsync bench symbol-order --out src/bin/fdsync/symbol-order.txt
    SymbolOrder {
        /// The list to write.
        #[arg(long, default_value = "src/bin/fdsync/symbol-order.txt")]
        out: PathBuf,
    },
    /// The bare Appender side of `bench backfill`, in its own process.
    #[command(hide = true)]
    BackfillChild {
        base_url: String,
        warehouse: PathBuf,
        companies: u64,
        items: u64,
    },
    /// One side of `bench ingest`, in its own process (prints a JSON report).
    #[command(hide = true)]
    IngestChild {
        mode: String,
        feed: String,
        base_url: String,
        warehouse: PathBuf,
        size: u64,
    },
    /// One side of `bench lake`, in its own process (prints a JSON report).
    #[command(hide = true)]
    LakeChild {
        mode: String,
        warehouse: PathBuf,
        target: PathBuf,
    },
    /// News lag in daemon mode: from an item's arrival in the emulator to its
    /// row committed by the live stream, p50 and p99, against a bare SSE
    /// reader of the same stream in the same run.
    ///
    /// Example: fdsync bench news-lag --items 1000
    NewsLag {
        /// Arrivals to measure.
        #[arg(long, default_value_t = 1000)]
        items: u64,
        /// Emulator clock speed: items arrive every 45 simulated seconds, so
        /// 900 gives 20 a second.
        #[arg(long, default_value_t = 900.0)]
        speed: f64,
    },
}

pub async fn run(config_path: &std::path::Path, command: BenchCommand) -> Result<()> {
    let config = || Config::load(config_path);
    let mut out = std::io::stdout();
    match command {
        BenchCommand::Lake { rows } => bench::lake(&config()?, &rows, &mut out).await?,
        BenchCommand::LakeChild {
            mode,
            warehouse,
            target,
        } => serde_json::to_writer(out, &bench::lake_child(&mode, &warehouse, &target).await?)?,
        BenchCommand::Ingest { news, prices, rounds } => {
            let runs = [(bench::Feed::News, news), (bench::Feed::Prices, prices)];
            let rounds = usize::try_from(rounds).unwrap_or(usize::MAX);
            bench::ingest(&runs, rounds, &mut out).await?;
        }
        BenchCommand::IngestChild {
            mode,
            feed,
            base_url,
            warehouse,
            size,
        } => {
            let feed: bench::Feed = feed.parse()?;
            let report = bench::ingest_child(feed, &mode, &config()?, &base_url, &warehouse, size).await?;
            serde_json::to_writer(out, &report)?;
        }
        BenchCommand::Backfill { sizes, earlier, limits } => {
            bench::backfill(&config()?, &sizes, earlier.as_deref(), &limits, &mut out).await?;
        }
        BenchCommand::SymbolOrder { out: target } => bench::symbol_order(&config()?, &target, &mut out)?,
        BenchCommand::BackfillChild {
            base_url,
            warehouse,
            companies,
            items,
        } => bench::backfill_child(&config()?, &base_url, &warehouse, companies, items).await?,
        BenchCommand::EmulatorMemory { items } => bench::emulator_memory(&items, &mut out).await?,
        BenchCommand::ColdStart { companies } => bench::cold_starts(&config()?, &companies, &mut out).await?,
        BenchCommand::ColdStartChild {
            base_url,
            routes,
            concurrency,
        } => bench::cold_start_child(&base_url, &routes, concurrency).await?,
        BenchCommand::Requests { companies } => bench::requests(&config()?, &companies, &mut out).await?,
        BenchCommand::NewsLag { items, speed } => bench::news_lag(&config()?, items, speed, &mut out).await?,
    }
    Ok(())
}
