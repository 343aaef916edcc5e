//! One sync run: pipelines in priority order, each fetching what the planner says
//! is due, mapping records to batches, and committing rows with their checkpoint.
//!
//! A failing pipeline is recorded and the next one runs; a refused key or an
//! exhausted quota stops the run, since every further request would fail too.

// One file per fetch engine, named after its `Fetch` variant.
mod company_index;
mod cursor;
mod details;
mod documents_and_sections;
mod layers;
mod offset_windows;
mod parent_texts;
mod per_company;
mod per_country;
mod single;
mod universe;
// What the engines share: committing, the run's own records, its report,
// the live stream, refusals remembered, packed cursors.
mod commit;
mod ledger;
mod packed;
mod report;
mod stream;
mod unserved;
// Beside the schedules: stored companies read again and compared.
mod verify;

use crate::clock::Clock;
use crate::config::Config;
use crate::feeds::Fetch;
use crate::pipeline::Pipeline;
use crate::planner;
use crate::records::Rows;
use crate::sink::{SinkError, SinkHandle};
use crate::upstream::{Client, UpstreamError};

use self::commit::{FetchedTx, goes_on, send_fetched, unless_cancelled};
pub use self::offset_windows::PENDING_LOOKBACK_DAYS;
pub use self::report::{PipelineOutcome, PipelineSummary, QuotaLeft, RunStatus, RunSummary, Shortfall, SyncReport};
pub use self::stream::StreamReport;
use self::unserved::{NotServed, found_for};
pub use self::verify::{TableTotals, Verified, VerifyReport};
pub use crate::bookkeeping::{
    BACKFILL_COMPLETE, BACKFILL_PARTITION, Backfill, NO_MANDATE, NOT_SERVED, RESUMES, STREAM_PARTITION, TapeBackfill,
};
pub use crate::error::SyncError;
use crate::upstream::refusal_text;

/// Rounds of a run in which pipelines cut by their share of the quota get
/// what is left over.
const MOST_ROUNDS: usize = 3;

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
    /// The routes the quarantined records came from (a few).
    quarantined_from: std::collections::BTreeSet<String>,
    /// Problems that did not stop the pipeline (it ends `partial`).
    problems: Vec<String>,
    /// A backfill stopped to leave the quota to the fresh polls still due.
    backfill_paused: bool,
    /// Answers that could not be read, to quarantine; the pipeline went on
    /// with its other companies.
    unreadable: Vec<crate::records::Quarantined>,
    /// Where the service counted more than the warehouse got.
    shortfalls: Vec<Shortfall>,
    /// Companies the route refused this run: remembered, and not by
    /// themselves a reason to end `partial`.
    not_served: Vec<NotServed>,
    /// Companies not asked this run: the route refused them within a day.
    not_served_resting: Vec<unserved::Resting>,
    /// Histories the service restated, read again whole (in words).
    restated: Vec<String>,
    /// What responses reported ([`crate::records::Rows::report`]), by what
    /// and whether it counts only when two or more responses say it: the
    /// companies it concerns.
    reported: std::collections::BTreeMap<(String, bool), Vec<String>>,
    /// Companies whose answer was read and handed to the commit side.
    answered: Vec<String>,
}

impl Progress {
    /// The problems noted, each reported what said once for all the
    /// companies it concerns (the first few named).
    fn problems(&self) -> Vec<String> {
        let mut problems = self.problems.clone();
        for ((what, shared), about) in &self.reported {
            if *shared && about.len() < 2 {
                tracing::info!(message = "One answer alone; not reported.", %what, about = %about.join(", "));
                continue;
            }
            let more = about.len().saturating_sub(3);
            let named = about.iter().take(3).cloned().collect::<Vec<_>>().join(", ");
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            problems.push(format!("{what}: {} compan(ies): {named}{more}", about.len()));
        }
        problems
    }

    fn absorb(&mut self, other: Progress) {
        self.rows_written += other.rows_written;
        self.quarantined += other.quarantined;
        self.quarantined_from.extend(other.quarantined_from);
        self.problems.extend(other.problems);
        self.backfill_paused |= other.backfill_paused;
        self.unreadable.extend(other.unreadable);
        self.shortfalls.extend(other.shortfalls);
        self.not_served.extend(other.not_served);
        self.not_served_resting.extend(other.not_served_resting);
        self.restated.extend(other.restated);
        self.answered.extend(other.answered);
        for (what, about) in other.reported {
            self.reported.entry(what).or_default().extend(about);
        }
    }
}

const UNIVERSE_PIPELINE: &str = "companies";

/// A pipeline's turn in a run: what each step of an engine is handed.
#[derive(Clone, Copy)]
struct Turn<'a> {
    pipeline: &'a Pipeline,
    run_id: &'a str,
}

impl Syncer {
    /// A syncer for the service at `base_url` with `key`, writing to
    /// `warehouse` (held as `holder`); the rest of `config` as given. For the
    /// demo, the tests and the benchmarks, which run against an emulator.
    ///
    /// # Errors
    /// A malformed key, or a warehouse that cannot be opened.
    pub async fn at(
        base_url: &str,
        key: &str,
        mut config: Config,
        warehouse: &std::path::Path,
        clock: Clock,
        holder: &str,
    ) -> Result<Syncer, SyncError> {
        config.upstream.base_url = base_url.to_owned();
        config.upstream.api_key_file = None;
        config.upstream.credential = crate::config::CredentialKind::ApiKey;
        config.warehouse.duckdb = warehouse.to_owned();
        let key = crate::config::Credential::parse(key, "the emulator's key")?;
        let client =
            Client::new(&config.upstream, Some(key), clock.clone()).map_err(|e| SyncError::Other(e.to_string()))?;
        let sink = SinkHandle::open_configured(&config.warehouse, holder).await?;
        Ok(Syncer {
            config,
            client,
            sink,
            clock,
        })
    }

    fn new_run_id(&self) -> String {
        let now = self.clock.now();
        format!(
            "{}-{:06x}",
            now.format("%Y%m%dT%H%M%SZ"),
            rand::random::<u32>() & 0xff_ffff
        )
    }

    /// Runs `pipelines` once, in the order given; when the quota left is
    /// known to fall short of what they need, in the fair order instead
    /// ([`planner::fair_order`]). While what is left cannot cover the least
    /// the pipelines still to run need, each takes an equal share of it
    /// with those after it; pipelines cut by their share get what is left
    /// over, in further rounds.
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
        let mut queue: Vec<&Pipeline> = match self.short_of_quota(pipelines).await {
            Some(fair) => fair,
            None => pipelines.iter().collect(),
        };
        let mut universe: Option<Vec<Member>> = None;
        let mut failed = Vec::new();
        let reach = crate::feeds::Reach::of(&self.config);
        for round in 1..=MOST_ROUNDS {
            let mut cut = Vec::new();
            for (index, &pipeline) in queue.iter().enumerate() {
                let later = &queue[index + 1..];
                let least = |p: &Pipeline| p.feed.fetch.least_requests(reach);
                let later_least: u64 = later.iter().map(|p| least(p)).sum();
                // A backfill spends what the quota leaves after the fresh polls
                // of the pipelines still to run.
                self.client.keep_for_fresh(later_least);
                self.client
                    .share_quota((queue.len() > 1).then_some((later.len() as u64 + 1, least(pipeline) + later_least)));
                let (outcome, stop) = match self.run_turn(pipeline, &run_id, &mut universe).await {
                    Ok(turn) => turn,
                    Err(e) => return (report, Err(e)),
                };
                report.outcomes.push(outcome);
                match stop {
                    Some((true, SyncError::BudgetSpent { limit })) => {
                        report.deferred = later.iter().map(|p| p.name.clone()).collect();
                        tracing::warn!(
                            message = "Request budget spent; later pipelines deferred to the next run.",
                            limit,
                            deferred = ?report.deferred
                        );
                        break;
                    }
                    Some((true, SyncError::Interrupted)) => {
                        report.deferred = later.iter().map(|p| p.name.clone()).collect();
                        return (report, Err(SyncError::Interrupted));
                    }
                    Some((true, e)) => return (report, Err(e)),
                    Some((false, SyncError::ShareSpent { .. })) => cut.push(pipeline),
                    Some((false, e)) => failed.push(format!("{} ({e})", pipeline.name)),
                    None => {}
                }
            }
            self.client.share_quota(None);
            if cut.is_empty() || !report.deferred.is_empty() {
                break;
            }
            tracing::info!(
                message = "Pipelines cut by their share of the quota get what is left over.",
                round = round + 1,
                pipelines = ?cut.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
            );
            queue = cut;
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

    /// `pipelines` (all that are enabled, so that shares are whole) with
    /// their `auto` schedules derived from the quota and what the run log
    /// measured ([`crate::planner::cost::derive_schedules`]); `timer_minutes` for
    /// `sync --once` under a timer.
    ///
    /// # Errors
    /// When the bookkeeping tables cannot be read.
    pub async fn schedules(
        &self,
        pipelines: &[Pipeline],
        timer_minutes: Option<u32>,
    ) -> Result<Vec<Pipeline>, SyncError> {
        if !pipelines.iter().any(|p| p.auto) {
            return Ok(pipelines.to_vec());
        }
        let config = self.config.clone();
        self.read_bookkeeping(pipelines, move |_, reader, pipelines, now| {
            crate::planner::cost::derive_schedules(&config, pipelines, Some(reader), timer_minutes, now)
        })
        .await
    }

    /// Whether the daemon connects the live stream of `pipelines`, and why
    /// ([`crate::planner::cost::stream_of`]).
    ///
    /// # Errors
    /// When the bookkeeping tables cannot be read.
    pub async fn stream_plan(
        &self,
        pipelines: &[Pipeline],
    ) -> Result<Option<crate::planner::cost::StreamForecast>, SyncError> {
        let config = self.config.clone();
        self.read_bookkeeping(pipelines, move |_, reader, pipelines, now| {
            crate::planner::cost::stream_of(&config, pipelines, Some(reader), None, now)
        })
        .await
    }

    /// Whether each of `pipelines` is due now, and why: what `sync --once`
    /// runs by default.
    ///
    /// # Errors
    /// When the bookkeeping tables cannot be read.
    pub async fn due(&self, pipelines: &[Pipeline]) -> Result<Vec<planner::Due>, SyncError> {
        self.read_bookkeeping(pipelines, |_, reader, pipelines, now| {
            planner::standing::due(reader, pipelines, now)
        })
        .await
    }

    /// The status of `pipelines` as the warehouse holds it now, read on the
    /// writer's own connection: what a run's summary reports after the run.
    ///
    /// # Errors
    /// When the bookkeeping tables cannot be read.
    pub async fn status(&self, pipelines: &[Pipeline]) -> Result<planner::standing::Status, SyncError> {
        self.read_bookkeeping(pipelines, |path, reader, pipelines, now| {
            planner::standing::of(path, None, Some(reader), pipelines, now)
        })
        .await
    }

    async fn read_bookkeeping<T: Send + 'static>(
        &self,
        pipelines: &[Pipeline],
        read: impl FnOnce(
            &std::path::Path,
            &crate::sink::duckdb::reader::BookkeepingReader,
            &[Pipeline],
            chrono::DateTime<chrono::Utc>,
        ) -> Result<T, SyncError>
        + Send
        + 'static,
    ) -> Result<T, SyncError> {
        let (pipelines, now) = (pipelines.to_vec(), self.clock.now());
        self.sink
            .call(move |s| {
                let reader = s.bookkeeping()?;
                read(s.path(), &reader, &pipelines, now)
            })
            .await?
    }

    /// One pipeline's turn in a run, recorded in the run log: its outcome,
    /// and the error that ended it early, with whether the run stops there.
    async fn run_turn(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        universe: &mut Option<Vec<Member>>,
    ) -> Result<(PipelineOutcome, Option<(bool, SyncError)>), SyncError> {
        let started_at = self.clock.now();
        // The run's duration is wall time, whatever clock the run keeps.
        let started = std::time::Instant::now();
        let sent_before = self.client.requests_sent();
        tracing::info!(message = "Pipeline started.", pipeline = %pipeline.name, %run_id);
        let tracker = crate::progress::Tracker::start(&pipeline.name);
        let rows_before = crate::metrics::rows_committed();
        let result = {
            let run = self.run_pipeline(pipeline, run_id, universe);
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
        let (mut progress, failure) = match result {
            Ok(p) => (p, None),
            Err((p, e)) => (p, Some(e)),
        };
        // Answers that could not be read go to quarantine whatever ended the
        // pipeline: nothing the service sent is dropped unseen.
        let mut unreadable = std::mem::take(&mut progress.unreadable);
        if let Some(SyncError::Unreadable(q)) = &failure {
            unreadable.push((**q).clone());
        }
        let unreadable_count = unreadable.len();
        let first_unreadable = unreadable.first().map(|q| format!("{}: {}", q.route, q.error));
        if !unreadable.is_empty() {
            self.quarantine_bodies(run_id, unreadable, &mut progress).await?;
        }
        let shortfall: u64 = progress.shortfalls.iter().map(Shortfall::missing).sum();
        let Ending {
            status,
            error,
            stop,
            resumes,
        } = ending(failure, first_unreadable, unreadable_count, &progress);
        let outcome = PipelineOutcome {
            pipeline: pipeline.name.clone(),
            status,
            requests,
            rows_written: progress.rows_written,
            quarantined: progress.quarantined,
            shortfall,
            unreadable: unreadable_count as u64,
            not_served: not_served_lines(&progress),
            restated: std::mem::take(&mut progress.restated),
            error,
            resumes,
        };
        let finished_at = self.clock.now();
        crate::metrics::pipeline_run(&pipeline.name, &outcome.status.to_string(), finished_at);
        crate::metrics::run_duration(&pipeline.name, started.elapsed().as_secs_f64());
        crate::metrics::shortfall(&pipeline.name, shortfall, unreadable_count as u64);
        crate::metrics::not_served(
            &pipeline.name,
            progress
                .not_served
                .iter()
                .map(|n| n.refusal.status)
                .chain(progress.not_served_resting.iter().map(|r| r.said.status)),
        );
        tracing::info!(
            message = "Pipeline finished.",
            pipeline = %pipeline.name,
            status = %outcome.status,
            requests,
            rows_written = outcome.rows_written
        );
        self.record_run(run_id, &outcome, started_at).await?;
        Ok((outcome, stop))
    }

    async fn run_pipeline(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        universe: &mut Option<Vec<Member>>,
    ) -> Result<Progress, (Progress, SyncError)> {
        let mut progress = Progress::default();
        let result = match &pipeline.feed.fetch {
            Fetch::Single(read) => self.run_single(pipeline, *read, run_id, &mut progress).await,
            Fetch::Cursor(tape) => self.run_tape(pipeline, tape, run_id, &mut progress).await,
            Fetch::SearchCursor(tape) => self.run_search_tapes(pipeline, tape, run_id, &mut progress).await,
            Fetch::OffsetWindows(windows) => self.run_windows(pipeline, windows, run_id, &mut progress).await,
            Fetch::Layers(layers) => self.run_layers(pipeline, layers, run_id, &mut progress).await,
            Fetch::PerCountry(per_country) => self.run_per_country(pipeline, per_country, run_id, &mut progress).await,
            Fetch::Details(details) => self.run_details(pipeline, details, run_id, &mut progress).await,
            Fetch::Universe(_)
            | Fetch::PerCompany(_)
            | Fetch::CompanyCursor(_)
            | Fetch::CompanyIndex(_)
            | Fetch::ParentTexts(_)
            | Fetch::DocumentsAndSections(_) => self.run_members(pipeline, run_id, universe, &mut progress).await,
        };
        match result {
            Ok(()) => Ok(progress),
            Err(e) => Err((progress, e)),
        }
    }

    /// Commits bodies that could not be read to `_sync_quarantine`, with
    /// the request log so far.
    async fn quarantine_bodies(
        &self,
        run_id: &str,
        bodies: Vec<crate::records::Quarantined>,
        progress: &mut Progress,
    ) -> Result<(), SinkError> {
        let mut rows = Rows::new(run_id, "", self.clock.now());
        rows.quarantined = bodies;
        self.commit(run_id, rows, None, progress).await
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
        if pipeline.resolves_universe() {
            *universe = Some(
                self.resolve_universe(run_id, Some(&pipeline.schedule), progress)
                    .await?,
            );
            return Ok(());
        }
        if universe.is_none() {
            *universe = Some(self.resolve_universe(run_id, None, progress).await?);
        }
        let checkpoints = self.checkpoints_of(pipeline).await?;
        // A company the route refused is asked again only a day later.
        let now = self.clock.now();
        let (members, resting) = unserved::resting(universe.clone().unwrap_or_default(), &checkpoints, now);
        for r in &resting {
            tracing::info!(message = "The route refused this company within a day; not asked again yet.", pipeline = %pipeline.name, company = %r.company, status = r.said.status);
        }
        progress.not_served_resting = resting;
        if matches!(pipeline.feed.fetch, Fetch::CompanyCursor(_)) {
            // Against the whole universe: a resting company keeps its tape.
            let keys: std::collections::HashSet<&str> = universe.iter().flatten().map(|m| m.key.as_str()).collect();
            self.retire_tapes(pipeline, &checkpoints, |p| keys.contains(p), run_id, progress)
                .await?;
        }
        let members = planner::stalest_first(members, |m| checkpoints.get(&m.key).map(|c| c.updated_at));
        let result = self
            .run_member_engine(pipeline, run_id, members, checkpoints, progress)
            .await;
        // Each refusal remembered, whatever ended the run.
        let remembered = unserved::remembered(pipeline, progress, now);
        if !remembered.is_empty() {
            self.commit_pages(run_id, Vec::new(), remembered, progress, false)
                .await?;
        }
        result
    }

    /// The engine of a pipeline that goes company by company, over `members`.
    async fn run_member_engine(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        checkpoints: std::collections::HashMap<String, crate::sink::StoredCheckpoint>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        match &pipeline.feed.fetch {
            // `checkpoints` as read before any retiring: the members' own are current.
            Fetch::CompanyCursor(tape) => {
                self.run_company_tapes(pipeline, tape, run_id, members, &checkpoints, progress)
                    .await
            }
            Fetch::CompanyIndex(index) => self.run_company_index(pipeline, index, run_id, members, progress).await,
            Fetch::ParentTexts(texts) => self.run_parent_texts(pipeline, texts, run_id, members, progress).await,
            Fetch::DocumentsAndSections(parts) => {
                self.run_document_parts(pipeline, parts, run_id, members, progress)
                    .await
            }
            Fetch::PerCompany(per_company) => {
                self.run_per_company(pipeline, per_company, run_id, members, checkpoints, progress)
                    .await
            }
            // Resolved by `run_members` before any company is asked.
            Fetch::Universe(_) => Ok(()),
            Fetch::Single(_)
            | Fetch::Cursor(_)
            | Fetch::SearchCursor(_)
            | Fetch::OffsetWindows(_)
            | Fetch::Layers(_)
            | Fetch::PerCountry(_)
            | Fetch::Details(_) => Err(SyncError::Other(format!(
                "pipeline {}: its engine does not go company by company",
                pipeline.name
            ))),
        }
    }
}

/// How a pipeline's turn ended: its status, the words for its run row, the
/// error that ended it early (with whether the whole run stops there), and
/// whether the next run picks it up at once whatever its status (stored with
/// the run as `_sync_runs.resumes`, for the planner to read).
struct Ending {
    status: RunStatus,
    error: Option<String>,
    stop: Option<(bool, SyncError)>,
    resumes: bool,
}

/// The [`Ending`] of a turn that failed with `failure` (or not), with
/// `unreadable_count` answers quarantined whole, the first said in
/// `first_unreadable`, and what `progress` noted.
fn ending(
    failure: Option<SyncError>,
    first_unreadable: Option<String>,
    unreadable_count: usize,
    progress: &Progress,
) -> Ending {
    let mut resumes = false;
    let problems = progress.problems();
    let (status, error, stop) = match (failure, first_unreadable) {
        (None, Some(first)) => {
            let e = SyncError::UnreadableParts {
                count: unreadable_count,
                first,
            };
            let mut notes = vec![e.to_string()];
            notes.extend(problems);
            notes.extend(progress.shortfalls.iter().map(ToString::to_string));
            (RunStatus::Partial, Some(notes.join("; ")), Some((false, e)))
        }
        (None, None)
            if problems.is_empty()
                && progress.quarantined == 0
                && progress.shortfalls.is_empty()
                && !progress.backfill_paused =>
        {
            (RunStatus::Ok, None, None)
        }
        // Partial, so that `sync --once` runs it again next time.
        (None, None) if problems.is_empty() && progress.quarantined == 0 && progress.shortfalls.is_empty() => {
            let why = format!(
                "backfill paused: the quota left is kept for the fresh polls of the pipelines still to run; {RESUMES}"
            );
            resumes = true;
            (RunStatus::Partial, Some(why), None)
        }
        (None, None) => {
            let mut problems = problems;
            problems.extend(progress.shortfalls.iter().map(ToString::to_string));
            if progress.quarantined > 0 {
                problems.push(format!(
                    "{} record(s) quarantined (from {})",
                    progress.quarantined,
                    quarantined_routes(&progress.quarantined_from)
                ));
            }
            (RunStatus::Partial, Some(problems.join("; ")), None)
        }
        (Some(e), _) => {
            let status = match &e {
                SyncError::QuotaExhausted { .. } => RunStatus::QuotaExhausted,
                SyncError::BudgetSpent { .. } | SyncError::ShareSpent { .. } => RunStatus::Partial,
                SyncError::Interrupted => RunStatus::Interrupted,
                _ => RunStatus::Failed,
            };
            let stop = matches!(
                e,
                SyncError::QuotaExhausted { .. }
                    | SyncError::Unauthenticated(_)
                    | SyncError::Misdirected(_)
                    | SyncError::Interrupted
                    | SyncError::BudgetSpent { .. }
            );
            let mut message = e.to_string();
            // A wall, a budget, a share or a stop leaves work for the next
            // run. What only the operator can fix (the credential, the
            // address) is retried at the next run, not after a failure's
            // backoff: that run is the one the fix was made for.
            resumes = e.resumes();
            if matches!(e, SyncError::Unauthenticated(_) | SyncError::Misdirected(_)) {
                message.push_str("; ");
                message.push_str(RESUMES);
            }
            for more in progress.shortfalls.iter().map(ToString::to_string) {
                message.push_str("; ");
                message.push_str(&more);
            }
            (status, Some(message), Some((stop, e)))
        }
    };
    Ending {
        status,
        error,
        stop,
        resumes,
    }
}

/// The companies a turn's route refused, this run's and those resting from
/// a refusal within a day, in words for the run's outcome.
fn not_served_lines(progress: &Progress) -> Vec<String> {
    progress
        .not_served
        .iter()
        .map(|n| format!("{} (asked again in a day)", n.refusal))
        .chain(progress.not_served_resting.iter().map(|r| {
            let route = if r.said.route.is_empty() {
                "the route"
            } else {
                &r.said.route
            };
            format!(
                "{}: not asked, {route} refused it within a day ({})",
                r.company,
                refusal_text(r.said.status, r.said.code.as_deref(), &r.said.message)
            )
        }))
        .collect()
}

/// A part's refusal (a 404, a 402, a body past the size cap: any answer
/// but a success, 401, 429 or a 5xx retried until it gave up) is noted (the
/// pipeline ends `partial`) and skipped, and so is an answer that could not
/// be read (quarantined; the run fails once the other parts had their turn);
/// any other failure stops the pipeline.
fn found<T>(
    fetched: Result<crate::upstream::Fetched<T>, UpstreamError>,
    progress: &mut Progress,
) -> Result<Option<T>, SyncError> {
    let fetched = fetched.map_err(UpstreamError::into_refusal);
    match fetched {
        Ok(f) => Ok(Some(f.value)),
        Err(Ok(refusal)) => {
            progress.problems.push(refusal.to_string());
            Ok(None)
        }
        Err(Err(e)) => found_other(e, progress),
    }
}

fn found_other<T>(e: UpstreamError, progress: &mut Progress) -> Result<Option<T>, SyncError> {
    match e {
        e @ UpstreamError::Unreadable { .. } => {
            if let SyncError::Unreadable(q) = upstream_error(e) {
                progress.unreadable.push(*q);
            }
            Ok(None)
        }
        e => Err(upstream_error(e)),
    }
}

/// The routes records were quarantined from, a few of them, for a message.
fn quarantined_routes(routes: &std::collections::BTreeSet<String>) -> String {
    const MOST: usize = 3;
    let mut named: Vec<&str> = routes.iter().take(MOST).map(String::as_str).collect();
    if routes.len() > MOST {
        named.push("...");
    }
    named.join(", ")
}

fn upstream_error(e: UpstreamError) -> SyncError {
    match e {
        UpstreamError::Unreadable { route, message, body } => {
            tracing::error!(message = "The service's answer could not be read; kept in quarantine.", %route, error = %message);
            SyncError::Unreadable(Box::new(crate::records::Quarantined {
                route,
                record: String::from_utf8_lossy(&body).into_owned(),
                error: format!("unreadable response: {message}"),
            }))
        }
        UpstreamError::Unauthenticated { .. } => SyncError::Unauthenticated(e.to_string()),
        UpstreamError::Redirected { .. } => SyncError::Misdirected(e.to_string()),
        UpstreamError::Stopped => SyncError::Interrupted,
        UpstreamError::QuotaExhausted { .. } => SyncError::QuotaExhausted { message: e.to_string() },
        UpstreamError::BudgetSpent { limit } => SyncError::BudgetSpent { limit },
        UpstreamError::ShareSpent { cap } => SyncError::ShareSpent { cap },
        other => SyncError::Other(other.to_string()),
    }
}
