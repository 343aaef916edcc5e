//! `fdsync reset`: forgetting a pipeline's checkpoints and, when asked, the
//! rows it wrote, in one transaction recorded in `_sync_resets`.

use chrono::{DateTime, Utc};

use super::{BOUND_LIST, COMMIT_SEQ, DuckDbSink, ident, json_list, sql_err};
use crate::bookkeeping::{SYNC_CHECKPOINTS, SYNC_RESETS};
use crate::sink::SinkError;
use crate::tables::TableDef;

/// What a reset forgets.
#[derive(Debug)]
pub struct Reset<'a> {
    pub pipeline: &'a str,
    /// One company (its key) instead of the whole pipeline.
    pub company_key: Option<&'a str>,
    /// The pipeline's tables with the `_route` pattern (SQL `LIKE`) of the
    /// rows it wrote there; `None` deletes without looking at the route.
    /// Empty unless the rows go too.
    pub rows_of: Vec<(&'static TableDef, Option<String>)>,
    pub at: DateTime<Utc>,
}

/// What a reset did.
#[derive(Debug, serde::Serialize)]
pub struct ResetDone {
    pub checkpoints_removed: u64,
    /// Rows deleted per table, in the order given.
    pub rows_deleted: Vec<(&'static str, u64)>,
}

impl DuckDbSink {
    /// The company key a configured identifier (a key, a CIK with or without
    /// its leading zeros, a symbol) names in the `companies` table.
    ///
    /// # Errors
    /// When `companies` cannot be read.
    pub fn company_key_of(&self, id: &str) -> Result<Option<String>, SinkError> {
        let found: Vec<String> = self.rows(
            ("companies", "looking up the company"),
            "SELECT company_key FROM companies WHERE company_key = $1 OR cik = $1 \
             OR (ltrim(cik, '0') = ltrim($1, '0') AND ltrim($1, '0') <> '') OR upper(symbol) = upper($1) \
             ORDER BY company_key = $1 DESC LIMIT 1",
            &[id],
            |r| r.get(0),
        )?;
        Ok(found.into_iter().next())
    }

    /// Deletes the checkpoints (and the rows) `reset` names and records it,
    /// all in one transaction.
    ///
    /// # Errors
    /// When a statement fails: then nothing is deleted.
    pub fn reset(&mut self, reset: &Reset<'_>) -> Result<ResetDone, SinkError> {
        self.commit_held_now()?;
        self.conn
            .execute_batch("BEGIN TRANSACTION")
            .map_err(sql_err(SYNC_RESETS.name, "begin"))?;
        let done = self.reset_in_transaction(reset);
        let committed = done.and_then(|done| {
            self.conn
                .execute_batch("COMMIT")
                .map_err(sql_err(SYNC_RESETS.name, "commit"))?;
            Ok(done)
        });
        if committed.is_err() {
            let _ = self.conn.execute_batch("ROLLBACK");
        }
        committed
    }

    /// Deletes the checkpoints `partitions` of `pipeline`: marks that steer
    /// nothing any more (a record's wait before it is asked again, over).
    /// One statement, so all or none go.
    ///
    /// # Errors
    /// When the statement fails: then nothing is deleted.
    pub fn forget_checkpoints(&mut self, pipeline: &str, partitions: &[String]) -> Result<u64, SinkError> {
        if partitions.is_empty() {
            return Ok(0);
        }
        self.commit_held_now()?;
        let sql = format!(
            "DELETE FROM {} WHERE pipeline = ? AND \"partition\" IN (SELECT value FROM {BOUND_LIST})",
            ident(SYNC_CHECKPOINTS.name)
        );
        let removed = self
            .conn
            .execute(&sql, [pipeline, &json_list(partitions)])
            .map_err(sql_err(SYNC_CHECKPOINTS.name, "forgetting waits that are over"))?;
        Ok(removed as u64)
    }

    fn reset_in_transaction(&mut self, reset: &Reset<'_>) -> Result<ResetDone, SinkError> {
        let company = reset.company_key;
        let checkpoints = ident(SYNC_CHECKPOINTS.name);
        let removed = match company {
            Some(key) => self.conn.execute(
                &format!("DELETE FROM {checkpoints} WHERE pipeline = ? AND \"partition\" = ?"),
                [reset.pipeline, key],
            ),
            None => self.conn.execute(
                &format!("DELETE FROM {checkpoints} WHERE pipeline = ?"),
                [reset.pipeline],
            ),
        };
        let checkpoints_removed = removed.map_err(sql_err(SYNC_CHECKPOINTS.name, "forgetting the checkpoints"))? as u64;
        let mut rows_deleted = Vec::new();
        for (table, route) in &reset.rows_of {
            let mut filter = vec!["TRUE"];
            let mut params: Vec<&str> = Vec::new();
            if let Some(route) = route {
                filter.push("_route LIKE ? ESCAPE '\\'");
                params.push(route);
            }
            if let Some(key) = company {
                filter.push("company_key = ?");
                params.push(key);
            }
            let sql = format!("DELETE FROM {} WHERE {}", ident(table.name), filter.join(" AND "));
            let deleted = self
                .conn
                .execute(&sql, duckdb::params_from_iter(params))
                .map_err(sql_err(table.name, "deleting the pipeline's rows"))?;
            rows_deleted.push((table.name, deleted as u64));
        }
        let seq = self.next_commit_seq()?;
        let tables: Vec<String> = rows_deleted.iter().map(|(t, _)| format!("'{t}'")).collect();
        self.conn
            .execute(
                &format!(
                    "INSERT INTO {} (reset_at, pipeline, company_key, checkpoints_removed, drop_rows, rows_deleted, tables, {COMMIT_SEQ}) \
                     VALUES (?, ?, ?, ?, ?, ?, [{}]::VARCHAR[], ?)",
                    ident(SYNC_RESETS.name),
                    tables.join(", ")
                ),
                duckdb::params![
                    reset.at,
                    reset.pipeline,
                    company,
                    checkpoints_removed as i64,
                    !reset.rows_of.is_empty(),
                    rows_deleted.iter().map(|(_, n)| *n as i64).sum::<i64>(),
                    seq
                ],
            )
            .map_err(sql_err(SYNC_RESETS.name, "recording the reset"))?;
        Ok(ResetDone {
            checkpoints_removed,
            rows_deleted,
        })
    }
}
