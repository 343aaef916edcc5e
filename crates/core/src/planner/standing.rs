//! Where each pipeline stands, read from the warehouse's bookkeeping tables
//! without writing to them: its last run, checkpoint, freshness, backfill and
//! whether it is due. `fdsync status` prints it; a run decides from it what is
//! due and reports it in its summary.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use crate::bookkeeping::{BACKFILL_COMPLETE, BACKFILL_PARTITION, Backfill, STREAM_PARTITION, TapeBackfill};
use crate::error::SyncError;
use crate::feeds::{BackfillKind, Fetch};
use crate::pipeline::Pipeline;
use crate::planner::{self, Due, History};
use crate::sink::duckdb::reader::{BookkeepingReader, PartTexts, UnknownFieldSeen};
pub use crate::sink::duckdb::reader::{LastRun, QuotaStatus};
use crate::sink::lock::{Holder, WriterLock};

#[derive(Debug, Serialize)]
pub struct Status {
    pub warehouse: PathBuf,
    pub generated_at: DateTime<Utc>,
    /// The process that holds the warehouse for writing, if one runs.
    pub writer: Option<Holder>,
    pub pipelines: Vec<PipelineStatus>,
    /// The last window each key was seen with (`_sync_quota`).
    pub quota: Vec<QuotaStatus>,
    /// Fields the service sends that no column holds (`_sync_unknown_fields`).
    pub unknown_fields: Vec<UnknownFieldSeen>,
    /// What `fdsync verify` found last (`_sync_verify`).
    pub verification: Option<crate::sink::duckdb::reader::VerificationSeen>,
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
    /// Whether `sync --once` runs it now, and why (or when it will).
    pub due: Due,
    /// Companies its route refused (company, and what it said when),
    /// asked again a day after.
    pub not_served: Vec<(String, crate::bookkeeping::NotServedCursor)>,
}

/// How far a backfill has reached back, and what is left where that is
/// known: by the service's own count (the wire), or by the documents stored
/// (part texts). The news tapes have no total: only how far back they reached.
#[derive(Debug, Default, Serialize)]
pub struct BackfillStatus {
    pub complete: bool,
    /// The oldest day from which every later record is stored.
    pub reached: Option<NaiveDate>,
    /// Records known to be left.
    pub records_left: Option<u64>,
    /// The requests those take.
    pub requests_left: Option<u64>,
    /// How much of the whole is stored, where the whole is known.
    pub share: Option<Share>,
}

/// `done` of `total` `unit`s.
#[derive(Debug, Serialize)]
pub struct Share {
    pub done: u64,
    pub total: u64,
    pub unit: &'static str,
}

/// Reads the status of `pipelines` from the warehouse at `path`. A warehouse
/// that does not exist yet is a status too: nothing has run.
///
/// # Errors
/// When the file exists but cannot be read, or a writer holds it for longer
/// than a status can wait.
pub fn read(path: &Path, pipelines: &[Pipeline], now: DateTime<Utc>) -> Result<Status, SyncError> {
    let writer = WriterLock::holder_of(path);
    let reader = if path.exists() {
        Some(BookkeepingReader::open(path, writer.as_ref())?)
    } else {
        None
    };
    of(path, writer, reader.as_ref(), pipelines, now)
}

/// The status of `pipelines` as `reader` sees the warehouse at `path`
/// (`None`: nothing written yet); the writer itself reads it on its own
/// connection.
///
/// # Errors
/// When the bookkeeping tables cannot be read.
pub fn of(
    path: &Path,
    writer: Option<Holder>,
    reader: Option<&BookkeepingReader>,
    pipelines: &[Pipeline],
    now: DateTime<Utc>,
) -> Result<Status, SyncError> {
    let mut status = Status {
        warehouse: path.to_owned(),
        generated_at: now,
        writer,
        pipelines: Vec::new(),
        quota: Vec::new(),
        unknown_fields: Vec::new(),
        verification: None,
    };
    let (runs, oks, checkpoints, mut not_served) = match reader {
        Some(reader) => {
            status.quota = reader.quota()?;
            status.unknown_fields = reader.unknown_fields()?;
            status.verification = reader.verification(now)?;
            (
                reader.last_runs()?,
                reader.last_ok()?,
                reader.newest_checkpoints()?,
                reader.not_served()?,
            )
        }
        None => Default::default(),
    };
    let mut runs = runs;
    let mut checkpoints = checkpoints;
    let times = match reader {
        Some(reader) => reader.run_times()?,
        None => HashMap::new(),
    };
    for p in pipelines {
        let backfill = match reader {
            Some(reader) => backfill_of(p, reader)?,
            None => None,
        };
        let history = history_of(p, &runs, &times, backfill.as_ref(), now);
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
            backfill,
            due: planner::due(p, &history, now),
            not_served: not_served.remove(&p.name).unwrap_or_default(),
        });
    }
    Ok(status)
}

/// When each pipeline of the warehouse behind `reader` is due, as `sync
/// --once` decides.
///
/// # Errors
/// When the bookkeeping tables cannot be read.
pub fn due(reader: &BookkeepingReader, pipelines: &[Pipeline], now: DateTime<Utc>) -> Result<Vec<Due>, SyncError> {
    let (runs, times) = (reader.last_runs()?, reader.run_times()?);
    pipelines
        .iter()
        .map(|p| {
            let backfill = backfill_of(p, reader)?;
            Ok(planner::due(
                p,
                &history_of(p, &runs, &times, backfill.as_ref(), now),
                now,
            ))
        })
        .collect()
}

/// What decides whether `p` is due, from the run log and its backfill.
fn history_of(
    p: &Pipeline,
    runs: &HashMap<String, LastRun>,
    times: &HashMap<String, planner::RunTimes>,
    backfill: Option<&BackfillStatus>,
    now: DateTime<Utc>,
) -> History {
    History {
        times: times.get(&p.name).copied().unwrap_or_default(),
        last: runs.get(&p.name).map(|r| (r.status.clone(), r.resumes)),
        backfill_left: backfill.is_some_and(|b| backfill_left(p, b, now)),
    }
}

/// Whether a tape's or the wire's backfill has further to go: not complete,
/// and not past its horizon. Texts go by their own schedule.
fn backfill_left(p: &Pipeline, b: &BackfillStatus, now: DateTime<Utc>) -> bool {
    let horizon = p.params.horizon(now).map(|h| h.date_naive());
    p.feed.fetch.backfill() == Some(BackfillKind::Dated)
        && !b.complete
        && b.reached.is_none_or(|r| horizon.is_none_or(|h| r > h))
}

/// A pipeline's backfill, read as its fetch engine keeps it; `None` for an
/// engine without one, or one that has not started.
pub fn backfill_of(p: &Pipeline, reader: &BookkeepingReader) -> Result<Option<BackfillStatus>, SyncError> {
    let page = u64::from(p.params.page_limit.unwrap_or(200)).max(1);
    let status = match &p.feed.fetch {
        Fetch::OffsetWindows(windows) => {
            let checkpoints = reader.checkpoints_of(&p.name)?;
            let Some((_, cursor)) = checkpoints.iter().find(|(part, _)| part == BACKFILL_PARTITION) else {
                return Ok(None);
            };
            if cursor == BACKFILL_COMPLETE {
                return Ok(Some(BackfillStatus {
                    complete: true,
                    ..Default::default()
                }));
            }
            let Some(at) = Backfill::parse(cursor) else {
                return Ok(None);
            };
            let stored = reader.count_dated_since(windows.stored, at.reached)?;
            BackfillStatus {
                complete: false,
                reached: Some(at.reached),
                records_left: at.left,
                requests_left: at.left.map(|n| n.div_ceil(page)),
                share: at.left.map(|left| Share {
                    done: stored,
                    total: stored + left,
                    unit: "records",
                }),
            }
        }
        Fetch::Cursor(_) | Fetch::CompanyCursor(_) | Fetch::SearchCursor(_) => {
            let tapes: Vec<TapeBackfill> = reader
                .checkpoints_of(&p.name)?
                .iter()
                .filter(|(part, _)| part != STREAM_PARTITION)
                .filter_map(|(_, cursor)| TapeBackfill::parse(cursor))
                .collect();
            if tapes.is_empty() {
                return Ok(None);
            }
            let done = tapes.iter().filter(|t| t.complete).count() as u64;
            // Every tape holds everything since the latest of the days they reached.
            let reached = tapes
                .iter()
                .filter(|t| !t.complete)
                .map(|t| t.reached.map(|r| r.date_naive()))
                .max()
                .flatten();
            BackfillStatus {
                complete: done == tapes.len() as u64,
                reached,
                share: match p.feed.fetch {
                    Fetch::CompanyCursor(_) => Some("company tapes"),
                    Fetch::SearchCursor(_) => Some("search tapes"),
                    _ => None,
                }
                .map(|unit| Share {
                    done,
                    total: tapes.len() as u64,
                    unit,
                }),
                ..Default::default()
            }
        }
        Fetch::ParentTexts(texts) => {
            part_texts(reader.part_texts(texts.parent, texts.parts, true, texts.texts, None)?)
        }
        Fetch::DocumentsAndSections(docs) => {
            part_texts(reader.part_texts(docs.documents, docs.listed, false, docs.parts, None)?)
        }
        // Engines without a backfill: each run reads what the service has now
        // (details: what the day's budget allows).
        Fetch::Details(_)
        | Fetch::Single(_)
        | Fetch::PerCompany(_)
        | Fetch::Universe(_)
        | Fetch::PerCountry(_)
        | Fetch::CompanyIndex(_)
        | Fetch::Layers(_) => return Ok(None),
    };
    Ok(Some(status))
}

/// The backfill of part texts, one request each.
fn part_texts(t: PartTexts) -> BackfillStatus {
    let left = t.listed - t.stored.min(t.listed);
    BackfillStatus {
        complete: left == 0,
        reached: t.newest_missing.and_then(|d| d.succ_opt()),
        records_left: Some(left),
        requests_left: Some(left),
        share: Some(Share {
            done: t.stored,
            total: t.listed,
            unit: "texts",
        }),
    }
}
