//! The one reader of the warehouse's bookkeeping tables and run log: `fdsync
//! status` opens the file with it without writing, waiting a while for a
//! writer that holds it to let go; a run reads on its own connection
//! ([`super::DuckDbSink::bookkeeping`]).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, NaiveDate, Utc};
use duckdb::{AccessMode, Connection};
use serde::Serialize;

use super::{held_by_another_process, ident, sql_err};
use crate::feeds::{Stored, StoredParts};
use crate::sink::SinkError;
use crate::sink::lock::Holder;
use crate::tables::TableDef;

/// How long a reader waits for a writer to let go of the file (it does after
/// a second idle).
const BUSY_WAIT: Duration = Duration::from_secs(15);

/// [`BookkeepingReader::part_texts`].
#[derive(Debug, Clone, Copy)]
pub struct PartTexts {
    pub listed: u64,
    pub stored: u64,
    pub newest_missing: Option<NaiveDate>,
}

/// A field the service sent that no column holds (`_sync_unknown_fields`).
#[derive(Debug, Clone, Serialize)]
pub struct UnknownFieldSeen {
    pub route: String,
    pub field: String,
    pub example: Option<String>,
    pub first_seen_at: DateTime<Utc>,
    pub last_seen_at: DateTime<Utc>,
}

/// What `fdsync verify` found last, and how much of the warehouse it has
/// compared lately (`_sync_verify`).
#[derive(Debug, Clone, Serialize)]
pub struct VerificationSeen {
    pub run_id: String,
    pub verified_at: DateTime<Utc>,
    /// Companies (per pipeline) compared in the 30 days before the status.
    pub companies_30d: u64,
    /// The last verification, per table.
    pub tables: Vec<VerifiedTableSeen>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VerifiedTableSeen {
    pub table: String,
    pub companies: u64,
    pub equal: u64,
    pub changed: u64,
    pub withdrawn: u64,
    pub missing: u64,
}

/// A pipeline's newest `_sync_runs` row.
#[derive(Debug, Serialize)]
pub struct LastRun {
    pub run_id: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub status: String,
    pub requests: i64,
    pub rows_written: i64,
    pub error: Option<String>,
    /// Records the service counted that the run did not store (0: complete).
    pub shortfall: i64,
    /// Whether it stopped with work the next run picks up at once.
    pub resumes: bool,
}

/// A key's `_sync_quota` row: the last window the service reported.
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

/// A pipeline's most recently moved checkpoint: partition, cursor, when.
pub type NewestCheckpoint = (String, String, DateTime<Utc>);

pub struct BookkeepingReader {
    conn: Connection,
}

impl BookkeepingReader {
    /// Opens the warehouse at `path` read-only; `writer`, when known, is
    /// named if it keeps the file for longer than a reader waits.
    ///
    /// # Errors
    /// When the file cannot be opened, or stays held by a writer.
    pub fn open(path: &Path, writer: Option<&Holder>) -> Result<BookkeepingReader, SinkError> {
        let started = Instant::now();
        let open_err = |message: String| SinkError::Open {
            path: path.to_owned(),
            message,
        };
        loop {
            let config = duckdb::Config::default()
                .access_mode(AccessMode::ReadOnly)
                .map_err(|e| open_err(e.to_string()))?;
            match Connection::open_with_flags(path, config) {
                Ok(conn) => return Ok(BookkeepingReader { conn }),
                Err(e) if held_by_another_process(&e.to_string()) && started.elapsed() < BUSY_WAIT => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => {
                    let who = writer.map_or_else(|| "another process".to_owned(), |h| h.to_string());
                    return Err(open_err(format!(
                        "{e}. {who} has kept it open for writing for over {} s; try again when it is idle \
                         (see docs/operations.md)",
                        BUSY_WAIT.as_secs()
                    )));
                }
            }
        }
    }

    /// A reader on a connection the caller already has (a writer's own).
    pub fn on(conn: Connection) -> BookkeepingReader {
        BookkeepingReader { conn }
    }

    /// When each pipeline last started a run, and last started one that ended `ok`.
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn run_times(&self) -> Result<HashMap<String, crate::bookkeeping::RunTimes>, SinkError> {
        run_times(&self.conn)
    }

    /// When each pipeline last started, from the run log.
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn last_started(&self) -> Result<HashMap<String, DateTime<Utc>>, SinkError> {
        let context = ("_sync_runs", "reading the last runs");
        let mut stmt = self
            .conn
            .prepare("SELECT pipeline, max(started_at) FROM _sync_runs GROUP BY pipeline")
            .map_err(sql_err(context.0, context.1))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, DateTime<Utc>>(1)?)))
            .map_err(sql_err(context.0, context.1))?;
        rows.collect::<Result<HashMap<_, _>, _>>()
            .map_err(sql_err(context.0, context.1))
    }

    /// The requests of `pipeline`'s ten newest runs that ended `ok`, its
    /// first run left out (a first sync reads the backfill too).
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn requests_of_recent_runs(&self, pipeline: &str) -> Result<Vec<u64>, SinkError> {
        let err = || sql_err("_sync_runs", "reading the requests of recent runs");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT requests FROM (
                    SELECT requests, status, row_number() OVER (ORDER BY started_at) AS nth
                    FROM _sync_runs WHERE pipeline = ?)
                 WHERE status = 'ok' AND nth > 1 ORDER BY nth DESC LIMIT 10",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([pipeline], |r| {
                Ok(r.get::<_, Option<i64>>(0)?.unwrap_or(0).max(0) as u64)
            })
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// Each pipeline's newest run.
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn last_runs(&self) -> Result<HashMap<String, LastRun>, SinkError> {
        let err = || sql_err("_sync_runs", "reading the last runs");
        // A warehouse no writer of this version has opened has no shortfall yet.
        let has = |column: &str| -> Result<bool, SinkError> {
            self.conn
                .query_row(
                    "SELECT count(*) > 0 FROM duckdb_columns() WHERE table_name = '_sync_runs' AND column_name = ?",
                    [column],
                    |r| r.get(0),
                )
                .map_err(err())
        };
        let shortfall = if has("shortfall")? { "shortfall" } else { "0" };
        // Runs logged before the `resumes` column said so in their status or
        // in the words of their error.
        let legacy = format!(
            "(status IN ('quota_exhausted', 'interrupted') OR coalesce(contains(error, '{}'), false))",
            crate::bookkeeping::RESUMES.replace('\'', "''")
        );
        let resumes = if has("resumes")? {
            format!("coalesce(resumes, {legacy})")
        } else {
            legacy
        };
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT pipeline, run_id, started_at, finished_at, status, requests, rows_written, error, {shortfall}, {resumes}
                 FROM _sync_runs QUALIFY row_number() OVER (PARTITION BY pipeline ORDER BY started_at DESC) = 1"
            ))
            .map_err(err())?;
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
                        shortfall: r.get::<_, Option<i64>>(8)?.unwrap_or(0),
                        resumes: r.get::<_, Option<bool>>(9)?.unwrap_or(false),
                    },
                ))
            })
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// When each pipeline last finished a run `ok`.
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn last_ok(&self) -> Result<HashMap<String, DateTime<Utc>>, SinkError> {
        let err = || sql_err("_sync_runs", "reading the last ok runs");
        let mut stmt = self
            .conn
            .prepare("SELECT pipeline, max(finished_at) FROM _sync_runs WHERE status = 'ok' GROUP BY pipeline")
            .map_err(err())?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// Per pipeline: how many partitions, and the most recently moved one.
    ///
    /// # Errors
    /// When `_sync_checkpoints` cannot be read.
    pub fn newest_checkpoints(&self) -> Result<HashMap<String, (u64, Option<NewestCheckpoint>)>, SinkError> {
        let err = || sql_err("_sync_checkpoints", "reading the checkpoints");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT pipeline, count(*) OVER (PARTITION BY pipeline), \"partition\", cursor, updated_at
                 FROM _sync_checkpoints
                 QUALIFY row_number() OVER (PARTITION BY pipeline ORDER BY updated_at DESC, \"partition\") = 1",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    (r.get::<_, i64>(1)? as u64, Some((r.get(2)?, r.get(3)?, r.get(4)?))),
                ))
            })
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// Per pipeline, the companies its route refused and what it said,
    /// where no checkpoint of the company's own moved since: what `fdsync
    /// status` reports as not served.
    ///
    /// # Errors
    /// When `_sync_checkpoints` cannot be read.
    pub fn not_served(&self) -> Result<HashMap<String, Vec<(String, crate::bookkeeping::NotServedCursor)>>, SinkError> {
        use crate::bookkeeping::{NOT_SERVED, NOT_SERVED_404, NotServedCursor};
        let err = || sql_err("_sync_checkpoints", "reading the companies not served");
        let mut stmt = self
            .conn
            .prepare(&format!(
                "WITH n AS (SELECT pipeline, regexp_replace(\"partition\", '^({NOT_SERVED}|{NOT_SERVED_404})', '') AS company,
                        cursor, updated_at FROM _sync_checkpoints
                    WHERE starts_with(\"partition\", '{NOT_SERVED}') OR starts_with(\"partition\", '{NOT_SERVED_404}')
                    QUALIFY row_number() OVER (PARTITION BY pipeline, company ORDER BY updated_at DESC) = 1)
                 SELECT n.pipeline, n.company, n.cursor FROM n
                 WHERE NOT EXISTS (SELECT 1 FROM _sync_checkpoints o WHERE o.pipeline = n.pipeline
                       AND o.\"partition\" = n.company AND o.updated_at > n.updated_at)
                 ORDER BY 1, 2"
            ))
            .map_err(err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?))
            })
            .map_err(err())?;
        let mut out: HashMap<String, Vec<(String, NotServedCursor)>> = HashMap::new();
        for row in rows {
            let (pipeline, company, cursor) = row.map_err(err())?;
            if let Some(said) = NotServedCursor::parse(&cursor) {
                out.entry(pipeline).or_default().push((company, said));
            }
        }
        Ok(out)
    }

    /// Every checkpoint of `pipeline`: (partition, cursor).
    ///
    /// # Errors
    /// When `_sync_checkpoints` cannot be read.
    pub fn checkpoints_of(&self, pipeline: &str) -> Result<Vec<(String, String)>, SinkError> {
        let err = || sql_err("_sync_checkpoints", "reading the checkpoints");
        let mut stmt = self
            .conn
            .prepare("SELECT \"partition\", cursor FROM _sync_checkpoints WHERE pipeline = ?")
            .map_err(err())?;
        let rows = stmt
            .query_map([pipeline], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// Every checkpoint (of `pipeline` only, when named), by pipeline and
    /// partition: partition, cursor, when it last moved.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn checkpoints(&self, pipeline: Option<&str>) -> Result<Vec<(String, NewestCheckpoint)>, SinkError> {
        let err = || sql_err("_sync_checkpoints", "reading the checkpoints");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT pipeline, \"partition\", cursor, updated_at FROM _sync_checkpoints \
                 WHERE ? IS NULL OR pipeline = ? ORDER BY pipeline, \"partition\"",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([pipeline, pipeline], |r| {
                Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?, r.get(3)?)))
            })
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// How many documents of `stored` are dated `since` or later.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn count_dated_since(&self, stored: &Stored, since: NaiveDate) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT count(*) FROM {} WHERE {} >= ?::DATE",
            ident(stored.table.name),
            ident(stored.dated)
        );
        self.conn
            .query_row(&sql, [since.to_string()], |r| r.get(0))
            .map_err(sql_err(stored.table.name, "counting stored documents"))
    }

    /// How many of `table`'s rows match `lacking`, and how many of those
    /// arrived (`arrived`) since `since`: the forecast of a details engine.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn lacking_count(
        &self,
        table: &TableDef,
        lacking: &str,
        arrived: &str,
        since: DateTime<Utc>,
    ) -> Result<(u64, u64), SinkError> {
        let sql = format!(
            "SELECT count(*), count(*) FILTER (WHERE {arrived} >= ?::TIMESTAMPTZ) FROM {table} WHERE ({lacking})",
            arrived = ident(arrived),
            table = ident(table.name),
        );
        let (all, recent): (i64, i64) = self
            .conn
            .query_row(&sql, [since.to_rfc3339()], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(sql_err(table.name, "counting rows lacking details"))?;
        Ok((all.max(0) as u64, recent.max(0) as u64))
    }

    /// The part texts of the universe's stored documents (dated `since` or later, with one): how
    /// many are listed, how many stored, and the newest date of a document with one missing. A
    /// document listing no part has one uncoded part ('') when
    /// `uncoded` is set, none otherwise.
    ///
    /// # Errors
    /// When a table cannot be read.
    pub fn part_texts(
        &self,
        documents: &Stored,
        listed: &str,
        uncoded: bool,
        texts: &StoredParts,
        since: Option<NaiveDate>,
    ) -> Result<PartTexts, SinkError> {
        let parts = if uncoded {
            format!(
                "CASE WHEN len({l}) = 0 THEN ['']::VARCHAR[] ELSE {l} END",
                l = ident(listed)
            )
        } else {
            ident(listed)
        };
        let sql = format!(
            "WITH wanted AS (
                SELECT {id} AS id, {dated} AS dated, unnest({parts}) AS part FROM {documents}
                WHERE {company} IN (SELECT company_key FROM companies) AND {dated} >= ?::DATE),
             got AS (
                SELECT w.dated, t.{text_id} IS NOT NULL AS stored FROM wanted w
                LEFT JOIN {texts} t ON t.{text_id} = w.id AND t.{text_part} = w.part)
             SELECT count(*), count(*) FILTER (WHERE stored), max(dated) FILTER (WHERE NOT stored) FROM got",
            id = ident(documents.id),
            dated = ident(documents.dated),
            documents = ident(documents.table.name),
            company = ident(documents.company),
            texts = ident(texts.table.name),
            text_id = ident(texts.id),
            text_part = ident(texts.part),
        );
        let since = since.map_or_else(|| "-infinity".to_owned(), |d| d.to_string());
        self.conn
            .query_row(&sql, [since], |r| {
                Ok(PartTexts {
                    listed: r.get(0)?,
                    stored: r.get(1)?,
                    newest_missing: r.get(2)?,
                })
            })
            .map_err(sql_err(texts.table.name, "counting stored part texts"))
    }

    /// The last window each key was seen with, newest first.
    ///
    /// # Errors
    /// When `_sync_quota` cannot be read.
    pub fn quota(&self) -> Result<Vec<QuotaStatus>, SinkError> {
        let err = || sql_err("_sync_quota", "reading the quota ledger");
        let mut stmt = self
            .conn
            .prepare(
                "SELECT key_id, observed_at, quota_window, quota_limit, quota_remaining, quota_reset_at,
                        rate_limit, rate_remaining
                 FROM _sync_quota ORDER BY observed_at DESC",
            )
            .map_err(err())?;
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
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }

    /// Whether the warehouse has table `name`: one an earlier release wrote
    /// may lack the newer bookkeeping tables.
    fn has_table(&self, name: &str) -> duckdb::Result<bool> {
        self.conn.query_row(
            "SELECT count(*) > 0 FROM duckdb_tables() WHERE table_name = ?",
            [name],
            |r| r.get(0),
        )
    }

    /// What `fdsync verify` found last, and the companies it compared in the
    /// 30 days before `now`; `None` before any verification.
    ///
    /// # Errors
    /// When `_sync_verify` cannot be read.
    pub fn verification(&self, now: DateTime<Utc>) -> Result<Option<VerificationSeen>, SinkError> {
        let err = || sql_err("_sync_verify", "reading what verification found");
        if !self.has_table("_sync_verify").map_err(err())? {
            return Ok(None);
        }
        let last: Option<(String, DateTime<Utc>)> = self
            .conn
            .query_row(
                "SELECT run_id, max(verified_at) FROM _sync_verify GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 1",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .map(Some)
            .or_else(|e| match e {
                duckdb::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })
            .map_err(err())?;
        let Some((run_id, verified_at)) = last else {
            return Ok(None);
        };
        let since = (now - chrono::Duration::days(30)).to_rfc3339();
        let companies_30d: i64 = self
            .conn
            .query_row(
                "SELECT count(DISTINCT (pipeline, company_key)) FROM _sync_verify WHERE verified_at >= ?::TIMESTAMPTZ",
                [&since],
                |r| r.get(0),
            )
            .map_err(err())?;
        let mut stmt = self
            .conn
            .prepare(
                "SELECT table_name, count(*), sum(equal), sum(changed), sum(withdrawn), sum(missing)
                 FROM _sync_verify WHERE run_id = ? GROUP BY 1 ORDER BY 1",
            )
            .map_err(err())?;
        let n = |r: &duckdb::Row<'_>, i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
        let tables = stmt
            .query_map([&run_id], |r| {
                Ok(VerifiedTableSeen {
                    table: r.get(0)?,
                    companies: n(r, 1)?,
                    equal: n(r, 2)?,
                    changed: n(r, 3)?,
                    withdrawn: n(r, 4)?,
                    missing: n(r, 5)?,
                })
            })
            .map_err(err())?
            .collect::<Result<Vec<_>, _>>()
            .map_err(err())?;
        Ok(Some(VerificationSeen {
            run_id,
            verified_at,
            companies_30d: companies_30d.max(0) as u64,
            tables,
        }))
    }

    /// Fields the service sent that no column holds, newest sighting first;
    /// none in a warehouse an earlier release wrote, which lacks the table.
    ///
    /// # Errors
    /// When `_sync_unknown_fields` cannot be read.
    pub fn unknown_fields(&self) -> Result<Vec<UnknownFieldSeen>, SinkError> {
        let err = || sql_err("_sync_unknown_fields", "reading the fields no column holds");
        if !self.has_table("_sync_unknown_fields").map_err(err())? {
            return Ok(Vec::new());
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT route, field, example, first_seen_at, last_seen_at
                 FROM _sync_unknown_fields ORDER BY last_seen_at DESC, route, field",
            )
            .map_err(err())?;
        let rows = stmt
            .query_map([], |r| {
                Ok(UnknownFieldSeen {
                    route: r.get(0)?,
                    field: r.get(1)?,
                    example: r.get(2)?,
                    first_seen_at: r.get(3)?,
                    last_seen_at: r.get(4)?,
                })
            })
            .map_err(err())?;
        rows.collect::<Result<_, _>>().map_err(err())
    }
}

fn run_times(conn: &Connection) -> Result<HashMap<String, crate::bookkeeping::RunTimes>, SinkError> {
    let context = ("_sync_runs", "reading when pipelines ran");
    let mut stmt = conn
        .prepare(
            "WITH runs AS (SELECT pipeline, max(started_at) AS started, max(started_at) FILTER (WHERE status = 'ok') AS ok, \
             max(_commit_seq) AS seq FROM _sync_runs GROUP BY pipeline), \
             since AS (SELECT r.pipeline, count(*) AS n FROM _sync_runs r JOIN runs USING (pipeline) \
             WHERE r.started_at > coalesce(runs.ok, '-infinity'::TIMESTAMPTZ) GROUP BY r.pipeline), \
             resets AS (SELECT pipeline, max(reset_at) AS reset, max(_commit_seq) AS seq FROM _sync_resets GROUP BY pipeline) \
             SELECT coalesce(runs.pipeline, resets.pipeline), started, ok, \
             CASE WHEN resets.seq > coalesce(runs.seq, -1) THEN reset END, coalesce(since.n, 0) \
             FROM runs FULL OUTER JOIN resets ON runs.pipeline = resets.pipeline \
             LEFT JOIN since ON since.pipeline = runs.pipeline",
        )
        .map_err(sql_err(context.0, context.1))?;
    let rows = stmt
        .query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                crate::bookkeeping::RunTimes {
                    started: r.get(1)?,
                    ok_started: r.get(2)?,
                    reset: r.get(3)?,
                    since_ok: u32::try_from(r.get::<_, i64>(4)?).unwrap_or(u32::MAX),
                },
            ))
        })
        .map_err(sql_err(context.0, context.1))?;
    rows.collect::<Result<HashMap<_, _>, _>>()
        .map_err(sql_err(context.0, context.1))
}
