//! What a run reports: each pipeline's outcome, and the table `sync --once`
//! and the demo print.

use std::fmt;
use std::io::Write;

use chrono::{DateTime, Utc};

use super::SyncError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Ok,
    Partial,
    Failed,
    QuotaExhausted,
    /// Stopped by a signal; what was received is committed.
    Interrupted,
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunStatus::Ok => "ok",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
            RunStatus::QuotaExhausted => "quota_exhausted",
            RunStatus::Interrupted => "interrupted",
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
    /// Records the service counted that the warehouse did not get ([`Shortfall`]).
    pub shortfall: u64,
    /// Answers that could not be read, quarantined whole.
    pub unreadable: u64,
    /// Companies the route does not serve (404), this run's and those
    /// remembered from a day before: reported, not a reason to end `partial`.
    pub not_served: Vec<String>,
    /// Histories the service restated, read again whole: `prices_daily
    /// 0000789019: 77 rows before 2026-11-18 changed (factor 0.5000)`.
    pub restated: Vec<String>,
    pub error: Option<String>,
    /// Whether it stopped with work the next run picks up at once
    /// (`_sync_runs.resumes`).
    pub resumes: bool,
}

/// Where a service's own count (the wire's `total`, a filing's listed
/// sections, an event's item codes, a tape's `hasMore`) says more exists
/// than a run stored. The pipeline ends `partial` and its next run fetches
/// the rest; nothing is marked complete on the strength of it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Shortfall {
    /// What was counted, where: `events dated 2026-11-01 to 2026-11-25 (/api/v1/events/wire)`.
    pub what: String,
    /// How many the service counted.
    pub expected: u64,
    /// How many the warehouse holds (or the run accounted for, quarantine included).
    pub stored: u64,
}

impl Shortfall {
    pub fn missing(&self) -> u64 {
        self.expected.saturating_sub(self.stored)
    }
}

impl fmt::Display for Shortfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "incomplete: the service counts {} {}, {} are stored ({} short; the next run fetches them again)",
            self.expected,
            self.what,
            self.stored,
            self.missing()
        )
    }
}

#[derive(Debug)]
pub struct SyncReport {
    pub run_id: String,
    pub outcomes: Vec<PipelineOutcome>,
    /// Pipelines not started because the run's request budget was spent.
    pub deferred: Vec<String>,
}

impl SyncReport {
    /// The report as a table, one line per pipeline, deferred ones last.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn write_text(&self, out: &mut dyn Write) -> Result<(), SyncError> {
        // As wide as the longest name, so `monthly_revenue` keeps its columns.
        let w = (self.outcomes.iter().map(|o| o.pipeline.len()))
            .chain(self.deferred.iter().map(String::len))
            .fold("pipeline".len(), usize::max);
        writeln!(
            out,
            "  {:<w$} {:<16} {:>8} {:>12}  note",
            "pipeline", "status", "requests", "rows written"
        )?;
        for o in &self.outcomes {
            let not_served = (!o.not_served.is_empty()).then(|| format!("not served: {}", o.not_served.join("; ")));
            let restated = (!o.restated.is_empty()).then(|| format!("restated: {}", o.restated.join("; ")));
            let note: Vec<&str> = o
                .error
                .as_deref()
                .into_iter()
                .chain(not_served.as_deref())
                .chain(restated.as_deref())
                .collect();
            writeln!(
                out,
                "  {:<w$} {:<16} {:>8} {:>12}  {}",
                o.pipeline,
                o.status.to_string(),
                o.requests,
                o.rows_written,
                note.join("; ")
            )?;
        }
        for name in &self.deferred {
            writeln!(
                out,
                "  {name:<w$} {:<16} {:>8} {:>12}  request budget spent",
                "deferred", 0, 0
            )?;
        }
        Ok(())
    }
}

/// One run as a machine reads it: `sync --once --json` prints it, and the
/// daemon writes one line of it per run, so a scheduler or an alert can act
/// on what happened without parsing the table.
#[derive(Debug, serde::Serialize)]
pub struct RunSummary {
    pub run_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// `ok`, or the status of the pipeline or error that stopped the run:
    /// `partial`, `failed`, `quota_exhausted`, `interrupted`.
    pub status: String,
    /// The exit code `sync --once` ends with (operator contract).
    pub exit_code: u8,
    pub error: Option<String>,
    pub requests: u64,
    pub rows_written: u64,
    pub quarantined: u64,
    /// Records the service counted that the run did not store, over every pipeline.
    pub shortfall: u64,
    pub quota: QuotaLeft,
    pub pipelines: Vec<PipelineSummary>,
    /// What the lake publish after the run wrote, when there is a lake.
    pub lake: Option<crate::lake::PublishReport>,
    /// The process's peak resident memory so far.
    pub peak_memory_mib: Option<f64>,
}

/// What the service's headers said last about the key's limits.
#[derive(Debug, Default, serde::Serialize)]
pub struct QuotaLeft {
    /// Requests left in the day or month window (`X-Quota-Remaining`).
    pub remaining: Option<u64>,
    pub limit: Option<u64>,
    pub window: Option<String>,
    pub reset_at: Option<DateTime<Utc>>,
    /// Requests left in the current minute (`X-RateLimit-Remaining`).
    pub minute_remaining: Option<u32>,
    pub minute_limit: Option<u32>,
}

impl From<&crate::upstream::QuotaSeen> for QuotaLeft {
    fn from(seen: &crate::upstream::QuotaSeen) -> QuotaLeft {
        QuotaLeft {
            remaining: seen.quota.remaining.map(|r| r.saturating_sub(seen.in_flight)),
            limit: seen.quota.limit,
            window: seen.quota.window.clone(),
            reset_at: seen.quota.reset_at,
            minute_remaining: seen.rate.remaining,
            minute_limit: seen.rate.limit,
        }
    }
}

/// One pipeline's part of a run, and where it stands after it.
#[derive(Debug, serde::Serialize)]
pub struct PipelineSummary {
    pub pipeline: String,
    /// A run status, `deferred` (the run's request budget was spent before its
    /// turn), `skipped` (not due) or `not_run` (the run stopped before its turn).
    pub status: String,
    pub requests: u64,
    pub rows_written: u64,
    pub quarantined: u64,
    /// Records the service counted that this run did not store (see [`Shortfall`]).
    pub shortfall: u64,
    /// Answers that could not be read, kept in `_sync_quarantine`.
    pub unreadable: u64,
    /// Companies the pipeline's route does not serve (404), asked again a day later.
    pub not_served: Vec<String>,
    pub error: Option<String>,
    /// Checkpoints stored, and the newest one.
    pub checkpoints: u64,
    pub checkpoint: Option<String>,
    pub checkpoint_partition: Option<String>,
    pub checkpoint_updated_at: Option<DateTime<Utc>>,
    /// Work the next `sync --once` picks up at once (a quota wall, a
    /// budget, a share, a backfill not finished); `None` when it waits for
    /// its schedule.
    pub work_left: Option<crate::planner::Due>,
    pub next_run_at: Option<DateTime<Utc>>,
    pub backfill: Option<crate::planner::standing::BackfillStatus>,
}

impl RunSummary {
    /// The summary of `report`, which ended with `result`, completed with
    /// each pipeline's standing from `status` read after the run; `skipped`
    /// names the pipelines not due.
    pub fn new(
        report: &SyncReport,
        result: &Result<(), SyncError>,
        status: crate::planner::standing::Status,
        quota: QuotaLeft,
        (started_at, finished_at): (DateTime<Utc>, DateTime<Utc>),
        skipped: &[String],
    ) -> RunSummary {
        let mut pipelines: Vec<PipelineSummary> = Vec::new();
        for standing in status.pipelines {
            let runs: Vec<&PipelineOutcome> = report
                .outcomes
                .iter()
                .filter(|o| o.pipeline == standing.pipeline)
                .collect();
            // A pipeline cut by its share may run again in a later round: its
            // last turn says how it ended, the turns together what it spent.
            let status = match runs.last() {
                Some(last) => last.status.to_string(),
                None if report.deferred.contains(&standing.pipeline) => "deferred".to_owned(),
                None if skipped.contains(&standing.pipeline) => "skipped".to_owned(),
                // The run stopped before its turn (a refused key, a spent quota).
                None => "not_run".to_owned(),
            };
            pipelines.push(PipelineSummary {
                status,
                requests: runs.iter().map(|o| o.requests).sum(),
                rows_written: runs.iter().map(|o| o.rows_written).sum(),
                quarantined: runs.iter().map(|o| o.quarantined).sum(),
                shortfall: runs.last().map_or(0, |o| o.shortfall),
                unreadable: runs.iter().map(|o| o.unreadable).sum(),
                not_served: runs.last().map(|o| o.not_served.clone()).unwrap_or_default(),
                error: runs.last().and_then(|o| o.error.clone()),
                checkpoints: standing.checkpoints,
                checkpoint: standing.checkpoint,
                checkpoint_partition: standing.checkpoint_partition,
                checkpoint_updated_at: standing.checkpoint_updated_at,
                work_left: standing.due.runs().then_some(standing.due),
                next_run_at: standing.next_run_at,
                backfill: standing.backfill,
                pipeline: standing.pipeline,
            });
        }
        let worst = report.outcomes.iter().map(|o| o.status).max_by_key(|s| s.severity());
        RunSummary {
            run_id: report.run_id.clone(),
            started_at,
            finished_at,
            status: match result {
                Err(SyncError::QuotaExhausted { .. }) => RunStatus::QuotaExhausted.to_string(),
                Err(SyncError::Interrupted) => RunStatus::Interrupted.to_string(),
                Err(_) => RunStatus::Failed.to_string(),
                Ok(()) => worst.unwrap_or(RunStatus::Ok).to_string(),
            },
            exit_code: result.as_ref().err().map_or(0, SyncError::exit_code),
            error: result.as_ref().err().map(ToString::to_string),
            requests: pipelines.iter().map(|p| p.requests).sum(),
            rows_written: pipelines.iter().map(|p| p.rows_written).sum(),
            quarantined: pipelines.iter().map(|p| p.quarantined).sum(),
            shortfall: pipelines.iter().map(|p| p.shortfall).sum(),
            quota,
            pipelines,
            lake: None,
            peak_memory_mib: crate::metrics::peak_memory_kib().map(|kib| kib as f64 / 1024.0),
        }
    }
}

impl RunStatus {
    /// Orders statuses by how much they need attention, for a run's own status.
    fn severity(self) -> u8 {
        match self {
            RunStatus::Ok => 0,
            RunStatus::Partial => 1,
            RunStatus::Interrupted => 2,
            RunStatus::QuotaExhausted => 3,
            RunStatus::Failed => 4,
        }
    }
}
