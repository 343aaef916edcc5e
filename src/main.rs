//! The `fdsync` command: parses flags, sets up logging and wires the library's
//! stages together. Exit codes follow the operator contract.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use fdsync::clock::Clock;
use fdsync::config::Config;
use fdsync::emulator::{self, Account, EmulatorConfig, HeaderForm};
use fdsync::sink::{SinkHandle, SinkOptions};
use fdsync::sync::{SyncError, Syncer};
use fdsync::upstream::Client;
use tokio_util::sync::CancellationToken;

/// Mirror a financial disclosure data API into DuckDB, incrementally and within quota.
///
/// Start with `fdsync demo`: it runs everything against the built-in emulator.
#[derive(Parser)]
#[command(name = "fdsync", version, about, long_about = None)]
struct Cli {
    /// Configuration file (TOML). Every key can be overridden as FDSYNC_<SECTION>__<KEY>.
    #[arg(long, global = true, default_value = "config/fdsync.toml")]
    config: PathBuf,
    /// Log line format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// More log detail (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only warnings and errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum LakeCommand {
    /// Publish every row committed to DuckDB since the last publish, one Delta
    /// commit per table (`sync --once` does this after its pipelines).
    ///
    /// Example: AWS_REGION=eu-west-1 fdsync lake publish
    Publish {
        /// Print what was published as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Rewrite each partition that has accumulated several files (each publish
    /// of an append-only table adds one) as one file. Readers' results do not
    /// change. Run it now and then, e.g. nightly.
    ///
    /// Example: fdsync lake compact --min-files 4
    Compact {
        /// Compact partitions with at least this many live files.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(2..))]
        min_files: u64,
        #[arg(long)]
        json: bool,
    },
    /// Delete data files that no version younger than --retain-hours needs:
    /// files replaced by publishes and compactions, and files a crashed publish
    /// uploaded but never committed. Time travel to older versions ends there.
    ///
    /// Example: fdsync lake vacuum --retain-hours 168 --dry-run
    Vacuum {
        /// Keep files needed by any version of the last N hours (at least 1: a
        /// publish in flight elsewhere has uploaded files it has not committed yet).
        #[arg(long, default_value_t = 168, value_parser = clap::value_parser!(u64).range(1..))]
        retain_hours: u64,
        /// List what would be deleted; delete nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum Command {
    /// Run pipelines once from their checkpoints, then exit (for cron, systemd timers, CronJobs).
    ///
    /// Exit codes: 0 all finished; 1 a pipeline failed; 2 usage, configuration or
    /// API-key error; 75 the quota ran out (checkpoints saved, rerun later).
    ///
    /// Example: FDSYNC_API_KEY=pk_live_... fdsync sync --once --pipeline prices
    Sync {
        /// Run once and exit (the only mode of `sync`; `fdsync daemon` schedules).
        #[arg(long, required = true)]
        once: bool,
        /// Run only this pipeline (repeatable); default every enabled pipeline.
        #[arg(long = "pipeline", value_name = "NAME")]
        pipelines: Vec<String>,
        /// Send at most N requests (retries included). When they are spent the run
        /// stops at a commit boundary, exits 0, and lists the pipelines it deferred;
        /// the next run resumes from the checkpoints, stalest companies first.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_requests: Option<u64>,
    },
    /// Run every pipeline on its cron schedule and keep the live news stream
    /// connected, until SIGTERM or SIGINT (then exit 0 with every commit whole).
    ///
    /// A pipeline whose schedule fired since its last run (or that never ran)
    /// runs at once; pipelines run one at a time. Prometheus metrics and a
    /// health check are served on [daemon] metrics_addr (default
    /// 127.0.0.1:9464: /metrics, /healthz). See docs/operations.md.
    ///
    /// Example: FDSYNC_API_KEY=pk_live_... fdsync daemon --config /etc/fdsync/fdsync.toml
    Daemon {
        /// Schedule only these pipelines (repeatable); default every enabled one.
        #[arg(long = "pipeline", value_name = "NAME")]
        pipelines: Vec<String>,
        /// Do not keep the live news stream connected (the scheduled poll still runs).
        #[arg(long)]
        no_stream: bool,
        /// Serve metrics here instead of [daemon] metrics_addr ("off": none).
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<String>,
    },
    /// Only the live news stream: commit every frame as it comes, reconnecting
    /// forever from the last commit, until SIGTERM or SIGINT (exit 0).
    ///
    /// Example: FDSYNC_API_KEY=pk_live_... fdsync stream
    Stream {
        /// The pipeline whose stream to follow (it needs params.stream_route).
        #[arg(long, default_value = "news")]
        pipeline: String,
    },
    /// Per pipeline: last run, status, rows, checkpoint, freshness, next run;
    /// and the quota the service reported last. Reads the warehouse without
    /// writing; works while the daemon runs.
    ///
    /// Example: fdsync status --json | jq '.pipelines[] | {pipeline, freshness_secs}'
    Status {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The lake at [warehouse] parquet_dir: Delta Lake tables of Parquet files
    /// that Spark, Trino, DuckDB and BI tools read (see docs/lake.md).
    #[command(subcommand)]
    Lake(LakeCommand),
    /// Start the emulator, sync everything into a fresh local DuckDB, and show example queries.
    Demo {
        /// Where the demo warehouse is written (replaced on every run).
        #[arg(long, default_value = "data/demo.duckdb")]
        warehouse: PathBuf,
    },
    /// Measure fdsync against a baseline taken in the same run (see BENCHMARKS.md).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Serve the upstream API from local synthetic data (loopback by default).
    ///
    /// Built-in keys: pk_live_emulator_free_0001 (Free plan: 30/min, 250/day) and
    /// pk_live_emulator_build_0001 (Build: 300/min, 100,000/month).
    ///
    /// Example: fdsync emulator --addr 127.0.0.1:8080 --key pk_live_mine=scale:60:5000
    Emulator {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:8080")]
        addr: SocketAddr,
        /// Seed of the synthetic world: same seed and clock, same bytes.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Simulated clock speed relative to real time (60 = an hour a minute).
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Simulated clock start (RFC 3339); default now.
        #[arg(long)]
        start: Option<chrono::DateTime<chrono::Utc>>,
        /// Add an account with one key: KEY=PLAN[+credits:USD], PLAN being free, build or
        /// scale:PER_MINUTE[:PER_MONTH]; prepaid credits pay for requests past the quota
        /// (repeatable).
        #[arg(long = "key", value_name = "KEY=PLAN")]
        keys: Vec<String>,
        /// Rate-limit header form in responses.
        #[arg(long, value_enum, default_value_t = HeaderFormArg::Legacy)]
        header_form: HeaderFormArg,
        /// Generated companies (S0000...) beside the named ones.
        #[arg(long, default_value_t = 5000)]
        companies: u64,
        /// Seconds between `: ping` comments on the news stream.
        #[arg(long, default_value_t = 15.0)]
        stream_ping_secs: f64,
        /// Seconds after which the server closes a news stream.
        #[arg(long, default_value_t = 280.0)]
        stream_close_secs: f64,
        /// Inject faults into data routes, e.g. 5xx=0.1,reset=0.05,truncate=0.05,slow=0.1,slow_ms=200.
        #[arg(long, value_name = "SPEC", value_parser = fdsync::emulator::Faults::parse)]
        faults: Option<fdsync::emulator::Faults>,
        /// Serve the admin interface (create, rotate and revoke keys; advance the
        /// simulated clock; set faults; counters) on this address. Not part of the
        /// public API: keep it on loopback. See docs/emulator.md.
        #[arg(long, value_name = "ADDR")]
        admin_addr: Option<SocketAddr>,
        /// Seconds a revoked key keeps working on the data routes, in emulator time.
        #[arg(long, default_value_t = 60.0)]
        revoke_delay_secs: f64,
    },
}

#[derive(Subcommand)]
enum BenchCommand {
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

#[derive(Clone, Copy, ValueEnum)]
enum HeaderFormArg {
    Legacy,
    Ietf,
    Both,
}

fn init_logging(cli: &Cli) {
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "warn",
        (false, 0) => "info",
        (false, 1) => "debug",
        _ => "trace",
    };
    // Dependencies stay at info: their trace output would be noise, not ours to
    // show. The Delta libraries log every table snapshot at info, and a table
    // not yet created as an error; what matters reaches us as their results.
    let filter = tracing_subscriber::EnvFilter::try_from_env("FDSYNC_LOG").unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new(format!(
            "info,buoyant_kernel=off,buoyant_kernel_engine=off,deltalake_core=warn,fdsync={level}"
        ))
    });
    fdsync::progress::init(matches!(cli.log_format, LogFormat::Text) && !cli.quiet);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(fdsync::progress::LogWriter);
    match cli.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Pipelines by name (default: the enabled ones), from the configured folder.
fn load_pipelines(config: &Config, names: Vec<String>) -> Result<Vec<fdsync::pipeline::Pipeline>, SyncError> {
    let enabled = if names.is_empty() {
        config.pipelines.enabled.clone()
    } else {
        Some(names)
    };
    Ok(fdsync::pipeline::load_dir(&config.pipelines.dir, enabled.as_deref())?)
}

async fn open_sink(config: &Config, holder: &str) -> Result<SinkHandle, SyncError> {
    let options = SinkOptions::from_config(&config.warehouse, holder);
    Ok(SinkHandle::open_duckdb_with(config.warehouse.duckdb.clone(), options).await?)
}

/// The lake `[warehouse] parquet_dir` names, if any, with its scratch folder beside the warehouse.
fn open_lake(config: &Config) -> Result<Option<fdsync::lake::Lake>, SyncError> {
    let Some(dir) = &config.warehouse.parquet_dir else {
        return Ok(None);
    };
    let scratch = fdsync::lake::Lake::scratch_beside(&config.warehouse.duckdb);
    Ok(Some(fdsync::lake::Lake::open(dir, scratch)?))
}

/// The lake a `fdsync lake` command works on: it needs one.
fn configured_lake(config: &Config) -> Result<fdsync::lake::Lake, SyncError> {
    open_lake(config)?.ok_or_else(|| {
        SyncError::Other(
            "no lake is configured: set [warehouse] parquet_dir (a folder or an s3://, gs://, az:// URL)".into(),
        )
    })
}

/// Prints `value` as JSON, or as the text `write_text` writes.
fn print_lake_result<T: serde::Serialize>(
    json: bool,
    value: &T,
    write_text: impl FnOnce(&mut std::io::Stdout) -> std::io::Result<()>,
) -> Result<(), SyncError> {
    let mut stdout = std::io::stdout();
    if json {
        serde_json::to_writer_pretty(&mut stdout, value).map_err(|e| SyncError::Other(e.to_string()))?;
        println!();
        Ok(())
    } else {
        Ok(write_text(&mut stdout)?)
    }
}

fn print_published(out: &mut impl std::io::Write, published: &fdsync::lake::PublishReport) -> std::io::Result<()> {
    if published.tables.is_empty() {
        return writeln!(out, "lake: nothing new to publish");
    }
    for t in &published.tables {
        writeln!(
            out,
            "lake: {:<26} {:>9} rows  +{} -{} files  version {}",
            t.table, t.rows, t.files_added, t.files_removed, t.version
        )?;
    }
    Ok(())
}

/// Runs the syncer as if the time were this instant (RFC 3339), its waits
/// passing at once, instead of on the system clock. For tests that compare
/// runs against an emulator whose clock is frozen: on the system clock, every
/// horizon ("the last 7 days") moves between two runs and can cut the data at
/// another item. Not for production.
const FROZEN_CLOCK_VAR: &str = "FDSYNC_FROZEN_CLOCK";

fn syncer_clock() -> Result<Clock, SyncError> {
    let Ok(at) = std::env::var(FROZEN_CLOCK_VAR) else {
        return Ok(Clock::System);
    };
    let start = chrono::DateTime::parse_from_rfc3339(&at).map_err(|e| {
        SyncError::Other(format!(
            "{FROZEN_CLOCK_VAR}={at:?}: {e}; give an RFC 3339 instant such as 2026-11-25T23:00:00Z, or unset it"
        ))
    })?;
    Ok(Clock::simulated(start.with_timezone(&chrono::Utc), 0.0))
}

/// A syncer with the configured key, holding the warehouse as `holder`.
async fn connect(config: Config, holder: &str) -> Result<Syncer, SyncError> {
    let key = config.api_key()?;
    let clock = syncer_clock()?;
    let client = Client::new(&config.upstream, Some(key), clock.clone())
        .map_err(|e| SyncError::Other(format!("cannot build the HTTP client: {e}")))?;
    let sink = open_sink(&config, holder).await?;
    Ok(Syncer {
        config,
        client,
        sink,
        clock,
    })
}

/// Cancelled at the first SIGTERM or SIGINT.
fn shutdown_on_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(e) => {
                    tracing::warn!(message = "Cannot listen for SIGTERM; only SIGINT stops cleanly.", error = %e);
                    std::future::pending::<()>().await;
                }
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        tracing::info!(message = "Stopping: the commit in flight finishes, the page in flight is abandoned.");
        cancel.cancel();
    });
    token
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

async fn run(cli: Cli) -> Result<(), SyncError> {
    match cli.command {
        Command::Sync {
            once: _,
            pipelines,
            max_requests,
        } => {
            let config = Config::load(&cli.config)?;
            config.api_key()?;
            let pipelines = load_pipelines(&config, pipelines)?;
            let syncer = connect(config, "fdsync sync --once").await?;
            if let Some(n) = max_requests {
                syncer.client.limit_requests(n);
            }
            let lake = open_lake(&syncer.config)?;
            let (report, result) = syncer.run_once(&pipelines).await;
            // Whatever the run committed is published, even when it stopped early.
            let published = match &lake {
                Some(lake) => lake.publish(&syncer.sink).await.map(Some),
                None => Ok(None),
            };
            syncer.sink.close().await;
            let mut stdout = std::io::stdout();
            fdsync::demo::print_report(&mut stdout, &report)?;
            if let Ok(Some(published)) = &published {
                print_published(&mut stdout, published)?;
            }
            result.and(published.map(|_| ()).map_err(SyncError::from))
        }
        Command::Lake(LakeCommand::Compact { min_files, json }) => {
            let config = Config::load(&cli.config)?;
            let lake = configured_lake(&config)?;
            let compacted = lake.compact(usize::try_from(min_files).unwrap_or(usize::MAX)).await?;
            print_lake_result(json, &compacted, |out| {
                if compacted.is_empty() {
                    writeln!(out, "lake: no partition has {min_files} files or more")?;
                }
                for t in &compacted {
                    writeln!(
                        out,
                        "lake: {:<26} -{} +{} files  version {}",
                        t.table, t.files_removed, t.files_added, t.version
                    )?;
                }
                Ok(())
            })
        }
        Command::Lake(LakeCommand::Vacuum {
            retain_hours,
            dry_run,
            json,
        }) => {
            let config = Config::load(&cli.config)?;
            let lake = configured_lake(&config)?;
            let retain = chrono::Duration::hours(i64::try_from(retain_hours).unwrap_or(i64::MAX / 3_600_000));
            let vacuumed = lake.vacuum(retain, dry_run).await?;
            print_lake_result(json, &vacuumed, |out| {
                let verb = if dry_run { "would delete" } else { "deleted" };
                if vacuumed.is_empty() {
                    writeln!(out, "lake: nothing to delete")?;
                }
                for t in &vacuumed {
                    writeln!(out, "lake: {:<26} {verb} {} files", t.table, t.files.len())?;
                }
                Ok(())
            })
        }
        Command::Lake(LakeCommand::Publish { json }) => {
            let config = Config::load(&cli.config)?;
            let lake = configured_lake(&config)?;
            let sink = open_sink(&config, "fdsync lake publish").await?;
            let published = lake.publish(&sink).await;
            sink.close().await;
            let published = published?;
            print_lake_result(json, &published, |out| print_published(out, &published))
        }
        Command::Daemon {
            pipelines,
            no_stream,
            metrics_addr,
        } => {
            let mut config = Config::load(&cli.config)?;
            config.api_key()?;
            if let Some(addr) = metrics_addr {
                config.daemon.metrics_addr = addr;
            }
            let metrics_addr = config
                .daemon
                .metrics_socket()
                .map_err(|e| SyncError::Other(format!("--metrics-addr: {e}")))?;
            let pipelines = load_pipelines(&config, pipelines)?;
            let lake = open_lake(&config)?.map(std::sync::Arc::new);
            let syncer = connect(config.clone(), "fdsync daemon").await?;
            let daemon = fdsync::daemon::Daemon {
                syncer: std::sync::Arc::new(syncer),
                pipelines,
                stream: config.daemon.stream && !no_stream,
                metrics_addr,
                lake,
            };
            daemon.run(shutdown_on_signal()).await
        }
        Command::Stream { pipeline } => {
            let config = Config::load(&cli.config)?;
            config.api_key()?;
            let pipelines = load_pipelines(&config, vec![pipeline])?;
            let syncer = connect(config, "fdsync stream").await?;
            let result = syncer.run_stream(&pipelines[0], &shutdown_on_signal(), false).await;
            syncer.sink.close().await;
            let report = result?;
            println!(
                "stream stopped: {} connections, {} frames, {} new items, {} rewritten headlines",
                report.connections, report.frames, report.new_items, report.rewrites
            );
            Ok(())
        }
        Command::Status { json } => {
            let config = Config::load(&cli.config)?;
            let pipelines = load_pipelines(&config, Vec::new())?;
            let status = fdsync::status::read(&config.warehouse.duckdb, &pipelines, chrono::Utc::now())?;
            let mut stdout = std::io::stdout();
            if json {
                serde_json::to_writer_pretty(&mut stdout, &status).map_err(|e| SyncError::Other(e.to_string()))?;
                println!();
            } else {
                fdsync::status::write_text(&mut stdout, &status)?;
            }
            Ok(())
        }
        Command::Bench(BenchCommand::Lake { rows }) => {
            let config = Config::load(&cli.config)?;
            fdsync::bench::lake(&config, &rows, &mut std::io::stdout()).await
        }
        Command::Bench(BenchCommand::LakeChild {
            mode,
            warehouse,
            target,
        }) => {
            let report = fdsync::bench::lake_child(&mode, &warehouse, &target).await?;
            serde_json::to_writer(std::io::stdout(), &report).map_err(|e| SyncError::Other(e.to_string()))?;
            Ok(())
        }
        Command::Bench(BenchCommand::Ingest { news, prices, rounds }) => {
            let runs = [(fdsync::bench::Feed::News, news), (fdsync::bench::Feed::Prices, prices)];
            let rounds = usize::try_from(rounds).unwrap_or(usize::MAX);
            fdsync::bench::ingest(&runs, rounds, &mut std::io::stdout()).await
        }
        Command::Bench(BenchCommand::IngestChild {
            mode,
            feed,
            base_url,
            warehouse,
            size,
        }) => {
            let config = Config::load(&cli.config)?;
            let feed: fdsync::bench::Feed = feed.parse()?;
            let report = fdsync::bench::ingest_child(feed, &mode, &config, &base_url, &warehouse, size).await?;
            serde_json::to_writer(std::io::stdout(), &report).map_err(|e| SyncError::Other(e.to_string()))?;
            Ok(())
        }
        Command::Bench(BenchCommand::EmulatorMemory { items }) => {
            fdsync::bench::emulator_memory(&items, &mut std::io::stdout()).await
        }
        Command::Bench(BenchCommand::ColdStart { companies }) => {
            let config = Config::load(&cli.config)?;
            fdsync::bench::cold_starts(&config, &companies, &mut std::io::stdout()).await
        }
        Command::Bench(BenchCommand::ColdStartChild {
            base_url,
            routes,
            concurrency,
        }) => fdsync::bench::cold_start_child(&base_url, &routes, concurrency).await,
        Command::Bench(BenchCommand::Requests { companies }) => {
            let config = Config::load(&cli.config)?;
            fdsync::bench::requests(&config, &companies, &mut std::io::stdout()).await
        }
        Command::Bench(BenchCommand::NewsLag { items, speed }) => {
            let config = Config::load(&cli.config)?;
            fdsync::bench::news_lag(&config, items, speed, &mut std::io::stdout()).await
        }
        Command::Demo { warehouse } => {
            let config = Config::load(&cli.config)?;
            let mut stdout = std::io::stdout();
            fdsync::demo::run(config, &warehouse, &mut stdout).await
        }
        Command::Emulator {
            addr,
            seed,
            speed,
            start,
            keys,
            header_form,
            companies,
            faults,
            stream_ping_secs,
            stream_close_secs,
            admin_addr,
            revoke_delay_secs,
        } => {
            let mut config = EmulatorConfig {
                seed,
                clock: if speed == 1.0 && start.is_none() {
                    Clock::System
                } else {
                    Clock::simulated(start.unwrap_or_else(chrono::Utc::now), speed)
                },
                header_form: match header_form {
                    HeaderFormArg::Legacy => HeaderForm::Legacy,
                    HeaderFormArg::Ietf => HeaderForm::Ietf,
                    HeaderFormArg::Both => HeaderForm::Both,
                },
                generated_companies: companies,
                faults: faults.unwrap_or_default(),
                stream: fdsync::emulator::StreamTiming {
                    ping: std::time::Duration::from_secs_f64(stream_ping_secs.max(0.01)),
                    close_after: std::time::Duration::from_secs_f64(stream_close_secs.max(0.01)),
                    ..Default::default()
                },
                revoke_delay: chrono::Duration::milliseconds((revoke_delay_secs.max(0.0) * 1000.0) as i64),
                ..EmulatorConfig::default()
            };
            for (i, spec) in keys.iter().enumerate() {
                let account = Account::from_spec(format!("cli-{}", i + 1), spec)
                    .map_err(|e| SyncError::Other(format!("--key: {e}")))?;
                config.accounts.push(account);
            }
            let running = emulator::spawn(config, addr)
                .await
                .map_err(|e| SyncError::Other(format!("cannot listen on {addr}: {e}")))?;
            tracing::info!(message = "Emulator listening.", addr = %running.addr);
            println!("fdsync emulator on {} (Ctrl-C stops it)", running.base_url());
            // Held until exit: dropping it would stop the admin listener.
            let _admin = match admin_addr {
                Some(admin_addr) => {
                    let (bound, shutdown) = emulator::serve(running.emulator.admin_router(), admin_addr)
                        .await
                        .map_err(|e| SyncError::Other(format!("--admin-addr: cannot listen on {admin_addr}: {e}")))?;
                    println!("admin interface on http://{bound}/admin (not part of the public API)");
                    Some(shutdown)
                }
                None => None,
            };
            tokio::signal::ctrl_c()
                .await
                .map_err(|e| SyncError::Other(e.to_string()))?;
            Ok(())
        }
    }
}
