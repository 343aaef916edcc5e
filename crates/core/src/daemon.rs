//! `fdsync daemon`: every pipeline on its cron schedule, the live news stream
//! kept connected, Prometheus metrics, and a clean stop on SIGTERM or SIGINT.
//!
//! Pipelines run one at a time, so each run's request count is its own and
//! the quota is spent in a predictable order; when several are due they
//! queue. A pipeline is due when its schedule fired since its last start, so
//! a daemon started after downtime catches up once, not once per missed
//! firing. Stopping sends no further request and abandons those in flight;
//! what was received commits (a held backfill transaction included) and the
//! run is recorded `interrupted`, so the next run resumes from there.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::pipeline::Pipeline;
use crate::sync::{SyncError, Syncer};

pub struct Daemon {
    pub syncer: Arc<Syncer>,
    pub pipelines: Vec<Pipeline>,
    /// Keep the live stream of every pipeline that has one connected: on,
    /// off, or `auto` (when the quota carries it, `fdsync plan` says which).
    pub stream: crate::config::StreamMode,
    pub metrics_addr: Option<SocketAddr>,
    /// `/healthz` is unhealthy after this long without a commit (`None`: never).
    pub stale_after: Option<std::time::Duration>,
    /// Published after every run, and while the stream commits between runs
    /// ([`publish_while_streaming`]).
    pub lake: Option<Arc<crate::lake::Lake>>,
}

impl Daemon {
    /// Runs until `shutdown` is cancelled, then lets the writer finish what
    /// it was handed and closes the warehouse.
    ///
    /// # Errors
    /// A refused key (every request would fail), a metrics address that
    /// cannot be bound, or a warehouse that cannot be read.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), SyncError> {
        let health = Health {
            sink: self.syncer.sink.clone(),
            started: std::time::Instant::now(),
            stale_after: self.stale_after,
        };
        let metrics = match self.metrics_addr {
            Some(addr) => Some(serve_metrics(addr, health, shutdown.clone()).await?),
            None => None,
        };
        if let Some(addr) = metrics {
            tracing::info!(message = "Metrics served.", url = %format!("http://{addr}/metrics"));
        }
        let last_started = self.last_started().await?;
        let client = self.syncer.client.clone();
        let stopping = shutdown.clone();
        tokio::spawn(async move {
            stopping.cancelled().await;
            client.stop_sending();
        });
        let turn = Arc::new(tokio::sync::Mutex::new(()));
        let (ran, runs) = tokio::sync::watch::channel(0u64);
        let every = Arc::new(self.pipelines.clone());
        let mut tasks = JoinSet::new();
        for pipeline in self.pipelines.iter().cloned() {
            let last = last_started.get(&pipeline.name).copied();
            tasks.spawn(schedule(
                self.syncer.clone(),
                (pipeline, every.clone()),
                last,
                (turn.clone(), self.lake.clone(), ran.clone()),
                shutdown.clone(),
            ));
        }
        if self.stream != crate::config::StreamMode::Off {
            for pipeline in self
                .pipelines
                .iter()
                .filter(|p| p.params.stream_route.is_some())
                .cloned()
            {
                let (syncer, every, mut runs) = (self.syncer.clone(), every.clone(), runs.clone());
                let (shutdown, mode) = (shutdown.clone(), self.stream);
                let (lake, turn) = (self.lake.clone(), turn.clone());
                tasks.spawn(async move {
                    if mode == crate::config::StreamMode::Auto
                        && !stream_carried(&syncer, &every, &pipeline, &mut runs, &shutdown).await?
                    {
                        return Ok(());
                    }
                    crate::metrics::stream_planned(
                        &pipeline.name,
                        86_400.0 / crate::planner::cost::STREAM_CONNECTION_SECS,
                    );
                    tracing::info!(message = "Live stream started.", pipeline = %pipeline.name);
                    // The publisher stops when the stream does, publishing what it left.
                    let streamed = CancellationToken::new();
                    let streaming = async {
                        let result = syncer.run_stream(&pipeline, &shutdown, false).await;
                        streamed.cancel();
                        result
                    };
                    let publishing = async {
                        match &lake {
                            Some(lake) => publish_while_streaming(&syncer, lake, &turn, &streamed).await,
                            None => Ok(()),
                        }
                    };
                    let (result, _) = tokio::join!(streaming, publishing);
                    match result {
                        Ok(_) => Ok(()),
                        // What stops every run stops the daemon too.
                        Err(e @ (SyncError::Sink(_) | SyncError::Unauthenticated(_) | SyncError::Misdirected(_))) => {
                            Err(e)
                        }
                        // The stream only speeds the poll up: without it, the
                        // pipelines go on polling on their schedules.
                        Err(e) => {
                            crate::metrics::stream_connection("stopped");
                            tracing::error!(
                                message = "The live stream stopped; the pipelines go on polling on their schedules.",
                                pipeline = %pipeline.name,
                                error = %e
                            );
                            Ok(())
                        }
                    }
                });
            }
        }
        if self.syncer.config.daemon.verify_requests > 0 {
            tasks.spawn(verify_daily(
                self.syncer.clone(),
                every.clone(),
                turn.clone(),
                shutdown.clone(),
            ));
        }
        // A writer that died would fail every run: the process stops, and
        // systemd or Kubernetes starts a new one.
        let sink = self.syncer.sink.clone();
        let watched = shutdown.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(WRITER_CHECK);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    () = watched.cancelled() => return Ok(()),
                }
                if !sink.writer_alive() {
                    return Err(SyncError::Sink(crate::sink::SinkError::Closed));
                }
            }
        });
        // Under systemd (Type=notify, WatchdogSec=): ready once every task
        // runs, and alive while the writer is; a dead writer stops the pings
        // and the service manager restarts the daemon.
        let watchdog = systemd_watchdog();
        if let Some(every) = watchdog {
            let (sink, watched) = (self.syncer.sink.clone(), shutdown.clone());
            tasks.spawn(async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tokio::select! {
                        _ = tick.tick() => {}
                        () = watched.cancelled() => return Ok(()),
                    }
                    if sink.writer_alive() {
                        notify_systemd(&[sd_notify::NotifyState::Watchdog]);
                    }
                }
            });
        }
        notify_systemd(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status("syncing on schedule"),
        ]);
        tracing::info!(
            message = "Daemon started.",
            pipelines = self.pipelines.len(),
            stream = ?self.stream,
            watchdog_secs = watchdog.map(|w| w.as_secs_f64())
        );
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            let result = joined.unwrap_or_else(|e| Err(SyncError::Other(format!("a daemon task stopped: {e}"))));
            if let Err(e) = result {
                tracing::error!(message = "Daemon stopping.", error = %e);
                failure.get_or_insert(e);
                shutdown.cancel();
            }
            if shutdown.is_cancelled() {
                notify_systemd(&[sd_notify::NotifyState::Stopping]);
            }
        }
        notify_systemd(&[sd_notify::NotifyState::Stopping]);
        self.syncer.sink.close().await;
        tracing::info!(message = "Daemon stopped; every commit is complete.");
        failure.map_or(Ok(()), Err)
    }

    /// The daemon's schedule run one firing at a time, in the order the
    /// firings fall, until the clock passes `until`: on a simulated clock, a
    /// week of the daemon in seconds, the same pipelines due at the same
    /// times as [`Daemon::run`] (which waits for each on its own task). No
    /// stream, metrics or lake. Returns how many runs it made.
    ///
    /// # Errors
    /// A warehouse that cannot be read, or a run stopped by a refused key.
    pub async fn run_until(&self, until: DateTime<Utc>) -> Result<u64, SyncError> {
        let mut last_started = self.last_started().await?;
        let clock = self.syncer.clock.clone();
        let mut verified = last_verified_day(&self.syncer).await?;
        let mut runs = 0;
        let mut derived: Option<(DateTime<Utc>, Vec<Pipeline>)> = None;
        loop {
            let now = clock.now();
            // `auto` intervals derived again each hour, as the daemon's tasks
            // derive them again before each wait.
            if derived
                .as_ref()
                .is_none_or(|(at, _)| now - *at >= chrono::Duration::hours(1))
            {
                derived = Some((now, self.syncer.schedules(&self.pipelines, None).await?));
            }
            let pipelines = derived.as_ref().map(|(_, p)| p.clone()).unwrap_or_default();
            // Ties go to the order of `pipelines`, as the daemon's turn lock queues them.
            let next = pipelines
                .iter()
                .filter_map(|p| Some((due_at(&p.schedule, last_started.get(&p.name).copied(), now)?, p)))
                .min_by_key(|(due, _)| *due);
            // The day's verification, when it falls before the next firing.
            let verify_at = verify_due(&self.syncer, verified, now);
            if let Some(at) = verify_at.filter(|at| *at <= until && next.is_none_or(|(due, _)| *at <= due)) {
                clock.sleep_until(at).await;
                verified = Some(clock.now().date_naive());
                if let Err(e @ (SyncError::Unauthenticated(_) | SyncError::Misdirected(_))) =
                    verify_share(&self.syncer, &self.pipelines).await
                {
                    return Err(e);
                }
                continue;
            }
            let Some((due, pipeline)) = next.filter(|(due, _)| *due <= until) else {
                return Ok(runs);
            };
            clock.sleep_until(due).await;
            last_started.insert(pipeline.name.clone(), clock.now());
            let (_, result) = self.syncer.run_once(std::slice::from_ref(pipeline)).await;
            runs += 1;
            match result {
                Err(e @ (SyncError::Unauthenticated(_) | SyncError::Misdirected(_))) => return Err(e),
                Err(e) => {
                    tracing::warn!(message = "Pipeline run did not finish.", pipeline = %pipeline.name, error = %e)
                }
                Ok(()) => {}
            }
        }
    }

    /// When each pipeline last started, from the run log.
    async fn last_started(&self) -> Result<HashMap<String, DateTime<Utc>>, SyncError> {
        Ok(self.syncer.sink.call(|s| s.bookkeeping()?.last_started()).await??)
    }
}

/// Waits until `due`, then for the turn (one run at a time); `None` when
/// the daemon stops first.
async fn turn_at<'a>(
    clock: &crate::clock::Clock,
    due: DateTime<Utc>,
    turn: &'a tokio::sync::Mutex<()>,
    shutdown: &CancellationToken,
) -> Option<tokio::sync::MutexGuard<'a, ()>> {
    tokio::select! {
        () = clock.sleep_until(due) => {}
        () = shutdown.cancelled() => return None,
    }
    tokio::select! {
        held = turn.lock() => Some(held),
        () = shutdown.cancelled() => None,
    }
}

/// The day (UTC) of the last verification, from `_sync_verify`.
async fn last_verified_day(syncer: &Syncer) -> Result<Option<chrono::NaiveDate>, SyncError> {
    let last = syncer.sink.call(|s| s.last_verification()).await??;
    Ok(last.map(|at| at.date_naive()))
}

/// When the daemon's next verification is due: now, when none ran today
/// (UTC); else at the next day's start. `None` when it spends nothing.
fn verify_due(syncer: &Syncer, verified: Option<chrono::NaiveDate>, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if syncer.config.daemon.verify_requests == 0 {
        return None;
    }
    let today = now.date_naive();
    match verified {
        Some(day) if day >= today => today
            .succ_opt()
            .map(|next| next.and_time(chrono::NaiveTime::MIN).and_utc()),
        _ => Some(now),
    }
}

/// Spends the day's share on verification, and logs what it found.
async fn verify_share(syncer: &Syncer, pipelines: &[Pipeline]) -> Result<(), SyncError> {
    let (report, result) = syncer.verify(pipelines, syncer.config.daemon.verify_requests).await;
    let totals: Vec<String> = report
        .totals()
        .iter()
        .map(|t| {
            format!(
                "{}: {} equal, {} changed, {} withdrawn, {} missing",
                t.table, t.equal, t.changed, t.withdrawn, t.missing
            )
        })
        .collect();
    match &result {
        Ok(()) => tracing::info!(
            message = "Verified stored companies against the service.",
            run_id = %report.run_id,
            requests = report.requests,
            companies = report.verified.len(),
            tables = %totals.join("; "),
            problems = %report.problems.join("; ")
        ),
        Err(e) => tracing::warn!(message = "Verification did not finish.", run_id = %report.run_id, error = %e),
    }
    result
}

/// The daemon's share of verification: `[daemon] verify_requests` once a
/// UTC day, in its turn between the pipelines' runs.
async fn verify_daily(
    syncer: Arc<Syncer>,
    every: Arc<Vec<Pipeline>>,
    turn: Arc<tokio::sync::Mutex<()>>,
    shutdown: CancellationToken,
) -> Result<(), SyncError> {
    let clock = syncer.clock.clone();
    let mut verified = last_verified_day(&syncer).await?;
    loop {
        let Some(due) = verify_due(&syncer, verified, clock.now()) else {
            return Ok(());
        };
        let Some(_turn) = turn_at(&clock, due, &turn, &shutdown).await else {
            return Ok(());
        };
        verified = Some(clock.now().date_naive());
        match verify_share(&syncer, &every).await {
            Ok(()) | Err(SyncError::Interrupted) if shutdown.is_cancelled() => return Ok(()),
            Err(e @ (SyncError::Unauthenticated(_) | SyncError::Misdirected(_) | SyncError::Sink(_))) => return Err(e),
            _ => {}
        }
    }
}

/// Whether the `auto` stream of `pipeline` connects: held against the
/// quota once it is known (the ledger's, or the headers of the daemon's
/// first run), beside what the schedules of `every` pipeline plan to spend.
async fn stream_carried(
    syncer: &Syncer,
    every: &[Pipeline],
    pipeline: &Pipeline,
    runs: &mut tokio::sync::watch::Receiver<u64>,
    shutdown: &CancellationToken,
) -> Result<bool, SyncError> {
    loop {
        let planned = syncer.stream_plan(every).await?;
        let Some(planned) = planned else { return Ok(true) };
        if planned.quota_known || *runs.borrow() > 0 {
            crate::metrics::stream_planned(&pipeline.name, if planned.connected { planned.per_day } else { 0.0 });
            if !planned.connected {
                tracing::warn!(
                    message = "Live stream not connected: the quota cannot carry it; the feed polls on its schedule (fdsync plan).",
                    pipeline = %pipeline.name,
                    reason = %planned.reason
                );
            }
            return Ok(planned.connected);
        }
        tokio::select! {
            changed = runs.changed() => if changed.is_err() { return Ok(false) },
            () = shutdown.cancelled() => return Ok(false),
        }
    }
}

/// Publishes the lake while the live stream commits between scheduled runs
/// (which publish after each run): after a commit once
/// `[daemon] stream_publish_secs` have passed since the last publish, by
/// the syncer's clock, and once more at the stop if anything was committed
/// since. It wakes on commits, never on a timer, so it moves no simulated
/// clock. It takes `turn`, so a publish never overlaps a scheduled run.
///
/// # Errors
/// None: a publish that fails is logged, and the next one resumes it.
pub async fn publish_while_streaming(
    syncer: &Syncer,
    lake: &crate::lake::Lake,
    turn: &tokio::sync::Mutex<()>,
    stop: &CancellationToken,
) -> Result<(), SyncError> {
    let every = chrono::Duration::seconds(i64::try_from(syncer.config.daemon.stream_publish_secs).unwrap_or(i64::MAX));
    let mut commits = syncer.sink.commits();
    // The last commit a publish has read: what was committed before this
    // started is published by the run that committed it.
    let mut published = *commits.borrow_and_update();
    let mut published_at = syncer.clock.now();
    let publish = || async {
        let _turn = turn.lock().await;
        if let Err(e) = lake.publish(&syncer.sink).await {
            tracing::warn!(message = "Lake publish did not finish; the next publish resumes.", error = %e);
        }
    };
    loop {
        tokio::select! {
            changed = commits.changed() => if changed.is_err() { break },
            () = stop.cancelled() => break,
        }
        if syncer.clock.now() - published_at >= every {
            let through = *commits.borrow_and_update();
            publish().await;
            (published, published_at) = (through, syncer.clock.now());
        }
    }
    // Whatever committed since, a commit during the last publish included.
    if *commits.borrow() != published {
        publish().await;
    }
    Ok(())
}

/// One pipeline's loop: wait for its next firing, wait for its turn, run,
/// publish the lake. An `auto` schedule is derived again before each wait,
/// from the quota and the run log as they are then.
async fn schedule(
    syncer: Arc<Syncer>,
    (mut pipeline, every): (Pipeline, Arc<Vec<Pipeline>>),
    mut last_started: Option<DateTime<Utc>>,
    (turn, lake, ran): (
        Arc<tokio::sync::Mutex<()>>,
        Option<Arc<crate::lake::Lake>>,
        tokio::sync::watch::Sender<u64>,
    ),
    shutdown: CancellationToken,
) -> Result<(), SyncError> {
    let clock = syncer.clock.clone();
    loop {
        if pipeline.auto {
            match syncer.schedules(&every, None).await {
                Ok(derived) => {
                    if let Some(p) = derived.into_iter().find(|p| p.name == pipeline.name) {
                        pipeline = p;
                    }
                }
                Err(e) => {
                    tracing::warn!(message = "Auto schedule not derived again; the last one stays.", pipeline = %pipeline.name, error = %e)
                }
            }
        }
        let due = due_at(&pipeline.schedule, last_started, clock.now());
        let Some(due) = due else {
            tracing::info!(message = "Schedule never fires again.", pipeline = %pipeline.name);
            return Ok(());
        };
        tracing::debug!(message = "Pipeline scheduled.", pipeline = %pipeline.name, %due);
        let Some(_turn) = turn_at(&clock, due, &turn, &shutdown).await else {
            return Ok(());
        };
        let started_at = clock.now();
        last_started = Some(started_at);
        // Not raced against the shutdown: the stopped client ends the run
        // within moments, and what it received still commits.
        let (report, result) = syncer.run_once(std::slice::from_ref(&pipeline)).await;
        let ends_daemon = matches!(
            result,
            Err(SyncError::Interrupted
                | SyncError::Unauthenticated(_)
                | SyncError::Misdirected(_)
                | SyncError::Sink(crate::sink::SinkError::Closed))
        );
        let mut published = None;
        if let (Some(lake), false) = (&lake, ends_daemon) {
            // A publish cut short by shutdown commits nothing half; the next resumes.
            tokio::select! {
                outcome = lake.publish(&syncer.sink) => match outcome {
                    Ok(report) => published = Some(report),
                    Err(e) => tracing::warn!(message = "Lake publish did not finish; the next run's publish resumes.", error = %e),
                },
                () = shutdown.cancelled() => {}
            }
        }
        if let (Some(copy), false) = (&syncer.config.warehouse.reader_copy, ends_daemon) {
            match syncer.sink.publish_reader_copy(copy.clone()).await {
                Ok(done) => tracing::info!(message = "Reader copy published.", path = %copy.display(), outcome = ?done),
                Err(e) => {
                    tracing::warn!(message = "Reader copy not replaced; readers keep the previous one.", error = %e)
                }
            }
        }
        write_summary(&syncer, &pipeline, (&report, &result), started_at, published).await;
        ran.send_modify(|n| *n += 1);
        match result {
            Ok(()) => {}
            Err(SyncError::Interrupted) => {
                tracing::info!(
                    message = "Run interrupted at shutdown; what it received is committed and the next run resumes.",
                    pipeline = %pipeline.name
                );
                return Ok(());
            }
            // Every request would be refused, or every commit: stop, so the
            // operator (or the supervisor's restart) sees it.
            Err(e) if ends_daemon => return Err(e),
            // Logged and recorded by the run; the next firing tries again.
            Err(e) => tracing::warn!(message = "Pipeline run did not finish.", pipeline = %pipeline.name, error = %e),
        }
    }
}

/// Writes the run's summary as one JSON line on stdout, the line a log
/// shipper or an alert reads (docs/operations.md, "The run summary").
async fn write_summary(
    syncer: &Syncer,
    pipeline: &Pipeline,
    (report, result): (&crate::sync::SyncReport, &Result<(), SyncError>),
    started_at: DateTime<Utc>,
    published: Option<crate::lake::PublishReport>,
) {
    let status = match syncer.status(std::slice::from_ref(pipeline)).await {
        Ok(status) => status,
        Err(e) => {
            tracing::warn!(message = "No run summary: the run log cannot be read.", pipeline = %pipeline.name, error = %e);
            return;
        }
    };
    let new_drift = crate::alerts::drift_since(&status, started_at);
    crate::metrics::drift_fields(status.unknown_fields.len() as u64);
    let quota = (&syncer.client.quota_seen()).into();
    let times = (started_at, syncer.clock.now());
    let mut summary = crate::sync::RunSummary::new(report, result, status, quota, times, &[]);
    summary.lake = published;
    if let Some(hook) = &syncer.config.alerts.webhook {
        let alerts = crate::alerts::of_run(&summary, &new_drift, times.1);
        let credential = syncer.config.credential().ok();
        crate::alerts::fire(hook, &syncer.sink, alerts, credential.as_ref()).await;
    }
    match serde_json::to_string(&summary) {
        Ok(line) => {
            use std::io::Write;
            // A closed stdout loses the summary, not the daemon.
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
        Err(e) => tracing::warn!(message = "No run summary.", error = %e),
    }
}

/// Tells the service manager `states` when it listens (`NOTIFY_SOCKET`);
/// anywhere else, nothing.
fn notify_systemd(states: &[sd_notify::NotifyState<'_>]) {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return;
    }
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::warn!(message = "The service manager was not told.", error = %e);
    }
}

/// How often to ping the service manager's watchdog: at half its timeout
/// (`WATCHDOG_USEC`), as sd_watchdog_enabled(3) advises; `None` when it
/// asked for none, or for another process (`WATCHDOG_PID`). Read here, not
/// by `sd_notify::watchdog_enabled`, which wants `WATCHDOG_PID` set where
/// sd_watchdog_enabled(3) takes it as optional.
fn systemd_watchdog() -> Option<std::time::Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.trim().parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID")
        && pid.trim().parse::<u32>().ok() != Some(std::process::id())
    {
        return None;
    }
    (usec > 0).then(|| std::time::Duration::from_micros(usec / 2))
}

/// When a pipeline runs next: the schedule's first firing after its last
/// start (in the past when firings were missed: then at once, and only
/// once), or now if it never ran. `None` when the schedule never fires again.
fn due_at(
    schedule: &crate::pipeline::Schedule,
    last_started: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    match last_started {
        Some(last) => schedule.next_after(&last),
        None => Some(now),
    }
}

/// How often the daemon checks that its warehouse writer still runs.
const WRITER_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// What `/healthz` looks at.
#[derive(Clone)]
struct Health {
    sink: crate::sink::SinkHandle,
    started: std::time::Instant,
    stale_after: Option<std::time::Duration>,
}

impl Health {
    /// `Err` with the reason when unhealthy.
    fn check(&self) -> Result<(), String> {
        if !self.sink.writer_alive() {
            return Err("the warehouse writer stopped; the daemon is exiting".into());
        }
        let quiet = self.sink.since_last_commit().unwrap_or_else(|| self.started.elapsed());
        match self.stale_after {
            Some(limit) if quiet > limit => Err(format!(
                "no commit for {} s (daemon.stale_after_secs = {})",
                quiet.as_secs(),
                limit.as_secs()
            )),
            _ => Ok(()),
        }
    }
}

async fn serve_metrics(addr: SocketAddr, health: Health, shutdown: CancellationToken) -> Result<SocketAddr, SyncError> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    crate::metrics::render(),
                )
            }),
        )
        .route(
            "/healthz",
            get(move || {
                let health = health.clone();
                async move {
                    match health.check() {
                        Ok(()) => (axum::http::StatusCode::OK, "ok\n".to_owned()),
                        Err(why) => (
                            axum::http::StatusCode::SERVICE_UNAVAILABLE,
                            format!("unhealthy: {why}\n"),
                        ),
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        SyncError::Other(format!(
            "daemon.metrics_addr {addr}: cannot listen: {e} (set another address, or \"off\")"
        ))
    })?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    Ok(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_is_unhealthy_once_the_writer_died_or_nothing_committed_for_too_long() {
        let dir = tempfile::tempdir().unwrap();
        let sink = crate::sink::SinkHandle::open_duckdb(dir.path().join("wh.duckdb"))
            .await
            .unwrap();
        let health = Health {
            sink: sink.clone(),
            started: std::time::Instant::now(),
            stale_after: Some(std::time::Duration::from_secs(3600)),
        };
        assert_eq!(health.check(), Ok(()));
        let stale = Health {
            stale_after: Some(std::time::Duration::ZERO),
            ..health.clone()
        };
        assert!(
            stale.check().unwrap_err().contains("no commit for"),
            "{:?}",
            stale.check()
        );
        let _ = sink
            .call(|_| -> () { panic!("the test kills the warehouse writer") })
            .await;
        // The call fails while the thread still unwinds.
        while sink.writer_alive() {
            tokio::task::yield_now().await;
        }
        assert!(health.check().unwrap_err().contains("writer stopped"));
    }

    fn t(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn a_missed_firing_runs_once_at_start_then_the_schedule_resumes() {
        let every_5 = crate::pipeline::parse_schedule("*/5 * * * *").unwrap();
        let now = t("2026-11-26T12:02:00Z");
        assert_eq!(due_at(&every_5, None, now), Some(now), "never ran: at once");
        // Down since 09:00: three hours of firings are one catch-up run, now.
        let due = due_at(&every_5, Some(t("2026-11-26T09:00:00Z")), now).unwrap();
        assert!(due <= now);
        // After that run started at 12:02, the next firing is 12:05.
        assert_eq!(due_at(&every_5, Some(now), now), Some(t("2026-11-26T12:05:00Z")));
        let weekly = crate::pipeline::parse_schedule("0 3 * * 0").unwrap();
        assert_eq!(
            due_at(&weekly, Some(t("2026-11-26T12:00:00Z")), now),
            Some(t("2026-11-29T03:00:00Z")),
            "Sunday 03:00 UTC"
        );
    }
}
