//! The commands that run pipelines: `sync --once`, `daemon`, `stream`; and
//! `status`, which reads what they recorded.

use std::sync::Arc;

use anyhow::Result;
use fdsync_core::config::Config;
use fdsync_core::sync::{RunSummary, SyncError};

use crate::common::{
    ExitWith, connect, load_pipelines, open_sink, print_json, shutdown_on_signal, stop_sending_on_signal,
    stopped_exit_code, syncer_clock,
};
use crate::lake::{open_lake, print_published};

pub async fn sync_once(
    config: Config,
    named: Vec<String>,
    all: bool,
    max_requests: Option<u64>,
    since: Option<chrono::NaiveDate>,
    metrics_file: Option<std::path::PathBuf>,
    json: bool,
) -> Result<()> {
    config.credential().map_err(SyncError::from)?;
    let forced = all || !named.is_empty();
    let chosen = load_pipelines(&config, named)?;
    let syncer = connect(config, "fdsync sync --once").await?;
    // `auto` schedules share the quota between every enabled pipeline.
    let enabled = load_pipelines(&syncer.config, Vec::new())?;
    let timer = syncer.config.pipelines.timer_minutes;
    let loaded: Vec<_> = syncer
        .schedules(&enabled, timer)
        .await?
        .into_iter()
        .filter(|p| chosen.iter().any(|c| c.name == p.name))
        .map(|mut p| {
            // The flag's date is the horizon of every pipeline that has one.
            if let Some(day) = since
                && p.feed.params.contains(&"since")
            {
                p.params.since = Some(day);
                p.params.backfill_days = None;
            }
            p
        })
        .collect();
    // Only what is due, unless forced: a timer that fires often then costs
    // what the schedules say.
    let (pipelines, skipped) = if forced {
        (loaded.clone(), Vec::new())
    } else {
        let due = syncer.due(&loaded).await?;
        let (run, skip): (Vec<_>, Vec<_>) = loaded.iter().cloned().zip(due).partition(|(_, due)| due.runs());
        for (p, due) in &run {
            tracing::info!(message = "Pipeline due.", pipeline = %p.name, why = %due);
        }
        (
            run.into_iter().map(|(p, _)| p).collect(),
            skip.into_iter()
                .map(|(p, due)| (p.name, due.to_string()))
                .collect::<Vec<_>>(),
        )
    };
    if let Some(n) = max_requests {
        syncer.client.limit_requests(n);
    }
    let lake = open_lake(&syncer.config)?;
    stop_sending_on_signal(&syncer.client);
    let started_at = syncer.clock.now();
    let (report, result) = syncer.run_once(&pipelines).await;
    // Whatever the run committed is published, even when it stopped early;
    // not when a signal stopped it: the process must end, the next publish resumes.
    let published = match &lake {
        Some(lake) if !syncer.client.is_stopped() => lake.publish(&syncer.sink).await.map(Some),
        _ => Ok(None),
    };
    let (published, mut publish_error) = match published {
        Ok(published) => (published, None),
        Err(e) => (None, Some(SyncError::from(e))),
    };
    // After the lake, so readers of the copy never see rows the lake lacks;
    // not when nothing was due, so a timer that fires often copies nothing.
    let copied = match &syncer.config.warehouse.reader_copy {
        Some(copy) if pipelines.is_empty() && copy.exists() => {
            Some((copy.clone(), fdsync_core::sink::reader_copy::Published::Unchanged))
        }
        Some(copy) if !syncer.client.is_stopped() => match syncer.sink.publish_reader_copy(copy.clone()).await {
            Ok(done) => Some((copy.clone(), done)),
            Err(e) => {
                publish_error.get_or_insert(SyncError::from(e));
                None
            }
        },
        _ => None,
    };
    let textfile = metrics_file.or_else(|| syncer.config.metrics.textfile.clone());
    // Nothing returns before the warehouse is closed: a reporting error
    // joins the run's result after it.
    let mut report_error = None;
    let summary = if json || textfile.is_some() || syncer.config.alerts.webhook.is_some() {
        let finished_at = syncer.clock.now();
        let status = match syncer.status(&loaded).await {
            Ok(status) => status,
            Err(e) => {
                syncer.sink.close().await;
                return Err(e.into());
            }
        };
        let drift = status.unknown_fields.len() as u64;
        let new_drift = fdsync_core::alerts::drift_since(&status, started_at);
        for p in &status.pipelines {
            if let Some(at) = p.last_ok_at {
                fdsync_core::metrics::last_success(&p.pipeline, at);
            }
        }
        let skipped: Vec<String> = skipped.iter().map(|(name, _)| name.clone()).collect();
        let quota = (&syncer.client.quota_seen()).into();
        let mut summary = RunSummary::new(&report, &result, status, quota, (started_at, finished_at), &skipped);
        if let Some(e) = &publish_error {
            summary.error.get_or_insert_with(|| e.to_string());
        }
        summary.lake = published.clone();
        if let Some(hook) = &syncer.config.alerts.webhook {
            let alerts = fdsync_core::alerts::of_run(&summary, &new_drift, finished_at);
            let credential = syncer.config.credential().ok();
            fdsync_core::alerts::fire(hook, &syncer.sink, alerts, credential.as_ref()).await;
        }
        if let Some(path) = &textfile {
            fdsync_core::metrics::drift_fields(drift);
            if let Err(e) = fdsync_core::metrics::write_textfile(path) {
                let e = SyncError::Other(format!("[metrics] textfile {}: cannot write it: {e}", path.display()));
                summary.error.get_or_insert_with(|| e.to_string());
                report_error = Some(e);
            }
        }
        json.then_some(summary)
    } else {
        None
    };
    syncer.sink.close().await;
    let result = result.and(publish_error.or(report_error).map_or(Ok(()), Err));
    if let Some(mut summary) = summary {
        summary.exit_code = match &result {
            Err(SyncError::Interrupted) => stopped_exit_code(),
            Err(e) => e.exit_code(),
            Ok(()) => 0,
        };
        print_json(&summary)?;
        return Ok(result?);
    }
    let mut stdout = std::io::stdout();
    report.write_text(&mut stdout)?;
    for (name, why) in &skipped {
        println!("  {name:<14} {:<16} {:>8} {:>12}  {why}", "skipped", 0, 0);
    }
    if let Some(published) = &published {
        print_published(&mut stdout, published)?;
    }
    if let Some((copy, done)) = &copied {
        print_reader_copy(&mut stdout, copy, done)?;
    }
    if let Some(kib) = fdsync_core::metrics::peak_memory_kib() {
        println!("peak memory: {:.1} MiB", kib as f64 / 1024.0);
    }
    Ok(result?)
}

/// `fdsync verify`: a sample of stored companies compared with the service,
/// within `budget` requests; the lake publishes what it repaired.
pub async fn verify(config: Config, named: Vec<String>, budget: Option<u64>, json: bool) -> Result<()> {
    config.credential().map_err(SyncError::from)?;
    let pipelines = load_pipelines(&config, named)?;
    let syncer = connect(config, "fdsync verify").await?;
    let budget = budget.unwrap_or(match syncer.config.daemon.verify_requests {
        0 => fdsync_core::config::DEFAULT_VERIFY_REQUESTS,
        n => n,
    });
    syncer.client.limit_requests(budget);
    let lake = open_lake(&syncer.config)?;
    stop_sending_on_signal(&syncer.client);
    let (report, result) = syncer.verify(&pipelines, budget).await;
    // A budget spent ends the sample, not the verification.
    let result = match result {
        Err(SyncError::BudgetSpent { .. }) => Ok(()),
        other => other,
    };
    let published = match &lake {
        Some(lake) if report.repaired() && !syncer.client.is_stopped() => Some(lake.publish(&syncer.sink).await),
        _ => None,
    };
    syncer.sink.close().await;
    if json {
        print_json(&report)?;
    } else {
        let mut stdout = std::io::stdout();
        report.write_text(&mut stdout)?;
        if let Some(Ok(published)) = &published {
            print_published(&mut stdout, published)?;
        }
    }
    if let Some(Err(e)) = published {
        return Err(SyncError::from(e).into());
    }
    Ok(result?)
}

fn print_reader_copy(
    out: &mut impl std::io::Write,
    copy: &std::path::Path,
    done: &fdsync_core::sink::reader_copy::Published,
) -> std::io::Result<()> {
    use fdsync_core::sink::reader_copy::Published;
    match done {
        Published::Replaced(bytes) => writeln!(
            out,
            "reader copy: {} replaced ({:.1} MiB)",
            copy.display(),
            *bytes as f64 / (1024.0 * 1024.0)
        ),
        Published::Unchanged => writeln!(out, "reader copy: {} unchanged", copy.display()),
    }
}

pub async fn daemon(
    mut config: Config,
    pipelines: Vec<String>,
    no_stream: bool,
    metrics_addr: Option<String>,
) -> Result<()> {
    config.credential().map_err(SyncError::from)?;
    if let Some(addr) = metrics_addr {
        config.daemon.metrics_addr = addr;
    }
    let metrics_addr = config
        .daemon
        .metrics_socket()
        .map_err(|e| anyhow::anyhow!("--metrics-addr: {e}"))?;
    let pipelines = load_pipelines(&config, pipelines)?;
    let lake = open_lake(&config)?.map(Arc::new);
    let syncer = connect(config.clone(), "fdsync daemon").await?;
    let daemon = fdsync_core::daemon::Daemon {
        syncer: Arc::new(syncer),
        pipelines,
        stream: if no_stream {
            fdsync_core::config::StreamMode::Off
        } else {
            config.daemon.stream
        },
        metrics_addr,
        stale_after: (config.daemon.stale_after_secs > 0)
            .then(|| std::time::Duration::from_secs(config.daemon.stale_after_secs)),
        lake,
    };
    Ok(daemon.run(shutdown_on_signal()).await?)
}

pub async fn stream(config: Config, pipeline: String) -> Result<()> {
    config.credential().map_err(SyncError::from)?;
    let pipelines = load_pipelines(&config, vec![pipeline])?;
    let lake = open_lake(&config)?;
    let syncer = connect(config, "fdsync stream").await?;
    let shutdown = shutdown_on_signal();
    // The lake is published on an interval while frames commit, and once
    // after the stream stops with what it left.
    let streamed = tokio_util::sync::CancellationToken::new();
    let streaming = async {
        let result = syncer.run_stream(&pipelines[0], &shutdown, false).await;
        streamed.cancel();
        result
    };
    let publishing = async {
        if let Some(lake) = &lake {
            let turn = tokio::sync::Mutex::new(());
            let _ = fdsync_core::daemon::publish_while_streaming(&syncer, lake, &turn, &streamed).await;
        }
    };
    let (result, ()) = tokio::join!(streaming, publishing);
    syncer.sink.close().await;
    let report = result?;
    println!(
        "stream stopped: {} connections, {} frames, {} new items, {} rewritten headlines",
        report.connections, report.frames, report.new_items, report.rewrites
    );
    Ok(())
}

pub async fn check(config: Option<&std::path::Path>, json: bool) -> Result<()> {
    let report = fdsync_commands::check::run(config).await;
    if json {
        print_json(&report)?;
    } else {
        fdsync_commands::check::write_text(&mut std::io::stdout(), &report)?;
    }
    match report.exit_code {
        0 => Ok(()),
        code => Err(ExitWith {
            code,
            message: format!(
                "{} of the checks failed",
                report
                    .checks
                    .iter()
                    .filter(|c| c.outcome == fdsync_commands::check::Outcome::Fail)
                    .count()
            ),
        }
        .into()),
    }
}

pub async fn reset(
    config: Config,
    pipeline: Option<String>,
    table: Option<String>,
    company: Option<String>,
    drop_rows: bool,
    json: bool,
) -> Result<()> {
    let table = match table.as_deref() {
        Some(name) => Some(fdsync_core::feeds::table(name).filter(|t| !t.name.starts_with('_')).ok_or_else(|| {
            usage(format!(
                "--table {name}: no such data table; `fdsync schema` lists them (bookkeeping tables are not reset)"
            ))
        })?),
        None => None,
    };
    let pipelines = match (pipeline, table) {
        (Some(name), table) => {
            let pipelines = load_pipelines(&config, vec![name])?;
            if let Some(t) = table
                && !pipelines[0].feed.tables.iter().any(|w| w.name == t.name)
            {
                return Err(usage(format!(
                    "--table {}: the pipeline {} does not write it; leave out the pipeline to reset every one that does",
                    t.name, pipelines[0].name
                ))
                .into());
            }
            pipelines
        }
        (None, Some(t)) => {
            let writers: Vec<_> = fdsync_core::pipeline::load_dir(&config.pipelines.dir, None)
                .map_err(SyncError::from)?
                .into_iter()
                .filter(|p| p.feed.tables.iter().any(|w| w.name == t.name))
                .collect();
            if writers.is_empty() {
                return Err(usage(format!(
                    "--table {}: no pipeline in {} writes it",
                    t.name,
                    config.pipelines.dir.display()
                ))
                .into());
            }
            writers
        }
        (None, None) => return Err(usage("name a pipeline, or a table with --table".into()).into()),
    };
    let now = syncer_clock()?.now();
    let sink = open_sink(&config, "fdsync reset").await?;
    let mut reports = Vec::new();
    for p in &pipelines {
        let done = fdsync_commands::reset::reset(&sink, p, company.as_deref(), table, drop_rows, now).await;
        match done {
            Ok(done) => reports.push(done),
            Err(e) => {
                sink.close().await;
                return Err(e.into());
            }
        }
    }
    sink.close().await;
    if json {
        return match reports.as_slice() {
            [one] => print_json(one),
            all => print_json(&all),
        };
    }
    for done in &reports {
        print_reset(done);
    }
    println!("the next `fdsync sync --once` backfills it again; a lake rebuilds the tables above on its next publish");
    Ok(())
}

/// A flag that names nothing: exit 2, as for any usage error.
fn usage(message: String) -> crate::common::ExitWith {
    crate::common::ExitWith { code: 2, message }
}

fn print_reset(done: &fdsync_commands::reset::ResetReport) {
    let whom = done
        .company_key
        .as_deref()
        .map(|k| format!(" for {k}"))
        .unwrap_or_default();
    println!(
        "{}{whom}: {} checkpoints forgotten",
        done.pipeline, done.checkpoints_removed
    );
    for (table, rows) in &done.rows_deleted {
        println!("  {table:<26} {rows:>9} rows deleted");
    }
    for table in &done.kept {
        println!("  {table:<26} kept (no company column)");
    }
}

pub fn state(config: &Config, pipeline: Option<String>, json: bool) -> Result<()> {
    if let Some(name) = &pipeline {
        // A name the pipelines folder does not hold is a typo, not "no checkpoints".
        load_pipelines(config, vec![name.clone()])?;
    }
    let states = fdsync_commands::state::read(&config.warehouse.duckdb, pipeline.as_deref())?;
    if json {
        return print_json(&states);
    }
    fdsync_commands::state::write_text(&mut std::io::stdout(), &states)?;
    Ok(())
}

pub fn status(config: &Config, json: bool) -> Result<()> {
    let pipelines = load_pipelines(config, Vec::new())?;
    let now = chrono::Utc::now();
    let pipelines = derived_schedules(config, &pipelines, config.pipelines.timer_minutes, now)?;
    let status = fdsync_commands::status::read(&config.warehouse.duckdb, &pipelines, now)?;
    if json {
        return print_json(&status);
    }
    fdsync_commands::status::write_text(&mut std::io::stdout(), &status)?;
    Ok(())
}

/// `pipelines` with their `auto` schedules derived from what the warehouse
/// holds, read beside a writer that may hold it.
fn derived_schedules(
    config: &Config,
    pipelines: &[fdsync_core::pipeline::Pipeline],
    timer_minutes: Option<u32>,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<Vec<fdsync_core::pipeline::Pipeline>> {
    let path = &config.warehouse.duckdb;
    let reader = if path.exists() && pipelines.iter().any(|p| p.auto) {
        let writer = fdsync_core::sink::lock::WriterLock::holder_of(path);
        Some(
            fdsync_core::sink::duckdb::reader::BookkeepingReader::open(path, writer.as_ref())
                .map_err(SyncError::from)?,
        )
    } else {
        None
    };
    Ok(fdsync_commands::plan::derive_schedules(
        config,
        pipelines,
        reader.as_ref(),
        timer_minutes,
        now,
    )?)
}

pub fn plan(config: &Config, json: bool, plan: Option<&str>, timer_minutes: Option<u32>) -> Result<()> {
    use fdsync_core::config::Plan;
    let pipelines = load_pipelines(config, Vec::new())?;
    let limit = plan.map(|p| fdsync_commands::plan::Limit::of(if p == "free" { Plan::Free } else { Plan::Build }));
    let path = &config.warehouse.duckdb;
    let reader = if path.exists() {
        let writer = fdsync_core::sink::lock::WriterLock::holder_of(path);
        Some(
            fdsync_core::sink::duckdb::reader::BookkeepingReader::open(path, writer.as_ref())
                .map_err(SyncError::from)?,
        )
    } else {
        None
    };
    let forecast = fdsync_commands::plan::forecast(
        config,
        &pipelines,
        reader.as_ref(),
        limit,
        timer_minutes.or(config.pipelines.timer_minutes),
        chrono::Utc::now(),
    )?;
    if json {
        print_json(&forecast)?;
    } else {
        fdsync_commands::plan::write_text(&mut std::io::stdout(), &forecast)?;
    }
    match forecast.fits {
        Some(false) => Err(anyhow::anyhow!(
            "the forecast does not fit the plan's quota: {:.0} requests a day",
            forecast.per_day
        )),
        _ => Ok(()),
    }
}
