//! The embedded DuckDB warehouse: DDL derived from [`crate::tables`], batches
//! appended to a staging table through the Arrow appender, then merged by the
//! table's load rule in the same transaction that moves the checkpoint. A large
//! batch whose keys are all new and distinct (a backfill's) skips the staging
//! table: only its keys are staged, to make sure, and its rows are inserted
//! through a table function DuckDB reads Arrow from itself (`arrow_scan`).

#[allow(unsafe_code)]
mod arrow_scan;
pub mod export;
mod held;
mod load;
mod merge;
pub mod migrations;
pub mod reader;
mod reads;
pub mod reset;
mod schema;
mod settings;

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use duckdb::Connection;

use self::arrow_scan::Instance;
use self::held::Held;
use self::merge::Merge;
pub use self::reads::{Changes, Holding};
pub(crate) use self::settings::MIN_PROBE_ROWS;
use self::settings::{
    DUCKDB_ROW_GROUP_ROWS, PAUSE_MERGES, ROW_GROUP_ROWS, STATEMENT_CACHE, WAREHOUSE_ALIAS, set_checkpoint_threshold,
    set_memory_limit,
};
pub use self::settings::{REOPEN_AFTER_ROWS, Settings};
use super::SinkError;

pub struct DuckDbSink {
    conn: Connection,
    /// The database `conn` is connected to; closed after it (fields drop in order).
    instance: Instance,
    path: PathBuf,
    /// Each table's merge statements, built once: their text never changes
    /// (the commit number is a parameter), so each is parsed once and kept
    /// prepared. DuckDB 2 still plans it again at every execution, which is
    /// why a backfill commits several pages at once.
    merges: HashMap<&'static str, Merge>,
    /// Rows staged since the file was opened ([`DuckDbSink::wants_reopen`]).
    rows_since_open: usize,
    /// Bulk commits loaded in a transaction left open ([`DuckDbSink::commit_held`]).
    held: Option<Held>,
    /// Whether bulk commits may be held: [`Settings::holds_bulk_commits`].
    holds_bulk_commits: bool,
    /// What the file was opened with: its memory limit (named when DuckDB
    /// runs out of it), checkpoint threshold, when to reopen it, and how to
    /// open it again after DuckDB invalidated it
    /// ([`DuckDbSink::reattach`]).
    settings: Settings,
    /// The memory limit DuckDB has now: lowered while it appends and while a
    /// bulk load commits ([`Settings::append_memory_limit_mb`]), the whole
    /// one for merges and smaller commits ([`DuckDbSink::limit_memory`]).
    memory_limit_now_mb: Cell<u64>,
}

/// Quotes an identifier: several contract names (`at`, `date`, `type`) are keywords.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The SQL for the partition a replaced response names (the first key
/// column of `table`, of the row aliased `alias` when given) as the text it
/// is named by: a date partition (a day's snapshot) compares as its ISO text.
pub(super) fn partition_text(table: &crate::tables::TableDef, alias: Option<&str>) -> String {
    let key = table.key.first().copied().unwrap_or_default();
    let col = match alias {
        Some(a) => format!("{a}.{}", ident(key)),
        None => ident(key),
    };
    match table.columns.iter().find(|c| c.name == key).map(|c| c.ty) {
        Some(crate::tables::ColType::Text) | None => col,
        Some(_) => format!("CAST({col} AS VARCHAR)"),
    }
}

/// Whether DuckDB's `message` says a failed checkpoint invalidated the
/// database, which only attaching it again ends ([`DuckDbSink::reattach`]).
pub(super) fn invalidated(message: &str) -> bool {
    message.contains("has been invalidated") || message.contains("autocheckpoint failed")
}

/// Whether DuckDB's `message` says the `COMMIT` itself is durable and only
/// the checkpoint after it failed.
fn durable_despite_checkpoint(message: &str) -> bool {
    message.contains("COMMIT succeeded and is durable")
}

/// Whether DuckDB refused to open a file because another process has it
/// (worth waiting for), rather than for a lasting reason.
pub fn held_by_another_process(message: &str) -> bool {
    message.contains("Conflicting lock") || message.contains("Could not set lock")
}

/// DuckDB's message for a file another process holds names the process
/// deep inside; say plainly what it means and what to do.
fn explain_open_error(message: &str) -> String {
    if held_by_another_process(message) {
        format!(
            "another process has the database file open ({message}). Close it (a reader should open the file \
             read-only, and only while fdsync is idle: see docs/operations.md), then run again."
        )
    } else if ["Permission denied", "Operation not permitted", "Read-only file system"]
        .iter()
        .any(|m| message.contains(m))
    {
        format!(
            "{message}. fdsync must be able to write the file and create files beside it (its .wal and \
             .lock); check the permissions, that the disk is not mounted read-only, and `lsattr` for an \
             immutable flag, then run again; nothing stored was changed."
        )
    } else {
        message.to_owned()
    }
}

/// A connection to the warehouse at `path` that writes row groups of
/// `row_group_rows`. The file is attached rather than opened, as only ATTACH
/// takes a row group size, and so the writer's catalog is always
/// [`WAREHOUSE_ALIAS`] (a file opened directly below 192 MiB was named after
/// itself, which the run log's reader did not find). An in-memory database
/// spills into `.tmp` in the working directory, which a service may not be
/// able to write, so the file's own place (`<file>.tmp`, where DuckDB spills
/// for a file opened directly) is set again.
fn attach_with_row_groups(
    path: &Path,
    row_group_rows: usize,
    storage_version: Option<&str>,
) -> Result<(Connection, Instance), String> {
    let file = path
        .to_str()
        .ok_or("the path is not valid UTF-8, which DuckDB needs; set `[warehouse] duckdb` to a UTF-8 path")?;
    let instance = Instance::open_in_memory()?;
    let conn = instance.connection()?;
    let storage = storage_version
        .map(|v| format!(", STORAGE_VERSION {}", sql_string(v)))
        .unwrap_or_default();
    conn.execute_batch(&format!(
        "ATTACH {} AS {WAREHOUSE_ALIAS} (ROW_GROUP_SIZE {row_group_rows}{storage}); USE {WAREHOUSE_ALIAS}; \
         SET temp_directory = {};",
        sql_string(file),
        sql_string(&format!("{file}.tmp"))
    ))
    .map_err(|e| explain_open_error(&e.to_string()))?;
    Ok((conn, instance))
}

/// A subquery whose rows (`value`) are the strings of a bound JSON array
/// parameter ([`json_list`]): values from the network never become SQL text.
pub(super) const BOUND_LIST: &str = "(SELECT unnest(from_json(?::JSON, '[\"VARCHAR\"]')) AS value)";

/// `values` as the JSON array [`BOUND_LIST`] binds.
pub(super) fn json_list<S: serde::Serialize>(values: &[S]) -> String {
    serde_json::to_string(values).expect("strings serialize")
}

/// `value` as a SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

pub(crate) fn sql_err<'a>(table: &'a str, context: &'static str) -> impl FnOnce(duckdb::Error) -> SinkError + 'a {
    move |source| SinkError::Sql {
        table: table.to_owned(),
        context,
        source,
    }
}

/// Every row carries the commit that last wrote it: what changed since a
/// commit is then one range scan, which the lake publisher reads. Commits run
/// one at a time on the writer thread, so the sequence is also commit order.
pub const COMMIT_SEQ: &str = "_commit_seq";

/// The partitions a [`LoadRule::Replace`](crate::tables::LoadRule::Replace) commit replaced, even those left
/// empty: rows deleted leave no row behind to say so.
pub const REPLACED_LOG: &str = "_sync_replaced";

/// The lake partitions rows left when a commit changed their partition
/// column (an event's `filing_date`): the publish removes their old copies
/// there, where no row of the change lands.
pub const MOVES_LOG: &str = "_sync_lake_moves";

impl DuckDbSink {
    /// # Errors
    /// When the directory or file cannot be created or opened, or the schema
    /// cannot be created.
    pub fn open(path: &Path, settings: &Settings) -> Result<DuckDbSink, SinkError> {
        let open_err = |message: String| SinkError::Open {
            path: path.to_owned(),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| open_err(format!("creating {}: {e}", dir.display())))?;
        }
        let sink = Self::reopen(path, settings)?;
        let at = sink.layout_version()?;
        sink.create_schema()?;
        sink.migrate(at)?;
        Ok(sink)
    }

    /// Opens a warehouse whose schema this process already created.
    ///
    /// # Errors
    /// When the file cannot be opened; a file held by another process is named as such.
    pub fn reopen(path: &Path, settings: &Settings) -> Result<DuckDbSink, SinkError> {
        let open_err = |message: String| SinkError::Open {
            path: path.to_owned(),
            message,
        };
        // The format is chosen when the file is made: DuckDB refuses to open
        // an existing file at an older one (docs/warehouse.md says how to
        // move one).
        let version = (!path.exists()).then_some(settings.storage_version.as_str());
        let row_group_rows = if settings.holds_bulk_commits() {
            ROW_GROUP_ROWS
        } else {
            DUCKDB_ROW_GROUP_ROWS
        };
        let (conn, instance) = attach_with_row_groups(path, row_group_rows, version).map_err(open_err)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.execute_batch(&format!(
            "{}; SET threads = {}; {};",
            set_memory_limit(settings.duckdb_memory_limit_mb()),
            settings.threads.max(1),
            set_checkpoint_threshold(settings.checkpoint_threshold_mb())
        ))
        .map_err(|e| SinkError::Open {
            path: path.to_owned(),
            message: format!("setting the memory limit, threads and checkpoint threshold: {e}"),
        })?;
        Ok(DuckDbSink {
            conn,
            instance,
            path: path.to_owned(),
            merges: HashMap::new(),
            rows_since_open: 0,
            held: None,
            holds_bulk_commits: settings.holds_bulk_commits(),
            settings: settings.clone(),
            memory_limit_now_mb: Cell::new(settings.duckdb_memory_limit_mb()),
        })
    }

    /// Opens the file again on a new connection. A checkpoint that fails
    /// (DuckDB out of memory while compressing) leaves DuckDB's database
    /// invalidated: every later statement fails until it is attached again,
    /// so a daemon failed every commit until it was restarted. What was
    /// committed is in the file and its WAL, which the new connection reads.
    ///
    /// # Errors
    /// When the file cannot be opened again; the writer is then unusable.
    pub(super) fn reattach(&mut self) -> Result<(), SinkError> {
        // The old database goes first, so nothing of this process holds the file.
        let open_err = |message: String| SinkError::Open {
            path: self.path.clone(),
            message,
        };
        let placeholder = Instance::open_in_memory().map_err(open_err)?;
        let placeholder_conn = placeholder.connection().map_err(open_err)?;
        drop(std::mem::replace(&mut self.conn, placeholder_conn));
        drop(std::mem::replace(&mut self.instance, placeholder));
        let fresh = Self::reopen(&self.path, &self.settings)?;
        self.conn = fresh.conn;
        self.instance = fresh.instance;
        self.memory_limit_now_mb.set(fresh.memory_limit_now_mb.get());
        self.held = None;
        self.rows_since_open = 0;
        tracing::warn!(
            message = "DuckDB invalidated the warehouse after a checkpoint failed; opened it again.",
            path = %self.path.display()
        );
        Ok(())
    }

    /// Gives DuckDB a memory limit of `mb` MiB, if it has another. A limit
    /// that cannot be set leaves the one it had: a lower one only saves
    /// memory, and the whole one is set again before each merge.
    pub(super) fn limit_memory(&self, mb: u64) {
        if self.memory_limit_now_mb.get() == mb {
            return;
        }
        match self.conn.execute_batch(&set_memory_limit(mb)) {
            Ok(()) => self.memory_limit_now_mb.set(mb),
            Err(e) => {
                tracing::debug!(message = "Could not set DuckDB's memory limit.", memory_limit_mb = mb, error = %e)
            }
        }
    }

    /// Gives DuckDB its whole memory limit back ([`DuckDbSink::limit_memory`]).
    pub(super) fn unlimit_memory(&self) {
        self.limit_memory(self.settings.duckdb_memory_limit_mb());
    }

    /// Drops what DuckDB keeps cached beyond
    /// [`settings::CACHED_AFTER_SMALL_COMMIT_MB`] and gives it the whole
    /// limit back. DuckDB keeps the stored rows each small commit's merges
    /// read until its whole limit is full, so a run that finds little new
    /// would hold as much as a backfill; a lower limit for the merges
    /// themselves would run out where a join reads a wide range of a table.
    pub(super) fn trim_cache(&self) {
        self.limit_memory(settings::CACHED_AFTER_SMALL_COMMIT_MB);
        self.unlimit_memory();
    }

    /// Whether this connection has committed enough rows to be closed and
    /// opened again ([`REOPEN_AFTER_ROWS`]).
    pub fn wants_reopen(&self) -> bool {
        self.held.is_none() && self.rows_since_open >= self.settings.reopen_after_rows
    }

    /// Closes the file to open it again. Its closing checkpoint leaves row
    /// groups unmerged, as a bulk commit's does: merging them at every reopen
    /// compressed a backfill's rows again each time (8 and 12 s for the two
    /// reopens of a million news items, against nothing). The next checkpoint
    /// of a small commit, or the close at the end, merges them once.
    pub fn close_for_reopen(self) {
        if let Err(e) = self.conn.execute_batch(PAUSE_MERGES) {
            tracing::warn!(message = "Could not pause row-group merges before reopening.", error = %e);
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The warehouse's connection, for tools beside fdsync that query it as
    /// a user's SQL would (the benchmarks); fdsync's own SQL stays in the sink.
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// A second connection to the same database, on the warehouse, for a
    /// reader that wants its own ([`reader::BookkeepingReader::on`]).
    ///
    /// # Errors
    /// When DuckDB cannot open one.
    pub fn reading_connection(&self) -> Result<Connection, duckdb::Error> {
        let conn = self.conn.try_clone()?;
        conn.execute_batch(&format!("USE {WAREHOUSE_ALIAS}"))?;
        Ok(conn)
    }

    /// The bookkeeping reader on a connection of this writer's: the one way
    /// the run log is read, by `fdsync status` and by a run alike.
    ///
    /// # Errors
    /// When DuckDB cannot open a connection.
    pub fn bookkeeping(&self) -> Result<reader::BookkeepingReader, SinkError> {
        let conn = self
            .reading_connection()
            .map_err(sql_err("_sync_runs", "opening a reader of the run log"))?;
        Ok(reader::BookkeepingReader::on(conn))
    }

    /// The rows of `sql` with its text parameters bound, each read by `row`;
    /// failures name `table` and `context`.
    ///
    /// # Errors
    /// When the query cannot be prepared or run, or a row cannot be read.
    pub(super) fn rows<T, C: FromIterator<T>>(
        &self,
        (table, context): (&'static str, &'static str),
        sql: &str,
        params: &[&str],
        row: impl FnMut(&duckdb::Row<'_>) -> duckdb::Result<T>,
    ) -> Result<C, SinkError> {
        let mut stmt = self.conn.prepare(sql).map_err(sql_err(table, context))?;
        let rows = stmt
            .query_map(duckdb::params_from_iter(params), row)
            .map_err(sql_err(table, context))?;
        rows.collect::<Result<C, _>>().map_err(sql_err(table, context))
    }
}

#[cfg(test)]
mod tests;
