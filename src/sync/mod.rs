//! One sync run: pipelines in priority order, each fetching what the planner says
//! is due, mapping records to batches, and committing rows with their checkpoint.
//!
//! A failing pipeline is recorded and the next one runs; a refused key or an
//! exhausted quota stops the run, since every further request would fail too.

mod documents;
mod events;
mod macro_history;
mod news;
mod stream;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, NaiveDate, Utc};
use futures::StreamExt;
use serde_json::value::RawValue;

use crate::batch::BatchBuilder;
use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::pipeline::{FanOut, Pipeline, Records};
use crate::planner;
use crate::records::{self, Rows};
use crate::sink::{Checkpoint, Commit, SinkError, SinkHandle, StoredCheckpoint, TableBatch};
use crate::tables;
use crate::upstream::ratelimit::QuotaWindow;
use crate::upstream::{Access, Client, RequestRecord, UpstreamError, encode};
use crate::wire;

pub use self::stream::StreamReport;

/// Why a run could not finish; each maps to an exit code of the operator contract.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Unauthenticated(String),
    #[error("{message}")]
    QuotaExhausted { message: String },
    #[error(transparent)]
    Sink(#[from] SinkError),
    #[error("{failed} pipeline(s) failed: {names}")]
    PipelinesFailed { failed: usize, names: String },
    /// `--max-requests` was reached: not a failure, the next run resumes.
    #[error(
        "the request budget of {limit} requests (--max-requests) is spent; the next run resumes from the checkpoints"
    )]
    BudgetSpent { limit: u64 },
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    #[error("{0} (the warehouse has every row; the next publish resumes)")]
    Lake(Box<crate::lake::LakeError>),
    #[error("{0}")]
    Other(String),
}

impl From<crate::lake::LakeError> for SyncError {
    fn from(e: crate::lake::LakeError) -> Self {
        SyncError::Lake(Box::new(e))
    }
}

impl SyncError {
    /// The process exit code for this error (operator contract).
    pub fn exit_code(&self) -> u8 {
        match self {
            SyncError::Config(_) | SyncError::Unauthenticated(_) => 2,
            SyncError::Lake(e) if matches!(**e, crate::lake::LakeError::Location { .. }) => 2,
            SyncError::QuotaExhausted { .. } => 75,
            _ => 1,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Ok,
    Partial,
    Failed,
    QuotaExhausted,
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunStatus::Ok => "ok",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
            RunStatus::QuotaExhausted => "quota_exhausted",
        })
    }
}

/// How one pipeline's part of a run ended.
#[derive(Debug, Clone)]
pub struct PipelineOutcome {
    pub pipeline: String,
    pub status: RunStatus,
    pub requests: u64,
    pub rows_written: u64,
    pub quarantined: u64,
    pub error: Option<String>,
}

#[derive(Debug)]
pub struct SyncReport {
    pub run_id: String,
    pub outcomes: Vec<PipelineOutcome>,
    /// Pipelines not started because the run's request budget was spent.
    pub deferred: Vec<String>,
}

/// Everything a run needs, wired by the caller.
pub struct Syncer {
    pub config: Config,
    pub client: Client,
    pub sink: SinkHandle,
    pub clock: Clock,
}

/// A configured company identifier and the canonical key it resolved to.
#[derive(Debug, Clone)]
struct Member {
    key: String,
}

/// What a pipeline body reports back.
#[derive(Default)]
struct Progress {
    rows_written: u64,
    quarantined: u64,
    /// Problems that did not stop the pipeline (it ends `partial`).
    problems: Vec<String>,
}

impl Progress {
    fn absorb(&mut self, other: Progress) {
        self.rows_written += other.rows_written;
        self.quarantined += other.quarantined;
        self.problems.extend(other.problems);
    }
}

/// The cursor of a company without a monthly revenue mandate: the day the
/// service said so (404), so it is asked again only after `recheck_days`.
const NO_MANDATE: &str = "no_mandate:";

const UNIVERSE_PIPELINE: &str = "companies";

/// What a fetch side hands to [`Syncer::commit_as_fetched`]: one response's
/// rows and the checkpoints they complete, or the error that ends the run.
type FetchedRows = Result<(Rows, Vec<Checkpoint>), SyncError>;

/// The fetch side's end of [`Syncer::commit_as_fetched`].
#[derive(Clone)]
struct FetchedTx {
    tx: tokio::sync::mpsc::Sender<(FetchedRows, u32)>,
    /// Room left, in KiB, for rows fetched and not yet committed.
    room: Arc<tokio::sync::Semaphore>,
    /// All the room there is: one fetch larger than it waits for all of it.
    room_kib: u32,
}

/// Hands `fetched` to the commit side; false when the fetching must stop
/// (it was an error, or the commit side stopped on one). Waits while the
/// rows fetched and not yet committed fill [`Syncer::in_flight_kib`].
async fn send_fetched(done: &FetchedTx, fetched: FetchedRows) -> bool {
    let stop = fetched.is_err();
    let kib = match &fetched {
        Ok((rows, _)) => u32::try_from(rows.value_bytes() / 1024)
            .unwrap_or(u32::MAX)
            .min(done.room_kib),
        Err(_) => 0,
    };
    let Ok(permit) = done.room.acquire_many(kib).await else {
        return false;
    };
    // Given back by the commit side once these rows are committed.
    permit.forget();
    done.tx.send((fetched, kib)).await.is_ok() && !stop
}

/// A blocking task's result: its panic goes on in the caller; `None` when
/// it was cancelled, which only a runtime shutting down does.
fn unless_cancelled<T>(joined: Result<T, tokio::task::JoinError>) -> Option<T> {
    match joined {
        Ok(value) => Some(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// Whether the fetching goes on after one step of it (a company, a tape, a
/// country) that returned whether to; an error is handed to the commit side,
/// which ends the run.
async fn goes_on(done: &FetchedTx, step: Result<bool, SyncError>) -> bool {
    match step {
        Ok(go_on) => go_on,
        Err(e) => {
            send_fetched(done, Err(e)).await;
            false
        }
    }
}

/// Responses (companies, filings, series) committed in one transaction at
/// most, when they arrive faster than the warehouse commits: enough to spread
/// a commit's fixed cost, few enough that a crash re-reads little and memory
/// stays bounded. Ten companies' whole price histories are 50,000 rows.
const COMMIT_GROUP: usize = 10;

/// Rows a response must bring for its commit to wait for later ones in the
/// same transaction (`SinkHandle::commit_held`): a backfill's news pages and
/// whole price histories do, a poll's few new items or bars do not. It
/// bounds what a crash costs: a held transaction ends once a table holds
/// six of the warehouse's row groups (368,640 rows), so a crash makes the next
/// run read about 3,700 responses again at most, about 1,850 news pages of
/// 200 items in a news backfill.
const BULK_RESPONSE_ROWS: usize = 100;

/// How long a group of bulk responses waits for the next one before it
/// commits: a backfill's responses come a few milliseconds apart, so a group
/// fills; a stall (a rate-limit wait, the end of a tape) commits what came.
/// Bounded, since the fetch side may be waiting for room only a commit
/// gives back.
const BULK_GROUP_WAIT: std::time::Duration = std::time::Duration::from_millis(25);

/// The rows a group of bulk responses waits for ([`BULK_GROUP_WAIT`]): forty
/// news pages of 200 items.
const BULK_GROUP_ROWS: usize = 8_000;

impl Syncer {
    /// Rows fetched and not yet committed, at most, in KiB of values: a
    /// quarter of `[warehouse] memory_limit_mb`, so that one setting sizes the
    /// process. The group committing and the next one fetched share it: ten
    /// companies' whole price histories are about 12 MiB, so the default (64)
    /// keeps groups of ten, and a 32 MiB limit (8) commits about four at once,
    /// slower but 25 MiB smaller at its peak (BENCHMARKS.md, Memory).
    fn in_flight_kib(&self) -> u32 {
        u32::try_from(self.config.warehouse.memory_limit_mb.saturating_mul(1024) / 4).unwrap_or(u32::MAX)
    }

    /// Groups of responses the fetch side may run ahead of the commit side,
    /// besides [`Syncer::in_flight_kib`]'s bound on their size: one group
    /// per 32 MiB of `memory_limit_mb`, up to eight. When DuckDB fills a row
    /// group it compresses it into the file before the writer takes the next
    /// commit (about half a second for two news tables); one group ahead
    /// left the fetching stopped for most of it, and the writer then waited
    /// for pages (3.4 s of a million-item backfill). Eight at the default
    /// limit: a million items 14.2-14.4 s against 16.0-16.1 s, peak 482-490
    /// MiB against 410-423 (BENCHMARKS.md, Ingest: "The emulator, the
    /// storage of `raw`, and read-ahead"). Small pods keep one: at 32 MiB
    /// eight added 8 MiB to the peak.
    fn groups_ahead(&self) -> usize {
        usize::try_from(self.config.warehouse.memory_limit_mb / 32)
            .unwrap_or(usize::MAX)
            .clamp(1, 8)
    }

    /// News pages committed in one transaction at most: a page holds at most
    /// a few hundred items, so more of them spread a commit's fixed cost (a
    /// dozen statements, each planned anew) further. DuckDB holds a
    /// transaction's rows and their index entries in memory until it commits,
    /// so the count follows `memory_limit_mb`: [`COMMIT_GROUP`] up to 64 MiB,
    /// 40 from 240 (the default is 256). Forty pages a commit took a quarter
    /// less time than ten at the default; at 48 MiB forty ran out of memory.
    fn page_group(&self) -> usize {
        usize::try_from(self.config.warehouse.memory_limit_mb / 6)
            .unwrap_or(usize::MAX)
            .clamp(COMMIT_GROUP, 40)
    }

    /// Companies committed in one transaction at most by the per-company
    /// pipelines: [`COMMIT_GROUP`] below 88 MiB of `memory_limit_mb`, 30 from
    /// 240. Thirty whole price histories (about 150,000 rows) fill a row
    /// group of DuckDB's default size, which it then writes compressed
    /// straight into the file instead of through the WAL: 600 companies'
    /// prices took a quarter less time than in groups of ten, and peaked
    /// 45-60 MiB higher, so small pods keep ten (BENCHMARKS.md, Ingest).
    fn company_group(&self) -> usize {
        usize::try_from(self.config.warehouse.memory_limit_mb / 8)
            .unwrap_or(usize::MAX)
            .clamp(COMMIT_GROUP, 30)
    }

    fn new_run_id(&self) -> String {
        let now = self.clock.now();
        format!(
            "{}-{:06x}",
            now.format("%Y%m%dT%H%M%SZ"),
            rand::random::<u32>() & 0xff_ffff
        )
    }

    /// Runs `pipelines` once, in the order given.
    ///
    /// # Errors
    /// A refused key or exhausted quota stops the run at once; other pipeline
    /// failures are returned after every pipeline had its turn.
    pub async fn run_once(&self, pipelines: &[Pipeline]) -> (SyncReport, Result<(), SyncError>) {
        let run_id = self.new_run_id();
        let mut report = SyncReport {
            run_id: run_id.clone(),
            outcomes: Vec::new(),
            deferred: Vec::new(),
        };
        if let Err(e) = self.load_quota_ledger().await {
            return (report, Err(e.into()));
        }
        self.warn_if_quota_short(pipelines).await;
        let mut universe: Option<Vec<Member>> = None;
        let mut failed = Vec::new();
        for (index, pipeline) in pipelines.iter().enumerate() {
            let started_at = self.clock.now();
            let sent_before = self.client.requests_sent();
            tracing::info!(message = "Pipeline started.", pipeline = %pipeline.name, %run_id);
            let tracker = crate::progress::Tracker::start(&pipeline.name);
            let rows_before = crate::metrics::rows_committed();
            let result = {
                let run = self.run_pipeline(pipeline, &run_id, &mut universe);
                tokio::pin!(run);
                loop {
                    tokio::select! {
                        done = &mut run => break done,
                        () = tracker.tick() => tracker.show(
                            self.client.requests_sent() - sent_before,
                            crate::metrics::rows_committed() - rows_before,
                        ),
                    }
                }
            };
            tracker.finish();
            let requests = self.client.requests_sent() - sent_before;
            let (status, progress, error, stop) = match result {
                Ok(p) if p.problems.is_empty() && p.quarantined == 0 => (RunStatus::Ok, p, None, None),
                Ok(p) => {
                    let mut problems = p.problems.clone();
                    if p.quarantined > 0 {
                        problems.push(format!("{} record(s) quarantined", p.quarantined));
                    }
                    (RunStatus::Partial, p, Some(problems.join("; ")), None)
                }
                Err((p, e)) => {
                    let status = match &e {
                        SyncError::QuotaExhausted { .. } => RunStatus::QuotaExhausted,
                        SyncError::BudgetSpent { .. } => RunStatus::Partial,
                        _ => RunStatus::Failed,
                    };
                    let stop = matches!(
                        e,
                        SyncError::QuotaExhausted { .. }
                            | SyncError::Unauthenticated(_)
                            | SyncError::BudgetSpent { .. }
                    );
                    let message = e.to_string();
                    (status, p, Some(message), Some((stop, e)))
                }
            };
            let outcome = PipelineOutcome {
                pipeline: pipeline.name.clone(),
                status,
                requests,
                rows_written: progress.rows_written,
                quarantined: progress.quarantined,
                error,
            };
            crate::metrics::pipeline_run(&pipeline.name, &outcome.status.to_string(), self.clock.now());
            tracing::info!(
                message = "Pipeline finished.",
                pipeline = %pipeline.name,
                status = %outcome.status,
                requests,
                rows_written = outcome.rows_written
            );
            if let Err(e) = self.record_run(&run_id, &outcome, started_at).await {
                return (report, Err(e.into()));
            }
            report.outcomes.push(outcome);
            match stop {
                Some((true, SyncError::BudgetSpent { limit })) => {
                    report.deferred = pipelines[index + 1..].iter().map(|p| p.name.clone()).collect();
                    tracing::warn!(
                        message = "Request budget spent; later pipelines deferred to the next run.",
                        limit,
                        deferred = ?report.deferred
                    );
                    break;
                }
                Some((true, e)) => return (report, Err(e)),
                Some((false, e)) => failed.push(format!("{} ({e})", pipeline.name)),
                None => {}
            }
        }
        if failed.is_empty() {
            (report, Ok(()))
        } else {
            (
                report,
                Err(SyncError::PipelinesFailed {
                    failed: failed.len(),
                    names: failed.join(", "),
                }),
            )
        }
    }

    /// Writes the pipeline's `_sync_runs` row and the request log not yet committed.
    async fn record_run(&self, run_id: &str, o: &PipelineOutcome, started_at: DateTime<Utc>) -> Result<(), SinkError> {
        let def = tables::table("_sync_runs").expect("runs table");
        let mut b = BatchBuilder::new(def, run_id, self.clock.now());
        b.row()
            .text(Some(run_id))
            .text(Some(&o.pipeline))
            .timestamp(Some(started_at))
            .timestamp(Some(self.clock.now()))
            .text(Some(&o.status.to_string()))
            .int(Some(o.requests as i64))
            .int(Some(o.rows_written as i64))
            .text(o.error.as_deref())
            .end_bare();
        let mut batches = vec![TableBatch::build(b)?];
        batches.extend(self.bookkeeping(run_id)?);
        self.sink
            .commit(Commit {
                batches,
                checkpoints: Vec::new(),
            })
            .await?;
        Ok(())
    }

    /// The request log since the last commit and the quota ledger, committed
    /// with whatever rows and checkpoint go with them.
    fn bookkeeping(&self, run_id: &str) -> Result<Vec<TableBatch>, SinkError> {
        let mut batches: Vec<TableBatch> = self.request_log(run_id)?.into_iter().collect();
        batches.extend(self.quota_ledger(run_id)?);
        Ok(batches)
    }

    fn quota_ledger(&self, run_id: &str) -> Result<Option<TableBatch>, SinkError> {
        let Some(key_id) = self.client.key_id() else {
            return Ok(None);
        };
        let Some(seen) = self.client.quota_for_ledger() else {
            return Ok(None);
        };
        if seen.quota.remaining.is_none() && seen.rate.remaining.is_none() {
            return Ok(None);
        }
        let def = tables::table("_sync_quota").expect("quota table");
        let mut b = BatchBuilder::new(def, run_id, self.clock.now());
        b.row()
            .text(Some(&key_id))
            .timestamp(Some(self.clock.now()))
            .text(seen.quota.window.as_deref())
            .int(seen.quota.limit.map(|n| n as i64))
            .int(seen.quota.remaining.map(|n| n as i64))
            .timestamp(seen.quota.reset_at)
            .int(seen.rate.limit.map(i64::from))
            .int(seen.rate.remaining.map(i64::from))
            .text(seen.quota.billing_source.as_deref())
            .float(seen.quota.credits_remaining_usd)
            .end_bare();
        Ok(Some(TableBatch::build(b)?))
    }

    /// Seeds the client with the quota window an earlier process saw, if that
    /// window has not reset since: a cron run that starts fresh must not spend
    /// what the morning's runs already spent as if it were new.
    async fn load_quota_ledger(&self) -> Result<(), SinkError> {
        let Some(key_id) = self.client.key_id() else {
            return Ok(());
        };
        let row = self
            .sink
            .call(move |s| {
                let sql = "SELECT quota_window, quota_limit, quota_remaining, quota_reset_at, billing_source, \
                           credits_remaining_usd FROM _sync_quota WHERE key_id = ?";
                let mut stmt = s
                    .connection()
                    .prepare(sql)
                    .map_err(crate::sink::duckdb::sql_err("_sync_quota", "reading the quota ledger"))?;
                let mut rows = stmt
                    .query_map([key_id], |r| {
                        Ok(QuotaWindow {
                            window: r.get(0)?,
                            limit: r.get::<_, Option<i64>>(1)?.map(|n| n as u64),
                            remaining: r.get::<_, Option<i64>>(2)?.map(|n| n as u64),
                            reset_at: r.get(3)?,
                            billing_source: r.get(4)?,
                            credits_remaining_usd: r.get(5)?,
                        })
                    })
                    .map_err(crate::sink::duckdb::sql_err("_sync_quota", "reading the quota ledger"))?;
                rows.next()
                    .transpose()
                    .map_err(crate::sink::duckdb::sql_err("_sync_quota", "reading the quota ledger"))
            })
            .await??;
        if let Some(window) = row
            && window.reset_at.is_some_and(|reset| reset > self.clock.now())
        {
            tracing::info!(
                message = "Quota ledger: resuming the current window.",
                remaining = window.remaining,
                resets_at = ?window.reset_at
            );
            self.client.seed_quota(window);
        }
        Ok(())
    }

    /// Says so when the quota left (as far as known) cannot cover what is due;
    /// pipelines then run in priority order and the least recently synced
    /// companies go first, so the budget goes where it matters and every
    /// company gets its turn over successive runs.
    async fn warn_if_quota_short(&self, pipelines: &[Pipeline]) {
        let Some(remaining) = self.client.quota_seen().quota.remaining else {
            return;
        };
        let known = self
            .sink
            .call(|s| s.checkpoints(UNIVERSE_PIPELINE))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let due = planner::requests_due(pipelines, &self.config.universe, &known);
        if due > remaining {
            let order: Vec<&str> = pipelines.iter().map(|p| p.name.as_str()).collect();
            tracing::warn!(
                message = "The quota left cannot cover every request due; running pipelines by priority.",
                quota_remaining = remaining,
                requests_due = due,
                order = ?order
            );
        }
    }

    fn request_log(&self, run_id: &str) -> Result<Option<TableBatch>, SinkError> {
        let log: Vec<RequestRecord> = self.client.drain_log();
        if log.is_empty() {
            return Ok(None);
        }
        let def = tables::table("_sync_requests").expect("requests table");
        let mut b = BatchBuilder::new(def, run_id, self.clock.now());
        for r in &log {
            b.row()
                .timestamp(Some(r.at))
                .text(Some(run_id))
                .text(Some(&r.route))
                .int(Some(i64::from(r.status)))
                .int(Some(r.latency_ms))
                .int(r.rate_remaining.map(i64::from))
                .int(r.quota_remaining.map(|q| q as i64))
                .float(r.retry_after_s)
                .text(r.error.as_deref())
                .end_bare();
        }
        Ok(Some(TableBatch::build(b)?))
    }

    /// Commits mapped rows, the request log so far and the checkpoint in one transaction.
    async fn commit(
        &self,
        run_id: &str,
        rows: Rows,
        checkpoint: Option<Checkpoint>,
        progress: &mut Progress,
    ) -> Result<(), SinkError> {
        self.commit_pages(run_id, vec![rows], checkpoint.into_iter().collect(), progress, false)
            .await
    }

    /// Commits several pages' rows, the request log so far and the checkpoints
    /// that cover them in one transaction, each table merged once; with
    /// `hold`, a transaction the sink may keep open for the next pages.
    async fn commit_pages(
        &self,
        run_id: &str,
        pages: Vec<Rows>,
        checkpoints: Vec<Checkpoint>,
        progress: &mut Progress,
        hold: bool,
    ) -> Result<(), SinkError> {
        let several = pages.len() > 1;
        let mut batches = Vec::new();
        for rows in pages {
            progress.quarantined += rows.quarantined.len() as u64;
            batches.extend(rows.into_batches()?);
        }
        // One batch per table, as one page's rows already are. Several
        // pages' are copied together on a blocking thread: on this one it
        // held up the fetching of the next news page (forty pages' rows a
        // group), on the writer's it slowed a price backfill's bottleneck.
        if several {
            let coalesced = tokio::task::spawn_blocking(move || TableBatch::coalesce(batches)).await;
            batches = unless_cancelled(coalesced).ok_or(SinkError::Closed)??;
        }
        batches.extend(self.bookkeeping(run_id)?);
        let commit = Commit { batches, checkpoints };
        let stats = if hold {
            self.sink.commit_held(commit).await?
        } else {
            self.sink.commit(commit).await?
        };
        progress.rows_written += stats.rows_written;
        Ok(())
    }

    async fn run_pipeline(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        universe: &mut Option<Vec<Member>>,
    ) -> Result<Progress, (Progress, SyncError)> {
        let mut progress = Progress::default();
        let result = match (pipeline.fan_out, pipeline.records) {
            (_, Records::News) => self.run_news(pipeline, run_id, &mut progress).await,
            (_, Records::EventsWire) => self.run_events_wire(pipeline, run_id, &mut progress).await,
            (_, Records::Geo) => self.run_geo(pipeline, run_id, &mut progress).await,
            (FanOut::None, _) => self.run_single(pipeline, run_id, &mut progress).await,
            (FanOut::Countries, _) => self.run_macro(pipeline, run_id, &mut progress).await,
            (FanOut::Universe | FanOut::Parent, _) => self.run_members(pipeline, run_id, universe, &mut progress).await,
        };
        match result {
            Ok(()) => Ok(progress),
            Err(e) => Err((progress, e)),
        }
    }

    async fn run_single(&self, pipeline: &Pipeline, run_id: &str, progress: &mut Progress) -> Result<(), SyncError> {
        let route = pipeline.route.clone();
        let name = pipeline.name.clone();
        let records = pipeline.records;
        let access = if pipeline.auth { Access::Key } else { Access::Public };
        let fetched = self
            .client
            .get(&route, access, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let cursor = match records {
                    Records::Indices => {
                        let page: wire::IndicesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        records::indices(&mut rows, &page);
                        rows.fetched_at.to_rfc3339()
                    }
                    Records::Coverage => {
                        let page: wire::CoveragePage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        records::coverage(&mut rows, &page);
                        page.generated_at.to_rfc3339()
                    }
                    Records::NewsSources => {
                        let page: wire::NewsSourcesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        records::news_sources(&mut rows, &page);
                        rows.fetched_at.to_rfc3339()
                    }
                    Records::NewsTopics => {
                        let page: wire::NewsTopicsPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        records::news_topics(&mut rows, &page);
                        rows.fetched_at.to_rfc3339()
                    }
                    Records::EventsLatest => {
                        let page: wire::EventsPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        for raw in &page.events {
                            records::event(&mut rows, raw, None, None);
                        }
                        rows.fetched_at.to_rfc3339()
                    }
                    other => return Err(format!("records = {other:?} needs fan_out = \"universe\"")),
                };
                Ok((rows, cursor))
            })
            .await
            .map_err(upstream_error)?;
        let (rows, cursor) = fetched.value;
        let checkpoint = Checkpoint {
            pipeline: name,
            partition: String::new(),
            cursor,
        };
        self.commit(run_id, rows, Some(checkpoint), progress).await?;
        Ok(())
    }

    pub(super) async fn checkpoints_of(
        &self,
        pipeline: &Pipeline,
    ) -> Result<std::collections::HashMap<String, crate::sink::StoredCheckpoint>, SyncError> {
        let name = pipeline.name.clone();
        Ok(self.sink.call(move |s| s.checkpoints(&name)).await??)
    }

    /// Pipelines that go company by company: the universe resolved once per
    /// run, then the least recently synced companies first.
    async fn run_members(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        universe: &mut Option<Vec<Member>>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        if universe.is_none() {
            *universe = Some(self.resolve_universe(run_id, progress).await?);
        }
        if pipeline.records == Records::Company {
            return Ok(());
        }
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let members = planner::stalest_first(universe.clone().unwrap_or_default(), |m| {
            checkpoints.get(&m.key).map(|c| c.updated_at)
        });
        match pipeline.records {
            Records::CompanyNews => self.run_company_news(pipeline, run_id, members, progress).await,
            Records::Events => self.run_events_index(pipeline, run_id, members, progress).await,
            Records::EventTexts => self.run_event_texts(pipeline, run_id, members, progress).await,
            Records::Filings => self.run_filings(pipeline, run_id, members, progress).await,
            _ => self.run_fan_out(pipeline, run_id, members, checkpoints, progress).await,
        }
    }

    /// One request per company, its rows committed with the company's checkpoint.
    async fn run_fan_out(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        checkpoints: std::collections::HashMap<String, crate::sink::StoredCheckpoint>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let today = self.clock.now().date_naive();
        let records = pipeline.records;
        let recheck = chrono::Duration::days(i64::from(pipeline.params.recheck_days.unwrap_or(30)));
        // A company the service said has no mandate is not asked again until the recheck is due.
        let members: Vec<Member> = members
            .into_iter()
            .filter(|m| {
                let since = checkpoints
                    .get(&m.key)
                    .and_then(|c| c.cursor.strip_prefix(NO_MANDATE))
                    .and_then(|d| d.parse::<NaiveDate>().ok());
                since.is_none_or(|d| today - d >= recheck)
            })
            .collect();
        // Requests run `concurrency` at a time, sharing one rate budget; their
        // results are committed one by one in member order.
        let fetches = members.iter().map(|member| {
            let path = pipeline.route.replace("{company}", &encode(&member.key));
            let (route, partial) = match records {
                Records::Prices => {
                    let last = checkpoints
                        .get(&member.key)
                        .and_then(|c| c.cursor.parse::<NaiveDate>().ok());
                    let range = planner::price_range(last, today, &pipeline.params);
                    (format!("{path}?range={range}"), last)
                }
                _ => (path, None),
            };
            let key = member.key.clone();
            async move {
                let fetched = self
                    .client
                    .get(&route, Access::Key, |body| {
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        let newest = match records {
                            Records::Prices => {
                                let page: wire::PricesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                                records::prices(&mut rows, &page, &key)
                            }
                            Records::Dividends => {
                                let page: wire::DividendsPage =
                                    serde_json::from_slice(body).map_err(|e| e.to_string())?;
                                let as_of = rows.fetched_at.date_naive();
                                records::dividends(&mut rows, &page, &key, as_of)
                            }
                            Records::Regulation => {
                                let page: wire::RegulationPage =
                                    serde_json::from_slice(body).map_err(|e| e.to_string())?;
                                records::regulation(&mut rows, &page, &key);
                                Some(rows.fetched_at.date_naive())
                            }
                            Records::MonthlyRevenue => {
                                let page: wire::MonthlyRevenuePage =
                                    serde_json::from_slice(body).map_err(|e| e.to_string())?;
                                records::monthly_revenue(&mut rows, &page, &key)
                            }
                            other => return Err(format!("records = {other:?} cannot fan out over companies")),
                        };
                        Ok((rows, newest))
                    })
                    .await;
                (key, partial, fetched)
            }
        });
        // Collected before buffering: over a lazy `map` adapter the run future
        // cannot be proven Send, and the daemon spawns it (rust-lang/rust#102211).
        let fetches = fetches.collect::<Vec<_>>();
        let concurrency = self.config.upstream.concurrency;
        self.commit_as_fetched(run_id, progress, self.company_group(), |done| async move {
            let mut noted = Progress::default();
            let mut results = futures::stream::iter(fetches).buffered(concurrency);
            while let Some((key, partial, fetched)) = results.next().await {
                let ready = if records == Records::MonthlyRevenue
                    && let Err(UpstreamError::NotFound { .. }) = &fetched
                {
                    let checkpoint = Checkpoint {
                        pipeline: pipeline.name.clone(),
                        partition: key,
                        cursor: format!("{NO_MANDATE}{today}"),
                    };
                    Ok((Rows::new(run_id, &pipeline.route, self.clock.now()), vec![checkpoint]))
                } else {
                    match found(fetched, &mut noted) {
                        Ok(Some((rows, newest))) => {
                            let checkpoint = Checkpoint {
                                pipeline: pipeline.name.clone(),
                                partition: key,
                                cursor: newest.max(partial).map(|d| d.to_string()).unwrap_or_default(),
                            };
                            Ok((rows, vec![checkpoint]))
                        }
                        Ok(None) => continue,
                        Err(e) => Err(e),
                    }
                };
                if !send_fetched(&done, ready).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// Runs `fetch`, which sends what it fetched in order, while committing
    /// what it sent: the warehouse commits while the next responses are
    /// requested, and the ones that arrived meanwhile commit together in one
    /// transaction (at most `group` responses) with their checkpoints. A crash
    /// loses at most the group in flight, read again on resume. The fetch side
    /// returns what it noted (404s), added to `progress`.
    async fn commit_as_fetched<F: std::future::Future<Output = Progress>>(
        &self,
        run_id: &str,
        progress: &mut Progress,
        group: usize,
        fetch: impl FnOnce(FetchedTx) -> F,
    ) -> Result<(), SyncError> {
        let (tx, done_rx) = tokio::sync::mpsc::channel(group * self.groups_ahead());
        let room_kib = self.in_flight_kib();
        let room = Arc::new(tokio::sync::Semaphore::new(room_kib as usize));
        let fetch = fetch(FetchedTx {
            tx,
            room: room.clone(),
            room_kib,
        });
        let commit = async {
            let committed = self.commit_fetched(run_id, progress, done_rx, group, &room).await;
            // Ends a fetch side waiting for room that a failed commit will never give back.
            room.close();
            committed
        };
        let (noted, committed) = tokio::join!(fetch, commit);
        progress.absorb(noted);
        // Whatever stopped the fetching (a quota wall, a refused key), each
        // commit held so far is whole: it lands. After a failed commit
        // nothing is held, and this does nothing.
        let landed = self.sink.commit_held_now().await.map_err(SyncError::from);
        committed.and(landed)
    }

    /// The commit side of [`Syncer::commit_as_fetched`]. Owns the receiver: a
    /// failed commit drops it, which stops the fetching (borrowed, it would
    /// outlive the failure and leave the fetch side waiting for room in a full
    /// channel forever).
    async fn commit_fetched(
        &self,
        run_id: &str,
        progress: &mut Progress,
        mut done_rx: tokio::sync::mpsc::Receiver<(FetchedRows, u32)>,
        group: usize,
        room: &tokio::sync::Semaphore,
    ) -> Result<(), SyncError> {
        while let Some(first) = done_rx.recv().await {
            let mut pages = Vec::new();
            let mut covered = Vec::new();
            let mut failure = None;
            let mut kib = 0;
            let mut group_rows = 0;
            let mut all_bulk = true;
            let mut next = Some(first);
            while let Some((fetched, size)) = next.take() {
                kib += size;
                match fetched {
                    Ok((rows, checkpoints)) => {
                        group_rows += rows.row_count();
                        all_bulk &= rows.row_count() >= BULK_RESPONSE_ROWS;
                        pages.push(rows);
                        covered.extend(checkpoints);
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
                if pages.len() >= group {
                    break;
                }
                next = done_rx.try_recv().ok();
                // A group of small bulk responses waits briefly for those on
                // their way: its rows are not visible before its held
                // transaction lands anyway, and each load has a fixed cost of
                // a few statements. Committing whatever had arrived, a news
                // backfill ran 505 loads of three pages, which kept the writer
                // busy and took from the fetching the core it shares
                // (BENCHMARKS.md, Ingest). Two price histories are enough: the
                // writer is what they wait for, and it must not idle.
                if next.is_none() && all_bulk && group_rows < BULK_GROUP_ROWS {
                    next = tokio::time::timeout(BULK_GROUP_WAIT, done_rx.recv())
                        .await
                        .ok()
                        .flatten();
                }
            }
            if !pages.is_empty() {
                self.commit_pages(run_id, pages, covered, progress, all_bulk).await?;
            }
            room.add_permits(kib as usize);
            if let Some(e) = failure {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Maps every configured identifier to its canonical `company_key`, asking the
    /// service only about identifiers never resolved before, and drops duplicates
    /// (`MSFT` and `789019` are one company). The lookups run `concurrency` at a
    /// time and commit in groups as they arrive, like any per-company pipeline:
    /// one at a time, each in its own commit, a first sync of 2,000 companies
    /// spent most of a minute here (BENCHMARKS.md, Cold start).
    async fn resolve_universe(&self, run_id: &str, progress: &mut Progress) -> Result<Vec<Member>, SyncError> {
        let known = self.sink.call(|s| s.checkpoints(UNIVERSE_PIPELINE)).await??;
        let ids: Vec<String> = self
            .config
            .universe
            .companies
            .iter()
            .map(|id| id.trim().to_owned())
            .collect();
        let mut asked = std::collections::HashSet::new();
        let lookups = ids
            .iter()
            .filter(|id| !known.contains_key(*id) && asked.insert(*id))
            .map(|id| {
                let route = format!("/api/v1/companies/{}", encode(id));
                async move {
                    let fetched = self
                        .client
                        .get(&route, Access::Key, |body| {
                            let mut rows = Rows::new(run_id, &route, self.clock.now());
                            let raw: &RawValue = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                            let company = records::company(&mut rows, raw);
                            Ok((rows, company))
                        })
                        .await;
                    (id, fetched)
                }
            })
            // Collected first: see `run_fan_out`.
            .collect::<Vec<_>>();
        if lookups.is_empty() {
            return Ok(members_of(&ids, &known));
        }
        let concurrency = self.config.upstream.concurrency;
        self.commit_as_fetched(run_id, progress, self.company_group(), |done| async move {
            let mut noted = Progress::default();
            let mut results = futures::stream::iter(lookups).buffered(concurrency);
            while let Some((id, fetched)) = results.next().await {
                let ready = match fetched {
                    // A company without its key is quarantined: its rows commit, it joins no pipeline.
                    Ok(f) => {
                        let (rows, company) = f.value;
                        let checkpoints = company.map(|company| Checkpoint {
                            pipeline: UNIVERSE_PIPELINE.into(),
                            partition: id.clone(),
                            cursor: company.cik,
                        });
                        Ok((rows, checkpoints.into_iter().collect()))
                    }
                    Err(UpstreamError::NotFound { .. }) => {
                        noted.problems.push(format!(
                            "universe.companies: {id:?} is unknown to the service (404); fix or remove it"
                        ));
                        continue;
                    }
                    Err(e) => Err(upstream_error(e)),
                };
                if !send_fetched(&done, ready).await {
                    break;
                }
            }
            noted
        })
        .await?;
        // What the lookups resolved is what they committed.
        let known = self.sink.call(|s| s.checkpoints(UNIVERSE_PIPELINE)).await??;
        Ok(members_of(&ids, &known))
    }
}

/// The configured identifiers' companies, in the configured order, each once.
fn members_of(ids: &[String], resolved: &std::collections::HashMap<String, StoredCheckpoint>) -> Vec<Member> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter_map(|id| resolved.get(id))
        .filter(|stored| seen.insert(stored.cursor.as_str()))
        .map(|stored| Member {
            key: stored.cursor.clone(),
        })
        .collect()
}

/// A member's 404 is noted (the pipeline ends `partial`) and skipped; any other
/// failure stops the pipeline.
fn found<T>(
    fetched: Result<crate::upstream::Fetched<T>, UpstreamError>,
    progress: &mut Progress,
) -> Result<Option<T>, SyncError> {
    match fetched {
        Ok(f) => Ok(Some(f.value)),
        Err(UpstreamError::NotFound { route, message }) => {
            progress.problems.push(format!("{route}: 404 {message}"));
            Ok(None)
        }
        Err(e) => Err(upstream_error(e)),
    }
}

fn upstream_error(e: UpstreamError) -> SyncError {
    match e {
        UpstreamError::Unauthenticated { .. } => SyncError::Unauthenticated(e.to_string()),
        UpstreamError::QuotaExhausted { .. } => SyncError::QuotaExhausted { message: e.to_string() },
        UpstreamError::BudgetSpent { limit } => SyncError::BudgetSpent { limit },
        other => SyncError::Other(other.to_string()),
    }
}
