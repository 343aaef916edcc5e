//! `fdsync-bench`: the benchmarks of BENCHMARKS.md, each against a baseline
//! measured in the same invocation, run from a release build:
//! `cargo dist && cargo dist-bench backfill`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use fdsync_core::config::Config;

mod measure;
mod warehouse;
use measure as bench;

/// jemalloc with the options fdsync's own binary has, so that the baselines
/// this binary runs meet the same allocator.
#[global_allocator]
static ALLOCATOR: fdsync_allocator::Jemalloc = fdsync_allocator::Jemalloc;

/// Measure fdsync against a baseline taken in the same run (see BENCHMARKS.md).
#[derive(Parser)]
#[command(name = "fdsync-bench", version)]
struct Cli {
    /// The fdsync configuration the benches start from (their pipelines and universe).
    #[arg(long, global = true, default_value = "config/fdsync.toml", env = "FDSYNC_CONFIG")]
    config: PathBuf,
    /// The fdsync binary to measure; by default the one cargo built beside this bench.
    #[arg(long, global = true, value_name = "PATH")]
    fdsync: Option<PathBuf>,
    /// Only warnings and errors on stderr.
    #[arg(long, short, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: BenchCommand,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = if cli.quiet { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    fdsync_core::sink::on_load(fdsync_allocator::note_load);
    if let Err(e) = fdsync_allocator::set(fdsync_allocator::Purging::Background) {
        tracing::debug!(message = "Could not purge in the background.", error = %e);
    }
    let fdsync = match cli.fdsync.map_or_else(measure::fdsync_beside_this, Ok) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("error: {}", fdsync_core::error::one_line(&e));
            return ExitCode::from(2);
        }
    };
    measure::FDSYNC.set(fdsync).expect("set once, at start");
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(&cli.config, cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", fdsync_core::error::one_line(&e));
            ExitCode::from(1)
        }
    }
}

#[derive(Subcommand)]
enum BenchCommand {
    /// The emulator's peak memory while serving the news tape back to front, at
    /// several tape sizes, against its own idle memory.
    ///
    /// Example: fdsync-bench emulator-memory --items 100000,300000,1000000
    EmulatorMemory {
        /// Items served per pass, comma-separated; each pass uses a fresh emulator process.
        #[arg(long, value_delimiter = ',', default_value = "100000,300000,1000000")]
        items: Vec<u64>,
    },
    /// Cold start: a no-change `sync --once` of every pipeline, the whole
    /// process timed, after a first sync of N generated companies; against a
    /// process that sends the same requests and does nothing else.
    ///
    /// Example: fdsync-bench cold-start --companies 5,25,100
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
    /// Example: fdsync-bench requests --companies 25,100
    Requests {
        /// Sizes of generated universes to run after the configured one.
        #[arg(long, value_delimiter = ',', default_value = "25,100")]
        companies: Vec<usize>,
    },
    /// Publishing a news backfill to the lake (a local folder) against
    /// DuckDB's own COPY ... TO Parquet of the same rows: rows per second and
    /// peak memory of each, in separate processes, at several sizes.
    ///
    /// Example: fdsync-bench lake --rows 100000,300000,1000000
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
    /// Example: fdsync-bench ingest --news 100000,300000,1000000 --prices 200,600,2000
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
    /// each of `--limits`, and other fdsync binaries when given, beside
    /// a bare process that fetches the same pages, parses them and appends
    /// them with DuckDB's plain Appender. Wall time, peak memory (VmHWM) and
    /// the warehouse file's size of each.
    ///
    /// Example: fdsync-bench backfill --sizes 200:100000,2000:1000000 --earlier
    /// /opt/fdsync-0.1/fdsync
    ///
    /// Example, the file at more settings: fdsync-bench backfill --sizes 200:100000 --limits
    /// 32,48,96
    Backfill {
        /// Sizes as COMPANIES:NEWS_ITEMS (generated companies' whole price
        /// histories, and the news backfill that holds that many items), comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "200:100000,2000:1000000")]
        sizes: Vec<bench::BackfillSize>,
        /// Another fdsync binary to run beside this one (an earlier commit,
        /// another build of this one), at its own default and at each of
        /// `--limits`; repeat it for more. A side is named by its file's name.
        #[arg(long)]
        earlier: Vec<PathBuf>,
        /// The `memory_limit_mb` settings each binary runs at besides its
        /// default, comma-separated.
        #[arg(long, value_delimiter = ',', default_value = "32",
              value_parser = clap::value_parser!(u64).range(fdsync_core::config::MIN_MEMORY_LIMIT_MB..))]
        limits: Vec<u64>,
        /// Rounds: every side runs once a round, in turn, and each figure is
        /// the median of its rounds.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        rounds: u64,
    },
    /// The C and C++ functions (DuckDB's, mostly) that a small backfill, its
    /// no-change run and `fdsync status` execute, each run under callgrind
    /// (valgrind must be installed), written for the linker to place together
    /// (build.rs). Needed again when the DuckDB pin moves, which a test tells;
    /// takes a few minutes.
    ///
    /// Example: fdsync-bench symbol-order --out link/symbol-order.txt
    SymbolOrder {
        /// The list of C and C++ functions to write.
        #[arg(long, default_value = "link/symbol-order.txt")]
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
    /// Example: fdsync-bench news-lag --items 1000
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

async fn run(config_path: &std::path::Path, command: BenchCommand) -> Result<()> {
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
        BenchCommand::Backfill {
            sizes,
            earlier,
            limits,
            rounds,
        } => {
            bench::backfill(&config()?, &sizes, &earlier, &limits, rounds, &mut out).await?;
        }
        BenchCommand::SymbolOrder { out: target } => {
            bench::symbol_order(&config()?, &target, &mut out)?;
        }
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
