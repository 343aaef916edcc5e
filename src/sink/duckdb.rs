//! The embedded DuckDB warehouse: DDL derived from [`crate::tables`], batches
//! appended to a staging table through the Arrow appender, then merged by the
//! table's load rule in the same transaction that moves the checkpoint.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use chrono::Utc;
use duckdb::Connection;

use super::{Commit, CommitStats, SinkError, StoredCheckpoint, TableBatch};
use crate::batch::BatchBuilder;
use crate::tables::{self, ColType, LoadRule, TABLES, TableDef};

pub struct DuckDbSink {
    conn: Connection,
    path: PathBuf,
}

/// Quotes an identifier: several contract names (`at`, `date`, `type`) are keywords.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Point-in-time views over `macro_observations` (warehouse contract).
///
/// `macro_latest`: per period, the newest vintage; of two values served under
/// one vintage (a restatement), the one seen last.
///
/// `macro_as_of(ts)`: per period, the newest vintage published on or before
/// `ts`; of its values, the last one fdsync had seen by `ts`, or the first one
/// it ever saw when it first looked later (a backfill of old vintages).
/// `ts`'s date is read from its text form (UTC), since the bundled DuckDB has
/// no ICU time-zone extension for a TIMESTAMPTZ-to-DATE cast (and must not try
/// to download one).
const MACRO_VIEWS: &str = "
CREATE OR REPLACE VIEW macro_latest AS
SELECT * FROM macro_observations
QUALIFY row_number() OVER (PARTITION BY country, series_key, period ORDER BY vintage DESC, first_seen_at DESC) = 1;
CREATE OR REPLACE MACRO macro_as_of(ts) AS TABLE
SELECT * FROM macro_observations
WHERE vintage <= CAST(left(CAST(CAST(ts AS TIMESTAMPTZ) AS VARCHAR), 10) AS DATE)
QUALIFY row_number() OVER (
    PARTITION BY country, series_key, period
    ORDER BY vintage DESC,
             CASE WHEN first_seen_at <= CAST(ts AS TIMESTAMPTZ) THEN first_seen_at END DESC NULLS LAST,
             first_seen_at ASC) = 1;
";

pub(crate) fn sql_err<'a>(table: &'a str, context: &'static str) -> impl FnOnce(duckdb::Error) -> SinkError + 'a {
    move |source| SinkError::Sql {
        table: table.to_owned(),
        context,
        source,
    }
}

fn staging(table: &TableDef) -> String {
    ident(&format!("_stage_{}", table.name))
}

impl DuckDbSink {
    /// # Errors
    /// When the directory or file cannot be created or opened, or the schema
    /// cannot be created.
    pub fn open(path: &Path) -> Result<DuckDbSink, SinkError> {
        let open_err = |message: String| SinkError::Open {
            path: path.to_owned(),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| open_err(format!("creating {}: {e}", dir.display())))?;
        }
        let conn = Connection::open(path).map_err(|e| open_err(e.to_string()))?;
        let sink = DuckDbSink {
            conn,
            path: path.to_owned(),
        };
        sink.create_schema()?;
        Ok(sink)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    fn create_schema(&self) -> Result<(), SinkError> {
        for table in TABLES {
            let mut cols: Vec<String> = table
                .all_columns()
                .map(|c| {
                    let not_null = if table.key.contains(&c.name) { " NOT NULL" } else { "" };
                    format!("{} {}{not_null}", ident(c.name), c.ty.sql())
                })
                .collect();
            if !table.key.is_empty() {
                let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                cols.push(format!("PRIMARY KEY ({})", key.join(", ")));
            }
            let ddl = format!("CREATE TABLE IF NOT EXISTS {} ({})", ident(table.name), cols.join(", "));
            self.conn
                .execute_batch(&ddl)
                .map_err(sql_err(table.name, "creating table"))?;
        }
        self.conn
            .execute_batch(MACRO_VIEWS)
            .map_err(sql_err("macro_observations", "creating macro_latest and macro_as_of"))?;
        Ok(())
    }

    /// Commits rows and checkpoints in one transaction.
    ///
    /// # Errors
    /// Any failure rolls the whole commit back; nothing is half-written.
    pub fn commit(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.conn
            .execute_batch("BEGIN TRANSACTION")
            .map_err(sql_err("-", "begin"))?;
        match self.commit_inner(commit) {
            Ok(stats) => {
                self.conn.execute_batch("COMMIT").map_err(sql_err("-", "commit"))?;
                Ok(stats)
            }
            Err(e) => {
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(e)
            }
        }
    }

    fn commit_inner(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        let mut stats = CommitStats::default();
        for TableBatch { table, batch } in commit.batches {
            if batch.num_rows() == 0 {
                continue;
            }
            let written = self.load(table, batch)?;
            if table.lineage {
                stats.rows_written += written;
                match stats.per_table.iter_mut().find(|(name, _)| *name == table.name) {
                    Some((_, n)) => *n += written,
                    None => stats.per_table.push((table.name, written)),
                }
            }
        }
        if !commit.checkpoints.is_empty() {
            let def = &tables::SYNC_CHECKPOINTS;
            let mut b = BatchBuilder::new(tables::table(def.name).expect("checkpoint table"), "", Utc::now());
            let now = Utc::now();
            for c in &commit.checkpoints {
                b.row()
                    .text(Some(&c.pipeline))
                    .text(Some(&c.partition))
                    .text(Some(&c.cursor))
                    .timestamp(Some(now))
                    .end_bare();
            }
            let TableBatch { table, batch } = TableBatch::build(b)?;
            self.load(table, batch)?;
        }
        Ok(stats)
    }

    /// Loads one batch by its table's rule and returns the rows inserted or changed.
    fn load(&mut self, table: &'static TableDef, batch: arrow::record_batch::RecordBatch) -> Result<u64, SinkError> {
        let stage = staging(table);
        let stage_cols: Vec<String> = table
            .all_columns()
            .map(|c| {
                let ty = if c.ty == ColType::Json { "VARCHAR" } else { c.ty.sql() };
                format!("{} {ty}", ident(c.name))
            })
            .collect();
        self.conn
            .execute_batch(&format!(
                "CREATE TEMP TABLE IF NOT EXISTS {stage} ({}); DELETE FROM {stage};",
                stage_cols.join(", ")
            ))
            .map_err(sql_err(table.name, "preparing the staging table"))?;
        {
            let mut appender = self
                .conn
                .appender_to_catalog_and_db(&format!("_stage_{}", table.name), "temp", "main")
                .map_err(sql_err(table.name, "opening the appender"))?;
            appender
                .append_record_batch(batch)
                .map_err(sql_err(table.name, "appending the batch"))?;
            appender.flush().map_err(sql_err(table.name, "flushing the appender"))?;
        }
        let target = ident(table.name);
        let cols: Vec<String> = table.all_columns().map(|c| ident(c.name)).collect();
        let col_list = cols.join(", ");
        let sql = match table.load {
            LoadRule::Append => format!("INSERT INTO {target} ({col_list}) SELECT {col_list} FROM {stage}"),
            LoadRule::History => {
                let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                let on: Vec<String> = key.iter().map(|k| format!("t.{k} = s.{k}")).collect();
                let on = on.join(" AND ");
                let distinct = format!(
                    "SELECT * FROM {stage} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY rowid DESC) = 1",
                    key.join(", ")
                );
                // Seen again: only the last sighting moves.
                self.conn
                    .execute(
                        &format!(
                            "UPDATE {target} t SET last_seen_at = greatest(t.last_seen_at, s.last_seen_at) \
                             FROM ({distinct}) s WHERE {on}"
                        ),
                        [],
                    )
                    .map_err(sql_err(table.name, "touching rows seen again"))?;
                let s_cols: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
                format!(
                    "INSERT INTO {target} ({col_list}) SELECT {} FROM ({distinct}) s ANTI JOIN {target} t ON {on}",
                    s_cols.join(", ")
                )
            }
            LoadRule::InsertOnce | LoadRule::Upsert => {
                let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                let latest = format!(
                    "SELECT * FROM {stage} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY rowid DESC) = 1",
                    key.join(", ")
                );
                let s_cols: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
                let mut same: Vec<String> = key.iter().map(|k| format!("t.{k} = s.{k}")).collect();
                let verb = match (table.load, table.lineage) {
                    (LoadRule::InsertOnce, _) => "INSERT",
                    (_, true) => {
                        // A row whose content is unchanged is not rewritten: its lineage
                        // (_run_id, _fetched_at) keeps saying when it really arrived.
                        for c in table.columns.iter().filter(|c| !table.key.contains(&c.name)) {
                            let n = ident(c.name);
                            same.push(format!("t.{n} IS NOT DISTINCT FROM s.{n}"));
                        }
                        same.push("t.raw::VARCHAR IS NOT DISTINCT FROM s.raw".into());
                        "INSERT OR REPLACE"
                    }
                    // Bookkeeping rows (checkpoints, runs) always take the newest values.
                    (_, false) => {
                        same.push("false".into());
                        "INSERT OR REPLACE"
                    }
                };
                // ANTI JOIN rather than NOT EXISTS: DuckDB plans it several times faster.
                format!(
                    "{verb} INTO {target} ({col_list}) SELECT {} FROM ({latest}) s ANTI JOIN {target} t ON {}",
                    s_cols.join(", "),
                    same.join(" AND ")
                )
            }
        };
        let written = self
            .conn
            .execute(&sql, [])
            .map_err(sql_err(table.name, "merging the staged rows"))?;
        Ok(written as u64)
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
}
