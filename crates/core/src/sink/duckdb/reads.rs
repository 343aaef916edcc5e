//! Typed read queries of the warehouse: what the sync side, the daemon and
//! the demo ask of what is stored, answered without SQL leaving the sink.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, NaiveDate, Utc};

use super::{BOUND_LIST, DuckDbSink, ident, json_list, partition_text, sql_err};
use crate::feeds::{self, Pending, Stored, StoredParts, Tally};
use crate::sink::{SinkError, StoredCheckpoint};
use crate::tables::TableDef;
use crate::upstream::ratelimit::QuotaWindow;

/// A partition whose stored history a run found restated ([`DuckDbSink::restated`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Restated {
    pub partition: String,
    pub rows: u64,
    /// New value over old, the median of the changed rows.
    pub factor: Option<f64>,
}

/// What a partition of a table holds before it is read again whole
/// ([`DuckDbSink::partition_holdings`]); for `fdsync verify`, what that run
/// changed in it follows ([`DuckDbSink::verify_changes`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Holding {
    pub rows: u64,
    /// Its oldest day, for a table with a date column.
    pub earliest: Option<NaiveDate>,
}

/// What one run changed in a partition of a table with versions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Changes {
    /// Rows replaced by other values (their old versions kept).
    pub changed: u64,
    /// Rows withdrawn (kept as versions).
    pub withdrawn: u64,
    /// Rows the run wrote: the changed ones and the new.
    pub written: u64,
}

impl DuckDbSink {
    /// When each company of `pipeline` was last verified.
    ///
    /// # Errors
    /// When `_sync_verify` cannot be read.
    pub fn last_verified(&self, pipeline: &str) -> Result<HashMap<String, DateTime<Utc>>, SinkError> {
        self.rows(
            ("_sync_verify", "reading when companies were last verified"),
            "SELECT company_key, max(verified_at) FROM _sync_verify WHERE pipeline = ? GROUP BY 1",
            &[pipeline],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, DateTime<Utc>>(1)?)),
        )
    }

    /// When a verification last compared a company (any pipeline).
    ///
    /// # Errors
    /// When `_sync_verify` cannot be read.
    pub fn last_verification(&self) -> Result<Option<DateTime<Utc>>, SinkError> {
        let last: Vec<Option<DateTime<Utc>>> = self.rows(
            ("_sync_verify", "reading when the last verification ran"),
            "SELECT max(verified_at) FROM _sync_verify",
            &[],
            |r| r.get(0),
        )?;
        Ok(last.into_iter().flatten().next())
    }

    /// How many rows each of `partitions` holds in `table`, and its oldest
    /// `date` (when given).
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn partition_holdings(
        &self,
        table: &'static TableDef,
        date: Option<&str>,
        partitions: &[String],
    ) -> Result<HashMap<String, Holding>, SinkError> {
        let part = partition_text(table, None);
        let earliest = date.map_or("NULL::DATE".to_owned(), |d| format!("min({})", ident(d)));
        self.rows(
            (table.name, "counting the rows a company holds"),
            &format!(
                "SELECT {part}, count(*), {earliest} FROM {} WHERE {part} IN (SELECT value FROM {BOUND_LIST}) GROUP BY 1",
                ident(table.name)
            ),
            &[&json_list(partitions)],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Holding {
                        rows: r.get::<_, i64>(1)?.max(0) as u64,
                        earliest: r.get(2)?,
                    },
                ))
            },
        )
    }

    /// What run `run_id` changed in each of `partitions` of `table` (a
    /// table with versions): rows replaced, withdrawn, and written.
    ///
    /// # Errors
    /// When the table or its versions cannot be read.
    pub fn verify_changes(
        &self,
        table: &'static TableDef,
        run_id: &str,
        partitions: &[String],
    ) -> Result<HashMap<String, Changes>, SinkError> {
        let part = partition_text(table, None);
        let sql = format!(
            "WITH p AS (SELECT value AS part FROM {BOUND_LIST}),              v AS (SELECT {part} AS part, count(*) FILTER (WHERE _change = 'changed') AS changed,                    count(*) FILTER (WHERE _change = 'withdrawn') AS withdrawn                    FROM {versions} WHERE _superseded_by = ? GROUP BY 1),              w AS (SELECT {part} AS part, count(*) AS written FROM {table} WHERE _run_id = ? GROUP BY 1)              SELECT p.part, coalesce(v.changed, 0), coalesce(v.withdrawn, 0), coalesce(w.written, 0)              FROM p LEFT JOIN v USING (part) LEFT JOIN w USING (part)",
            versions = ident(&table.versions_name()),
            table = ident(table.name),
        );
        self.rows(
            (table.name, "counting what a verify run changed"),
            &sql,
            &[&json_list(partitions), run_id, run_id],
            |r| {
                let n = |i: usize| r.get::<_, i64>(i).map(|n| n.max(0) as u64);
                Ok((
                    r.get::<_, String>(0)?,
                    Changes {
                        changed: n(1)?,
                        withdrawn: n(2)?,
                        written: n(3)?,
                    },
                ))
            },
        )
    }

    /// Every checkpoint of `pipeline`, by partition, with when it last moved
    /// (the stalest partitions go first when a budget cannot cover them all).
    pub fn checkpoints(&self, pipeline: &str) -> Result<HashMap<String, StoredCheckpoint>, SinkError> {
        let mut stmt = self
            .conn
            .prepare("SELECT \"partition\", \"cursor\", updated_at FROM _sync_checkpoints WHERE pipeline = ?")
            .map_err(sql_err("_sync_checkpoints", "reading checkpoints"))?;
        let rows = stmt
            .query_map([pipeline], |r| {
                let stored = StoredCheckpoint {
                    cursor: r.get(1)?,
                    updated_at: r.get(2)?,
                };
                Ok((r.get::<_, String>(0)?, stored))
            })
            .map_err(sql_err("_sync_checkpoints", "reading checkpoints"))?;
        rows.collect::<Result<_, _>>()
            .map_err(sql_err("_sync_checkpoints", "reading checkpoints"))
    }

    /// What the quota ledger last recorded for the key `key_id` fingerprints.
    ///
    /// # Errors
    /// When the ledger cannot be read.
    pub fn quota_window(&self, key_id: &str) -> Result<Option<QuotaWindow>, SinkError> {
        let sql = "SELECT quota_window, quota_limit, quota_remaining, quota_reset_at, billing_source, \
                   credits_remaining_usd FROM _sync_quota WHERE key_id = ?";
        let windows: Vec<QuotaWindow> =
            self.rows(("_sync_quota", "reading the quota ledger"), sql, &[key_id], |r| {
                Ok(QuotaWindow {
                    window: r.get(0)?,
                    limit: r.get::<_, Option<i64>>(1)?.map(|n| n.max(0) as u64),
                    remaining: r.get::<_, Option<i64>>(2)?.map(|n| n.max(0) as u64),
                    reset_at: r.get(3)?,
                    billing_source: r.get(4)?,
                    credits_remaining_usd: r.get(5)?,
                })
            })?;
        Ok(windows.into_iter().next())
    }

    /// The date of the oldest stored document dated since `since` whose
    /// pending column is still NULL.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn earliest_pending(
        &self,
        stored: &Stored,
        pending: &Pending,
        since: NaiveDate,
    ) -> Result<Option<NaiveDate>, SinkError> {
        let sql = format!(
            "SELECT min({dated}) FROM {table} WHERE {pending} IS NULL AND {dated} >= ?::DATE",
            dated = ident(stored.dated),
            table = ident(stored.table.name),
            pending = ident(pending.column),
        );
        let found: Vec<Option<NaiveDate>> = self.rows(
            (stored.table.name, "finding pending rows"),
            &sql,
            &[&since.to_string()],
            |r| r.get(0),
        )?;
        Ok(found.into_iter().flatten().next())
    }

    /// The partitions (companies) of `table` whose rows dated before `before`
    /// run `run_id` changed: how many, and the median ratio of the new
    /// `value` to the old one (a split's factor) when there is one.
    ///
    /// # Errors
    /// When the versions cannot be read.
    pub fn restated(
        &self,
        table: &TableDef,
        run_id: &str,
        date: &str,
        value: &str,
        before: NaiveDate,
    ) -> Result<Vec<Restated>, SinkError> {
        let versions = ident(&table.versions_name());
        let (part, date, value) = (ident(table.key[0]), ident(date), ident(value));
        // Most runs change no older row (at most a recent bar corrected):
        // then the join below, which scans the whole table, is not run.
        let older: Vec<i64> = self.rows(
            (table.name, "finding restated histories"),
            &format!(
                "SELECT count(*) FROM {versions} WHERE _superseded_by = ? AND _change = 'changed' AND {date} < ?::DATE"
            ),
            &[run_id, &before.to_string()],
            |r| r.get(0),
        )?;
        if older.first().is_none_or(|n| *n == 0) {
            return Ok(Vec::new());
        }
        // Values, not the record's text: a service that reformats its JSON
        // has restated nothing.
        let same: Vec<String> = table
            .columns
            .iter()
            .filter(|c| !table.key.contains(&c.name))
            .map(|c| format!("t.{0} IS NOT DISTINCT FROM v.{0}", ident(c.name)))
            .collect();
        let sql = format!(
            "SELECT v.{part}, count(*), median(t.{value} / nullif(v.{value}, 0)) \
             FROM {versions} v JOIN {table} t ON t.{part} = v.{part} AND t.{date} = v.{date} \
             WHERE v._superseded_by = ? AND v._change = 'changed' AND v.{date} < ?::DATE AND NOT ({}) \
             GROUP BY ALL ORDER BY 1",
            same.join(" AND "),
            table = ident(table.name),
        );
        self.rows(
            (table.name, "finding restated histories"),
            &sql,
            &[run_id, &before.to_string()],
            |r| {
                Ok(Restated {
                    partition: r.get(0)?,
                    rows: r.get::<_, i64>(1)?.max(0) as u64,
                    factor: r.get::<_, Option<f64>>(2)?.filter(|f| f.is_finite()),
                })
            },
        )
    }

    /// The newest day `stored` holds a document of, up to `until`.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn newest_dated(&self, stored: &Stored, until: NaiveDate) -> Result<Option<NaiveDate>, SinkError> {
        let sql = format!(
            "SELECT max({dated}) FROM {table} WHERE {dated} <= ?::DATE",
            dated = ident(stored.dated),
            table = ident(stored.table.name),
        );
        let found: Vec<Option<NaiveDate>> = self.rows(
            (stored.table.name, "finding the newest day stored"),
            &sql,
            &[&until.to_string()],
            |r| r.get(0),
        )?;
        Ok(found.into_iter().flatten().next())
    }

    /// How many documents `stored` holds dated from `from` (open: from the
    /// start) to `to`, inclusive: what a window read is held against.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn stored_in_window(
        &self,
        stored: &Stored,
        (from, to): (Option<NaiveDate>, NaiveDate),
    ) -> Result<u64, SinkError> {
        let sql = format!(
            "SELECT count(*) FROM {table} WHERE {dated} BETWEEN ?::DATE AND ?::DATE",
            dated = ident(stored.dated),
            table = ident(stored.table.name),
        );
        let found: Vec<i64> = self.rows(
            (stored.table.name, "counting a window's rows"),
            &sql,
            &[&date_or_open(from), &to.to_string()],
            |r| r.get(0),
        )?;
        Ok(found.into_iter().next().unwrap_or(0).max(0) as u64)
    }

    /// Whether an alert for `pipeline` and `cause` was sent on `day`.
    ///
    /// # Errors
    /// When the alert log cannot be read.
    pub fn alerted(&self, day: NaiveDate, pipeline: &str, cause: &str) -> Result<bool, SinkError> {
        let found: Vec<i64> = self.rows(
            ("_sync_alerts", "reading the alerts sent"),
            "SELECT count(*) FROM _sync_alerts WHERE day = ?::DATE AND pipeline = ? AND cause = ?",
            &[&day.to_string(), pipeline, cause],
            |r| r.get(0),
        )?;
        Ok(found.first().is_some_and(|n| *n > 0))
    }

    /// Remembers an alert the webhook took.
    ///
    /// # Errors
    /// When the alert log cannot be written.
    pub fn record_alert(
        &mut self,
        at: DateTime<Utc>,
        pipeline: &str,
        cause: &str,
        run_id: &str,
        http_status: u16,
    ) -> Result<(), SinkError> {
        self.commit_held_now()?;
        self.conn
            .execute(
                "INSERT INTO _sync_alerts (day, pipeline, cause, run_id, sent_at, http_status) \
                 VALUES (?::DATE, ?, ?, ?, ?::TIMESTAMPTZ, ?) ON CONFLICT DO NOTHING",
                duckdb::params![
                    at.date_naive().to_string(),
                    pipeline,
                    cause,
                    run_id,
                    at.to_rfc3339(),
                    i64::from(http_status)
                ],
            )
            .map_err(sql_err("_sync_alerts", "recording an alert"))?;
        Ok(())
    }

    /// How many documents `stored` holds dated `day`, by `tally.kind`.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn stored_by_kind(
        &self,
        stored: &Stored,
        tally: &Tally,
        day: NaiveDate,
    ) -> Result<Vec<(String, u64)>, SinkError> {
        let sql = format!(
            "SELECT {kind}, count(*) FROM {table} WHERE {dated} = ?::DATE AND {kind} IS NOT NULL GROUP BY {kind}",
            kind = ident(tally.kind),
            dated = ident(stored.dated),
            table = ident(stored.table.name),
        );
        self.rows(
            (stored.table.name, "counting a day's rows by kind"),
            &sql,
            &[&day.to_string()],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?.max(0) as u64)),
        )
    }

    /// The kinds the newest tally of `day` counted above zero.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn tallied_kinds(&self, stored: &Stored, tally: &Tally, day: NaiveDate) -> Result<Vec<String>, SinkError> {
        let sql = format!(
            "SELECT {kind} FROM {table} WHERE {dated} = ?::DATE GROUP BY {kind} \
             HAVING arg_max({count}, {observed}) > 0 ORDER BY {kind}",
            kind = ident(tally.kind),
            count = ident(tally.count),
            observed = ident(tally.observed),
            dated = ident(stored.dated),
            table = ident(tally.table.name),
        );
        self.rows(
            (tally.table.name, "reading a day's last tally"),
            &sql,
            &[&day.to_string()],
            |r| r.get(0),
        )
    }

    /// For each (company, id of the last document seen): the company's
    /// stored documents from that one on, or from an older one received
    /// since `pending_since` still pending.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn stored_since_anchors(
        &self,
        stored: &Stored,
        pending: &Pending,
        anchors: &[(String, String)],
        pending_since: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>, SinkError> {
        if anchors.is_empty() {
            return Ok(Vec::new());
        }
        let pairs: Vec<[&str; 2]> = anchors
            .iter()
            .map(|(company, id)| [company.as_str(), id.as_str()])
            .collect();
        let sql = format!(
            "WITH cursors AS (
                SELECT pair[1] AS company_key, pair[2] AS id
                FROM (SELECT unnest(from_json(?::JSON, '[[\"VARCHAR\"]]')) AS pair)),
             pending AS (
                SELECT {company} AS company_key, min({received}) AS received FROM {table}
                WHERE {column} IS NULL AND {received} >= ?::TIMESTAMPTZ
                  AND {company} IN (SELECT company_key FROM cursors)
                GROUP BY {company}),
             anchors AS (
                SELECT c.company_key, least(seen.{received}, pending.received) AS received
                FROM cursors c
                LEFT JOIN {table} seen ON seen.{id} = c.id
                LEFT JOIN pending ON pending.company_key = c.company_key)
             SELECT a.company_key, count(d.{id}) FROM anchors a
             LEFT JOIN {table} d ON d.{company} = a.company_key
                AND d.{received} >= coalesce(a.received, '-infinity'::TIMESTAMPTZ)
             GROUP BY a.company_key",
            table = ident(stored.table.name),
            company = ident(stored.company),
            id = ident(stored.id),
            received = ident(pending.received),
            column = ident(pending.column),
        );
        self.rows(
            (stored.table.name, "sizing the index requests"),
            &sql,
            &[&json_list(&pairs), &pending_since.to_rfc3339()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// (company, document, part) of the companies' documents dated since
    /// `since` (all of them without), or undated, whose part text is not
    /// stored, the newest documents first; '' is a document's uncoded part
    /// (its `parts` list is empty).
    ///
    /// # Errors
    /// When either table cannot be read.
    pub fn missing_parts(
        &self,
        parent: &Stored,
        parts: &str,
        texts: &StoredParts,
        companies: &[String],
        since: Option<NaiveDate>,
    ) -> Result<Vec<(String, String, String)>, SinkError> {
        if companies.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "WITH wanted AS (
                SELECT {company} AS company_key, {id} AS id, {dated} AS dated,
                       unnest(CASE WHEN len({parts}) = 0 THEN ['']::VARCHAR[] ELSE {parts} END) AS part
                FROM {parent} WHERE {company} IN (SELECT value FROM {BOUND_LIST})
                  AND ({dated} IS NULL OR {dated} >= ?::DATE))
             SELECT w.company_key, w.id, w.part FROM wanted w
             ANTI JOIN {texts} t ON t.{text_id} = w.id AND t.{text_part} = w.part
             ORDER BY w.dated DESC NULLS LAST, w.id, w.part",
            company = ident(parent.company),
            id = ident(parent.id),
            parts = ident(parts),
            parent = ident(parent.table.name),
            dated = ident(parent.dated),
            texts = ident(texts.table.name),
            text_id = ident(texts.id),
            text_part = ident(texts.part),
        );
        self.rows(
            (texts.table.name, "listing missing texts"),
            &sql,
            &[&json_list(companies), &date_or_open(since)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// The keys of `table`'s rows matching `lacking`, in the order `first`,
    /// at most `limit`, leaving out those in `asked` (already asked and
    /// not served, waiting before they are asked again).
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn lacking_rows(
        &self,
        table: &TableDef,
        (lacking, first): (&str, &str),
        asked: &[String],
        limit: u64,
    ) -> Result<Vec<String>, SinkError> {
        let sql = format!(
            "SELECT {key} FROM {table} WHERE ({lacking})
               AND {key} NOT IN (SELECT value FROM {BOUND_LIST})
             ORDER BY {first} LIMIT {limit}",
            key = ident(table.key[0]),
            table = ident(table.name),
        );
        self.rows(
            (table.name, "listing rows lacking details"),
            &sql,
            &[&json_list(asked)],
            |r| r.get(0),
        )
    }

    /// The parts of document `id` whose texts are stored.
    ///
    /// # Errors
    /// When the table cannot be read.
    pub fn stored_parts_of(&self, texts: &StoredParts, id: &str) -> Result<HashSet<String>, SinkError> {
        let sql = format!(
            "SELECT {part} FROM {table} WHERE {id} = ?",
            part = ident(texts.part),
            table = ident(texts.table.name),
            id = ident(texts.id),
        );
        self.rows((texts.table.name, "listing stored parts"), &sql, &[id], |r| r.get(0))
    }

    /// (company, document, part) of the parts stored for the companies'
    /// documents dated since `since` (all of them without), or undated.
    ///
    /// # Errors
    /// When either table cannot be read.
    pub fn stored_parts(
        &self,
        documents: &Stored,
        parts: &StoredParts,
        companies: &[String],
        since: Option<NaiveDate>,
    ) -> Result<Vec<(String, String, String)>, SinkError> {
        if companies.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT p.{company}, p.{id}, p.{part} FROM {parts} p
             LEFT JOIN {documents} d ON d.{doc_id} = p.{id}
             WHERE p.{company} IN (SELECT value FROM {BOUND_LIST}) AND (d.{dated} IS NULL OR d.{dated} >= ?::DATE)",
            company = ident(parts.company),
            id = ident(parts.id),
            part = ident(parts.part),
            parts = ident(parts.table.name),
            documents = ident(documents.table.name),
            doc_id = ident(documents.id),
            dated = ident(documents.dated),
        );
        self.rows(
            (parts.table.name, "listing stored parts"),
            &sql,
            &[&json_list(companies), &date_or_open(since)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// Rows in each table of the catalogue, in its order.
    ///
    /// # Errors
    /// When a table cannot be counted.
    pub fn row_counts(&self) -> Result<Vec<(&'static str, i64)>, SinkError> {
        feeds::catalogue()
            .map(|table| Ok((table.name, self.row_count(table.name)?)))
            .collect()
    }

    /// Rows in `table`.
    ///
    /// # Errors
    /// When the table cannot be counted.
    pub fn row_count(&self, table: &str) -> Result<i64, SinkError> {
        let sql = format!("SELECT count(*) FROM {}", ident(table));
        self.connection()
            .query_row(&sql, [], |r| r.get(0))
            .map_err(sql_err(table, "counting rows"))
    }
}

/// A date bound for SQL: open (`-infinity`) without one.
fn date_or_open(since: Option<NaiveDate>) -> String {
    since.map_or_else(|| "-infinity".to_owned(), |d| d.to_string())
}
