//! The `fdsync` command: parses flags, sets up logging and dispatches to one
//! module per command. Exit codes follow the operator contract.

#![forbid(unsafe_code)]
// The commands' doc comments are their `--help`, written for a terminal:
// `[daemon]` is a config section and `<KEY>` a placeholder there, not links
// or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

mod common;
mod demo;
mod emulator;
mod init;
mod lake;
mod run;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use fdsync_core::config::{Config, ConfigError};
use fdsync_core::sync::SyncError;

/// Mirror a financial disclosure data API into DuckDB, incrementally and within quota.
#[derive(Parser)]
#[command(
    name = "fdsync",
    version,
    about,
    long_about = None,
    help_template = "{about-with-newline}\n{before-help}\n{usage-heading} {usage}\n\n{all-args}{after-help}",
    before_help = START_HERE,
    after_help = "docs/operations.md explains every command; `fdsync <command> --help` shows one with an example."
)]
struct Cli {
    /// Configuration file (TOML). Without it: ./config/fdsync.toml, then
    /// ~/.config/fdsync/fdsync.toml, then /etc/fdsync/fdsync.toml, else the
    /// built-in default. Every key can be overridden as FDSYNC_<SECTION>__<KEY>.
    #[arg(long, global = true, env = "FDSYNC_CONFIG")]
    config: Option<PathBuf>,
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

/// What a newcomer runs, in order.
const START_HERE: &str = "Start here:
  fdsync demo            everything against the built-in emulator, into data/demo.duckdb
  fdsync check           with your key (FDSYNC_API_KEY): is the configuration ready to run?
  fdsync sync --once     sync what is due into the warehouse; run it from a timer or CronJob";

#[derive(Clone, Copy, ValueEnum)]
enum SchemaFormat {
    Markdown,
    Sql,
    Dbt,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// Parsed once per process: its size costs nothing.
#[allow(clippy::large_enum_variant)]
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
        /// Run this pipeline whether due or not (repeatable).
        #[arg(long = "pipeline", value_name = "NAME", conflicts_with = "all")]
        pipelines: Vec<String>,
        /// Run every enabled pipeline whether due or not. Without it (or
        /// --pipeline), only those due: never synced, their schedule fired
        /// since their last ok run, or work left from the last run (a quota
        /// wall, a budget, a backfill not finished). `fdsync status` says which.
        #[arg(long)]
        all: bool,
        /// Send at most N requests (retries included). When they are spent the run
        /// stops at a commit boundary, exits 0, and lists the pipelines it deferred;
        /// the next run resumes from the checkpoints, stalest companies first.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_requests: Option<u64>,
        /// Backfill back to this date (YYYY-MM-DD, UTC) in this run instead of
        /// the pipeline files' horizons (`backfill_days`, `since`): the tapes
        /// and the wire reach back to it. Nothing stored before it is deleted.
        #[arg(long, value_name = "DATE")]
        since: Option<chrono::NaiveDate>,
        /// After the run, write its Prometheus series here (for node
        /// exporter's textfile collector), replacing the file atomically;
        /// default [metrics] textfile.
        #[arg(long, value_name = "FILE")]
        metrics_file: Option<PathBuf>,
        /// Print one JSON document instead of the table: per pipeline its
        /// status, requests, rows, checkpoint, work left, next run; the quota
        /// left; the lake publish (docs/operations.md, "The run summary").
        #[arg(long)]
        json: bool,
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
    /// Read stored companies again whole and compare them with what the
    /// service serves now: per table, rows equal, changed, withdrawn, missing.
    ///
    /// Companies never verified go first, then the longest ago. What differs
    /// is repaired as a sync would (the old rows kept in <table>_versions) and
    /// recorded in _sync_verify; `fdsync status` shows the last result. The
    /// daemon spends [daemon] verify_requests (default 5) a day on it.
    ///
    /// Exit codes as `sync --once`: 0 compared (repairs included); 1 failed;
    /// 2 configuration or key; 75 the quota ran out.
    ///
    /// Example: FDSYNC_API_KEY=pk_live_... fdsync verify --budget 20 --pipeline prices
    Verify {
        /// Send at most N requests (retries included); default [daemon] verify_requests, else 5.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        budget: Option<u64>,
        /// Verify only this pipeline (repeatable); default every enabled one it can
        /// read whole (prices, dividends, monthly_revenue, regulation).
        #[arg(long = "pipeline", value_name = "NAME")]
        pipelines: Vec<String>,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Check that the configuration can run, one line per check.
    ///
    /// Checks the config, pipelines, API key, the service (one keyed
    /// request, GET /api/v1/events/latest?limit=1), the plan and quota its
    /// headers report, the warehouse writable, the lake reachable; says what
    /// to do about each failure.
    ///
    /// Exits 0 when nothing failed; 2 for the config, the key or the
    /// service's address; 75 when the quota is spent; 1 otherwise.
    ///
    /// Example: FDSYNC_API_KEY=pk_live_... fdsync check
    Check {
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Make a pipeline (or one company in it, or every pipeline writing a
    /// table) backfill again on its next run.
    ///
    /// Forgets its checkpoints and, with --drop-rows, deletes the rows it wrote
    /// first. Recorded in _sync_resets; the lake rebuilds the tables whose
    /// rows went on its next publish. Refused while another process (a
    /// daemon, a sync) holds the warehouse.
    ///
    /// Examples: fdsync reset prices --company MSFT --drop-rows
    ///           fdsync reset --table events_wire_counts --drop-rows
    Reset {
        /// The pipeline, by its name in the pipelines folder (with --table:
        /// only this one of the table's writers).
        #[arg(required_unless_present = "table")]
        pipeline: Option<String>,
        /// Only this table: --drop-rows deletes its rows alone; without a
        /// pipeline, every pipeline that writes it is reset.
        #[arg(long, value_name = "TABLE")]
        table: Option<String>,
        /// Only this company: its key, CIK or symbol.
        #[arg(long, value_name = "ID")]
        company: Option<String>,
        /// Delete the rows the pipeline wrote (of the company, with --company)
        /// as well; rows other pipelines wrote to shared tables stay.
        #[arg(long)]
        drop_rows: bool,
        /// Print JSON instead of lines.
        #[arg(long)]
        json: bool,
    },
    /// Describe the warehouse's tables and columns (Markdown, SQL, dbt).
    ///
    /// Markdown (docs/schema.md),
    /// the `COMMENT ON` statements every warehouse carries (`sql`), or a dbt
    /// sources.yml with key tests and freshness from the schedules (`dbt`).
    ///
    /// Example: fdsync schema --format dbt --out models/fdsync/sources.yml
    Schema {
        #[arg(long, value_enum, default_value_t = SchemaFormat::Markdown)]
        format: SchemaFormat,
        /// Write here instead of stdout.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
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
    /// Print the checkpoints: where each pipeline (and each company, country,
    /// series or tape in it) resumes, and when each last moved, as stored.
    /// Reads the warehouse without writing; works while the daemon runs.
    ///
    /// Example: fdsync state events_wire
    State {
        /// Only this pipeline's, by its name in the pipelines folder.
        pipeline: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Forecast the requests each pipeline spends a day and a month (steady
    /// state, and the backfill left) against the plan's quota, from the
    /// config, the pipelines and what the warehouse holds; sends no request.
    /// Exits 0 when it fits, 1 when it does not, with what would make it fit.
    ///
    /// Example: fdsync plan --plan free --timer-minutes 15
    Plan {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Hold it against this plan's published limits instead of the quota
        /// the service reported last (or upstream.plan).
        #[arg(long, value_parser = ["free", "build"])]
        plan: Option<String>,
        /// Forecast `sync --once` fired by a timer every N minutes (the
        /// CronJob, the systemd timer) instead of the daemon; default
        /// pipelines.timer_minutes, if set.
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        timer_minutes: Option<u32>,
    },
    /// The lake at [warehouse] parquet_dir: Delta Lake tables of Parquet files
    /// that Spark, Trino, DuckDB and BI tools read (see docs/lake.md).
    #[command(subcommand)]
    Lake(lake::LakeCommand),
    /// Start the emulator, sync everything into a fresh local DuckDB, and show example queries.
    ///
    /// Works from any folder: without a config file it uses the built-in one
    /// and pipelines; the warehouse goes under the current folder.
    Demo {
        /// Where the demo warehouse is written (replaced on every run).
        #[arg(long, default_value = "data/demo.duckdb")]
        warehouse: PathBuf,
    },
    /// Write the built-in configuration and pipelines out for editing:
    /// DIR/config/fdsync.toml and DIR/pipelines/*.toml, where a run from DIR
    /// finds them. Refuses to replace a file unless --force.
    ///
    /// Example: fdsync init ~/fdsync && cd ~/fdsync && fdsync check
    Init {
        /// The folder to write into (created if missing).
        #[arg(default_value = ".")]
        dir: PathBuf,
        /// Replace files that exist.
        #[arg(long)]
        force: bool,
    },
    /// Print a shell completion script.
    ///
    /// Example: fdsync completions bash > /etc/bash_completion.d/fdsync
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Write the man pages (fdsync.1 and one per command), or print fdsync.1.
    ///
    /// Example: fdsync man --out /usr/local/share/man/man1
    Man {
        /// The folder to write every page to; without it, fdsync.1 goes to stdout.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
    /// Serve the upstream API from local synthetic data (loopback by default).
    ///
    /// Built-in keys: pk_live_emulator_free_0001 (Free plan: 30/min, 250/day) and
    /// pk_live_emulator_build_0001 (Build: 300/min, 100,000/month).
    ///
    /// Example: fdsync emulator --addr 127.0.0.1:8080 --key pk_live_mine=scale:60:5000
    Emulator(emulator::EmulatorArgs),
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
    // FDSYNC_LOG, else the convention RUST_LOG, else the flags.
    let filter = tracing_subscriber::EnvFilter::try_from_env("FDSYNC_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new(format!(
                "info,buoyant_kernel=off,buoyant_kernel_engine=off,deltalake_core=warn,fdsync={level}"
            ))
        });
    fdsync_core::progress::init(matches!(cli.log_format, LogFormat::Text) && !cli.quiet);
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(fdsync_core::progress::LogWriter);
    match cli.log_format {
        LogFormat::Text => builder.init(),
        // One flat object a line: `message`, `level`, `target` and the
        // event's fields side by side, as log shippers index them.
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).init(),
    }
}

/// jemalloc serves every allocation of the process, DuckDB's included, and
/// returns what DuckDB frees at the pace the writer's loads set.
#[global_allocator]
static ALLOCATOR: fdsync_allocator::Jemalloc = fdsync_allocator::Jemalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    fdsync_core::sink::on_load(fdsync_allocator::note_load);
    init_logging(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match e.downcast_ref::<SyncError>() {
                Some(e) => eprintln!("error: {e}"),
                None => eprintln!("error: {}", fdsync_core::error::one_line(&e)),
            }
            ExitCode::from(exit_code(&e))
        }
    }
}

/// The operator contract's exit code for an error: what the library says
/// for its own, 2 for configuration, 1 for anything else.
fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(exit) = e.downcast_ref::<common::ExitWith>() {
        exit.code
    } else if let Some(SyncError::Interrupted) = e.downcast_ref::<SyncError>() {
        common::stopped_exit_code()
    } else if let Some(e) = e.downcast_ref::<SyncError>() {
        e.exit_code()
    } else if e.downcast_ref::<ConfigError>().is_some() {
        2
    } else {
        1
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    if matches!(cli.command, Command::Emulator(_) | Command::Lake(_)) {
        // Processes that serve or move data in bulk throughout; a sync's
        // writer sets its own pace from its loads.
        if let Err(e) = fdsync_allocator::set(fdsync_allocator::Purging::Background) {
            tracing::debug!(message = "Could not purge in the background.", error = %e);
        }
    }
    let config = || {
        let (config, source) = Config::locate(cli.config.as_deref()).map_err(SyncError::from)?;
        tracing::debug!(message = "Configuration read.", from = %source);
        Ok::<_, SyncError>(config)
    };
    match cli.command {
        Command::Sync {
            once: _,
            pipelines,
            all,
            max_requests,
            since,
            metrics_file,
            json,
        } => run::sync_once(config()?, pipelines, all, max_requests, since, metrics_file, json).await,
        Command::Daemon {
            pipelines,
            no_stream,
            metrics_addr,
        } => run::daemon(config()?, pipelines, no_stream, metrics_addr).await,
        Command::Stream { pipeline } => run::stream(config()?, pipeline).await,
        Command::Check { json } => run::check(cli.config.as_deref(), json).await,
        Command::Schema { format, out } => {
            let text = match format {
                SchemaFormat::Markdown => fdsync_commands::schema::markdown(),
                SchemaFormat::Sql => fdsync_commands::schema::comment_sql(),
                SchemaFormat::Dbt => {
                    let config = config()?;
                    let pipelines = common::load_pipelines(&config, Vec::new())?;
                    fdsync_commands::schema::dbt_sources(&pipelines, chrono::Utc::now())
                }
            };
            common::write_out(out.as_deref(), &text)
        }
        Command::Reset {
            pipeline,
            table,
            company,
            drop_rows,
            json,
        } => run::reset(config()?, pipeline, table, company, drop_rows, json).await,
        Command::Status { json } => run::status(&config()?, json),
        Command::State { pipeline, json } => run::state(&config()?, pipeline, json),
        Command::Verify {
            budget,
            pipelines,
            json,
        } => run::verify(config()?, pipelines, budget, json).await,
        Command::Plan {
            json,
            plan,
            timer_minutes,
        } => run::plan(&config()?, json, plan.as_deref(), timer_minutes),
        Command::Lake(command) => lake::run(&config()?, command).await,
        Command::Demo { warehouse } => {
            let (config, source) = Config::locate(cli.config.as_deref()).map_err(SyncError::from)?;
            println!(
                "config: {source}; pipelines: {} ({})",
                fdsync_core::pipeline::source_of(&config.pipelines.dir),
                config.pipelines.dir.display()
            );
            Ok(demo::run(config, &warehouse, &mut std::io::stdout()).await?)
        }
        Command::Init { dir, force } => init::run(&dir, force, &mut std::io::stdout()),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "fdsync", &mut std::io::stdout());
            Ok(())
        }
        Command::Man { out } => match out {
            Some(dir) => {
                std::fs::create_dir_all(&dir)?;
                Ok(clap_mangen::generate_to(Cli::command(), &dir)?)
            }
            None => Ok(clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout())?),
        },
        Command::Emulator(args) => emulator::run(args).await,
    }
}
