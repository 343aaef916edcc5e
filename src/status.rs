//! `fdsync status`: per pipeline its last run, rows, checkpoint and freshness,
//! and the quota the service reported last, read from the warehouse's
//! bookkeeping tables without writing to it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use duckdb::{AccessMode, Connection};
use serde::Serialize;

use crate::pipeline::Pipeline;
use crate::sink::duckdb::held_by_another_process;
use crate::sink::lock::{Holder, WriterLock};
use crate::sync::SyncError;

/// How long `status` waits for a writer to let go of the file (it does after
/// a second idle).
const BUSY_WAIT: Duration = Duration::from_secs(15);

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
}

#[derive(Debug, Serialize)]
pub struct LastRun {
    pub run_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: String,
    pub requests: i64,
    pub rows_written: i64,
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct QuotaStatus {
    /// A one-way fingerprint of the key, never the key.
    pub key_id: String,
    pub observed_at: DateTime<Utc>,
    pub window: Option<String>,
    pub limit: Option<i64>,
    pub remaining: Option<i64>,
    pub reset_at: Option<DateTime<Utc>>,
    pub rate_limit: Option<i64>,
    pub rate_remaining: Option<i64>,
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
    let (runs, oks, checkpoints) = if path.exists() {
        let conn = open_read_only(path, status.writer.as_ref())?;
        status.quota = quota(&conn)?;
        (last_runs(&conn)?, last_ok(&conn)?, newest_checkpoints(&conn)?)
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
                p.schedule.after(&since).next()
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
        });
    }
    Ok(status)
}

fn open_read_only(path: &Path, writer: Option<&Holder>) -> Result<Connection, SyncError> {
    let started = Instant::now();
    loop {
        let config = duckdb::Config::default()
            .access_mode(AccessMode::ReadOnly)
            .map_err(|e| SyncError::Other(e.to_string()))?;
        match Connection::open_with_flags(path, config) {
            Ok(conn) => return Ok(conn),
            Err(e) if held_by_another_process(&e.to_string()) && started.elapsed() < BUSY_WAIT => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => {
                let who = writer.map_or_else(|| "another process".to_owned(), |h| h.to_string());
                return Err(SyncError::Other(format!(
                    "cannot read warehouse {}: {e}. {who} has kept it open for writing for over {} s; \
                     try again when it is idle (see docs/operations.md)",
                    path.display(),
                    BUSY_WAIT.as_secs()
                )));
            }
        }
    }
}

fn sql(context: &'static str) -> impl Fn(duckdb::Error) -> SyncError {
    move |e| SyncError::Other(format!("reading the warehouse ({context}): {e}"))
}

fn last_runs(conn: &Connection) -> Result<HashMap<String, LastRun>, SyncError> {
    let mut stmt = conn
        .prepare(
            "SELECT pipeline, run_id, started_at, finished_at, status, requests, rows_written, error
             FROM _sync_runs QUALIFY row_number() OVER (PARTITION BY pipeline ORDER BY started_at DESC) = 1",
        )
        .map_err(sql("last runs"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                LastRun {
                    run_id: r.get(1)?,
                    started_at: r.get(2)?,
                    finished_at: r.get(3)?,
                    status: r.get(4)?,
                    requests: r.get::<_, Option<i64>>(5)?.unwrap_or(0),
                    rows_written: r.get::<_, Option<i64>>(6)?.unwrap_or(0),
                    error: r.get(7)?,
                },
            ))
        })
        .map_err(sql("last runs"))?;
    rows.collect::<Result<_, _>>().map_err(sql("last runs"))
}

fn last_ok(conn: &Connection) -> Result<HashMap<String, DateTime<Utc>>, SyncError> {
    let mut stmt = conn
        .prepare("SELECT pipeline, max(finished_at) FROM _sync_runs WHERE status = 'ok' GROUP BY pipeline")
        .map_err(sql("last ok runs"))?;
    let rows = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .map_err(sql("last ok runs"))?;
    rows.collect::<Result<_, _>>().map_err(sql("last ok runs"))
}

type Newest = (String, String, DateTime<Utc>);

/// Per pipeline: how many partitions, and the most recently moved one.
fn newest_checkpoints(conn: &Connection) -> Result<HashMap<String, (u64, Option<Newest>)>, SyncError> {
    let mut stmt = conn
        .prepare(
            "SELECT pipeline, count(*) OVER (PARTITION BY pipeline), \"partition\", cursor, updated_at
             FROM _sync_checkpoints
             QUALIFY row_number() OVER (PARTITION BY pipeline ORDER BY updated_at DESC, \"partition\") = 1",
        )
        .map_err(sql("checkpoints"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                (r.get::<_, i64>(1)? as u64, Some((r.get(2)?, r.get(3)?, r.get(4)?))),
            ))
        })
        .map_err(sql("checkpoints"))?;
    rows.collect::<Result<_, _>>().map_err(sql("checkpoints"))
}

fn quota(conn: &Connection) -> Result<Vec<QuotaStatus>, SyncError> {
    let mut stmt = conn
        .prepare(
            "SELECT key_id, observed_at, quota_window, quota_limit, quota_remaining, quota_reset_at,
                    rate_limit, rate_remaining
             FROM _sync_quota ORDER BY observed_at DESC",
        )
        .map_err(sql("quota"))?;
    let rows = stmt
        .query_map([], |r| {
            Ok(QuotaStatus {
                key_id: r.get(0)?,
                observed_at: r.get(1)?,
                window: r.get(2)?,
                limit: r.get(3)?,
                remaining: r.get(4)?,
                reset_at: r.get(5)?,
                rate_limit: r.get(6)?,
                rate_remaining: r.get(7)?,
            })
        })
        .map_err(sql("quota"))?;
    rows.collect::<Result<_, _>>().map_err(sql("quota"))
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

fn shorten(text: &str) -> String {
    const MAX: usize = 90;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}
