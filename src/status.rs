//! `fdsync status`: per pipeline its last run, rows, checkpoint and freshness,
//! and the quota the service reported last, read from the warehouse's
//! bookkeeping tables without writing to it.

use std::io::Write;
use std::path::{Path, PathBuf};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::pipeline::Pipeline;
use crate::sink::duckdb::reader::BookkeepingReader;
pub use crate::sink::duckdb::reader::{LastRun, QuotaStatus};
use crate::sink::lock::{Holder, WriterLock};
use crate::sync::SyncError;

#[derive(Debug, Serialize)]
pub struct Status {
    pub warehouse: PathBuf,
    pub generated_at: DateTime<Utc>,
    /// The process that holds the warehouse for writing, if one runs.
    pub writer: Option<Holder>,
    pub pipelines: Vec<PipelineStatus>,
    /// The last window each key was seen with (`_sync_quota`).
    pub quota: Vec<QuotaStatus>,
}

#[derive(Debug, Serialize)]
pub struct PipelineStatus {
    pub pipeline: String,
    pub schedule: String,
    pub last_run: Option<LastRun>,
    pub last_ok_at: Option<DateTime<Utc>>,
    /// Seconds since the last run that ended ok: how stale the data may be.
    pub freshness_secs: Option<i64>,
    pub checkpoints: u64,
    /// The cursor itself when there is one partition; else the newest partition's.
    pub checkpoint: Option<String>,
    pub checkpoint_partition: Option<String>,
    pub checkpoint_updated_at: Option<DateTime<Utc>>,
    /// When the schedule fires next.
    pub next_run_at: Option<DateTime<Utc>>,
    /// A backfill's progress, where the pipeline has one.
    pub backfill: Option<BackfillStatus>,
}

/// How far a backfill has reached back, and what is left by the service's
/// own count.
#[derive(Debug, Serialize)]
pub struct BackfillStatus {
    pub complete: bool,
    /// The oldest day from which every later record is stored.
    pub reached: Option<chrono::NaiveDate>,
    /// Older records the service counted when the backfill got there.
    pub records_left: Option<u64>,
    /// Those records in pages of the pipeline's page size: the requests left.
    pub requests_left: Option<u64>,
}

/// Reads the status of `pipelines` from the warehouse at `path`. A warehouse
/// that does not exist yet is a status too: nothing has run.
///
/// # Errors
/// When the file exists but cannot be read, or a writer holds it for longer
/// than a status can wait.
pub fn read(path: &Path, pipelines: &[Pipeline], now: DateTime<Utc>) -> Result<Status, SyncError> {
    let writer = WriterLock::holder_of(path);
    let mut status = Status {
        warehouse: path.to_owned(),
        generated_at: now,
        writer,
        pipelines: Vec::new(),
        quota: Vec::new(),
    };
    let (runs, oks, checkpoints, backfills) = if path.exists() {
        let reader = BookkeepingReader::open(path, status.writer.as_ref())?;
        status.quota = reader.quota()?;
        (
            reader.last_runs()?,
            reader.last_ok()?,
            reader.newest_checkpoints()?,
            reader.checkpoints_in(crate::sync::BACKFILL_PARTITION)?,
        )
    } else {
        Default::default()
    };
    let mut runs = runs;
    let mut checkpoints = checkpoints;
    for p in pipelines {
        let last_ok_at = oks.get(&p.name).copied();
        let (count, newest) = checkpoints.remove(&p.name).unwrap_or((0, None));
        let last_run = runs.remove(&p.name);
        let since = last_run.as_ref().map_or(now, |r| r.started_at);
        status.pipelines.push(PipelineStatus {
            pipeline: p.name.clone(),
            schedule: p.schedule_text.clone(),
            next_run_at: if last_run.is_some() {
                p.schedule.next_after(&since)
            } else {
                Some(now)
            },
            last_run,
            last_ok_at,
            freshness_secs: last_ok_at.map(|t| (now - t).num_seconds()),
            checkpoints: count,
            checkpoint_partition: newest.as_ref().map(|c| c.0.clone()),
            checkpoint: newest.as_ref().map(|c| c.1.clone()),
            checkpoint_updated_at: newest.map(|c| c.2),
            backfill: backfills.get(&p.name).map(|cursor| {
                let at = crate::sync::Backfill::parse(cursor);
                let page = u64::from(p.params.page_limit.unwrap_or(200)).max(1);
                BackfillStatus {
                    complete: cursor == crate::sync::BACKFILL_COMPLETE,
                    reached: at.map(|b| b.reached),
                    records_left: at.and_then(|b| b.left),
                    requests_left: at.and_then(|b| b.left).map(|n| n.div_ceil(page)),
                }
            }),
        });
    }
    Ok(status)
}

fn ts(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".into(), |t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

fn age(secs: Option<i64>) -> String {
    match secs {
        None => "never".into(),
        Some(s) if s < 120 => format!("{s}s ago"),
        Some(s) if s < 7200 => format!("{}m ago", s / 60),
        Some(s) if s < 172_800 => format!("{}h ago", s / 3600),
        Some(s) => format!("{}d ago", s / 86_400),
    }
}

/// The status as a table for people.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_text(out: &mut impl Write, status: &Status) -> std::io::Result<()> {
    writeln!(out, "warehouse {}", status.warehouse.display())?;
    match &status.writer {
        Some(h) => writeln!(out, "writer    {h}")?,
        None => writeln!(out, "writer    none running")?,
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<16} {:<15} {:>9} {:>7} {:>10}  {:<12} {:<21} checkpoint",
        "pipeline", "last run", "status", "reqs", "rows", "fresh", "next run"
    )?;
    for p in &status.pipelines {
        let (when, state, reqs, rows) = match &p.last_run {
            Some(r) => (
                age(Some((status.generated_at - r.started_at).num_seconds())),
                r.status.clone(),
                r.requests.to_string(),
                r.rows_written.to_string(),
            ),
            None => ("never".into(), "-".into(), "-".into(), "-".into()),
        };
        let checkpoint = match (&p.checkpoint, p.checkpoints) {
            (None, _) => "-".to_owned(),
            (Some(c), 1) => shorten(c),
            (Some(_), n) => format!(
                "{n} partitions, last moved {}",
                age(p.checkpoint_updated_at.map(|t| (status.generated_at - t).num_seconds()))
            ),
        };
        writeln!(
            out,
            "{:<16} {:<15} {:>9} {:>7} {:>10}  {:<12} {:<21} {checkpoint}",
            p.pipeline,
            when,
            state,
            reqs,
            rows,
            age(p.freshness_secs),
            ts(p.next_run_at)
        )?;
        if let Some(error) = p.last_run.as_ref().and_then(|r| r.error.as_deref()) {
            writeln!(out, "{:<16} ! {}", "", shorten(error))?;
        }
        if let Some(b) = &p.backfill {
            writeln!(out, "{:<16} backfill {}", "", backfill_text(b, &status.quota))?;
        }
    }
    writeln!(out)?;
    if status.quota.is_empty() {
        writeln!(out, "quota     not seen yet")?;
    }
    for q in &status.quota {
        writeln!(
            out,
            "quota     key {}: {} of {} left in the {} window (resets {}); {} of {} left this minute; seen {}",
            q.key_id,
            q.remaining.map_or("?".into(), |n| n.to_string()),
            q.limit.map_or("?".into(), |n| n.to_string()),
            q.window.as_deref().unwrap_or("quota"),
            ts(q.reset_at),
            q.rate_remaining.map_or("?".into(), |n| n.to_string()),
            q.rate_limit.map_or("?".into(), |n| n.to_string()),
            ts(Some(q.observed_at)),
        )?;
    }
    Ok(())
}

/// `reached 2026-10-01; 3400 older records left, 17 requests (at the plan's
/// 250 a day: about 1 days, if it had them all)`, or complete.
fn backfill_text(b: &BackfillStatus, quota: &[QuotaStatus]) -> String {
    if b.complete {
        return "complete: everything the service serves is stored".into();
    }
    let mut text = b.reached.map_or_else(|| "started".into(), |d| format!("reached {d}"));
    if let (Some(records), Some(requests)) = (b.records_left, b.requests_left) {
        text.push_str(&format!("; {records} older records left, {requests} requests"));
        if let Some((limit, window)) = quota
            .first()
            .and_then(|q| Some((u64::try_from(q.limit?).ok()?, q.window.clone()?)))
        {
            let windows = requests.div_ceil(limit.max(1));
            text.push_str(&format!(
                " (at the plan's {limit} a {window}: about {windows} {window}s, if it had them all)"
            ));
        }
    }
    text
}

fn shorten(text: &str) -> String {
    const MAX: usize = 90;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}
