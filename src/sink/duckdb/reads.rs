//! Typed read queries of the warehouse: what the sync side, the daemon and
//! the demo ask of what is stored, answered without SQL leaving the sink.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};

use super::{DuckDbSink, ident, sql_err, string_list};
use crate::feeds;
use crate::sink::{SinkError, StoredCheckpoint};
use crate::upstream::ratelimit::QuotaWindow;

impl DuckDbSink {
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
        let windows: Vec<QuotaWindow> = self.rows(("_sync_quota", "reading the quota ledger"), sql, key_id, |r| {
            Ok(QuotaWindow {
                window: r.get(0)?,
                limit: r.get::<_, Option<i64>>(1)?.map(|n| n as u64),
                remaining: r.get::<_, Option<i64>>(2)?.map(|n| n as u64),
                reset_at: r.get(3)?,
                billing_source: r.get(4)?,
                credits_remaining_usd: r.get(5)?,
            })
        })?;
        Ok(windows.into_iter().next())
    }

    /// The filing date of the oldest stored event since `since` whose
    /// headline is still gated (NULL).
    ///
    /// # Errors
    /// When `events` cannot be read.
    pub fn earliest_gated_filing(&self, since: NaiveDate) -> Result<Option<NaiveDate>, SinkError> {
        self.connection()
            .query_row(
                "SELECT min(filing_date) FROM events WHERE headline IS NULL AND filing_date >= ?",
                [since.to_string()],
                |r| r.get(0),
            )
            .map_err(sql_err("events", "finding gated headlines"))
    }

    /// For each (company, accession of the last event seen): the company's
    /// stored events from that one on, or from an older one accepted since
    /// `gated_since` whose headline is still gated.
    ///
    /// # Errors
    /// When `events` cannot be read.
    pub fn events_since_anchors(
        &self,
        anchors: &[(String, String)],
        gated_since: DateTime<Utc>,
    ) -> Result<Vec<(String, i64)>, SinkError> {
        if anchors.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<String> = anchors
            .iter()
            .map(|(company, accession)| format!("({})", string_list(&[company.clone(), accession.clone()])))
            .collect();
        let sql = format!(
            "WITH cursors(company_key, accession) AS (VALUES {}),
             gated AS (
                SELECT company_key, min(accepted_at) AS accepted_at FROM events
                WHERE headline IS NULL AND accepted_at >= ?::TIMESTAMPTZ
                  AND company_key IN (SELECT company_key FROM cursors)
                GROUP BY company_key),
             anchors AS (
                SELECT c.company_key, least(seen.accepted_at, gated.accepted_at) AS accepted_at
                FROM cursors c
                LEFT JOIN events seen ON seen.accession = c.accession
                LEFT JOIN gated ON gated.company_key = c.company_key)
             SELECT a.company_key, count(e.accession) FROM anchors a
             LEFT JOIN events e ON e.company_key = a.company_key
                AND e.accepted_at >= coalesce(a.accepted_at, '-infinity'::TIMESTAMPTZ)
             GROUP BY a.company_key",
            values.join(", ")
        );
        self.rows(
            ("events", "sizing the index requests"),
            &sql,
            &gated_since.to_rfc3339(),
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
    }

    /// (company, accession, item) of the companies' events filed since
    /// `since` whose item text is not stored; '' is a filing's uncoded item.
    ///
    /// # Errors
    /// When `events` or `event_item_texts` cannot be read.
    pub fn missing_item_texts(
        &self,
        companies: &[String],
        since: NaiveDate,
    ) -> Result<Vec<(String, String, String)>, SinkError> {
        if companies.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "WITH wanted AS (
                SELECT company_key, accession,
                       unnest(CASE WHEN len(items) = 0 THEN ['']::VARCHAR[] ELSE items END) AS item
                FROM events WHERE company_key IN ({}) AND filing_date >= ?)
             SELECT w.company_key, w.accession, w.item FROM wanted w
             ANTI JOIN event_item_texts t ON t.accession = w.accession AND t.item = w.item
             ORDER BY w.accession, w.item",
            string_list(companies)
        );
        self.rows(
            ("event_item_texts", "listing missing texts"),
            &sql,
            &since.to_string(),
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// (company, accession, section key) of the section texts stored for the
    /// companies' filings filed since `since`, or undated.
    ///
    /// # Errors
    /// When `filing_sections` or `filings` cannot be read.
    pub fn stored_sections(
        &self,
        companies: &[String],
        since: NaiveDate,
    ) -> Result<Vec<(String, String, String)>, SinkError> {
        if companies.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT s.company_key, s.accession, s.section_key FROM filing_sections s
             LEFT JOIN filings f ON f.accession = s.accession
             WHERE s.company_key IN ({}) AND (f.filed_at IS NULL OR f.filed_at >= ?::DATE)",
            string_list(companies)
        );
        self.rows(
            ("filing_sections", "listing stored sections"),
            &sql,
            &since.to_string(),
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
    }

    /// When each pipeline last started, from the run log.
    ///
    /// # Errors
    /// When `_sync_runs` cannot be read.
    pub fn last_started(&self) -> Result<HashMap<String, DateTime<Utc>>, SinkError> {
        let context = ("_sync_runs", "reading the last runs");
        let mut stmt = self
            .connection()
            .prepare("SELECT pipeline, max(started_at) FROM _sync_runs GROUP BY pipeline")
            .map_err(sql_err(context.0, context.1))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, DateTime<Utc>>(1)?)))
            .map_err(sql_err(context.0, context.1))?;
        rows.collect::<Result<HashMap<_, _>, _>>()
            .map_err(sql_err(context.0, context.1))
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
