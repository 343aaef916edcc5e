//! The embedded DuckDB warehouse: DDL derived from [`crate::tables`], batches
//! appended to a staging table through the Arrow appender, then merged by the
//! table's load rule in the same transaction that moves the checkpoint. A large
//! batch whose keys are all new and distinct (a backfill's) skips the staging
//! table: only its keys are staged, to make sure, and its rows are appended.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow::record_batch::RecordBatch;
use chrono::Utc;
use duckdb::Connection;

use super::{Checkpoint, Commit, CommitStats, SinkError, StoredCheckpoint, TableBatch, batch_err};
use crate::batch::BatchBuilder;
use crate::tables::{self, ColType, LoadRule, TABLES, TableDef};

pub struct DuckDbSink {
    conn: Connection,
    path: PathBuf,
    /// Each table's merge statements, built once: their text never changes
    /// (the commit number is a parameter), so each is parsed once and kept
    /// prepared. DuckDB 2 still plans it again at every execution, which is
    /// why a backfill commits several pages at once (BENCHMARKS.md, ingest).
    merges: HashMap<&'static str, Merge>,
    /// The memory limit set, named when DuckDB runs out of it.
    memory_limit_mb: u64,
    /// Rows staged since the file was opened, and how many call for a reopen
    /// ([`DuckDbSink::wants_reopen`]).
    rows_since_open: usize,
    reopen_after_rows: usize,
    /// Bulk commits loaded in a transaction left open ([`DuckDbSink::commit_held`]).
    held: Option<Held>,
    /// Whether bulk commits may be held: [`Settings::holds_bulk_commits`].
    holds_bulk_commits: bool,
    /// The `checkpoint_threshold` set ([`Settings::checkpoint_threshold_mb`]).
    checkpoint_threshold_mb: u64,
}

/// Commits loaded in the writer's open transaction and not yet committed.
#[derive(Debug, Default)]
struct Held {
    commits: usize,
    /// Rows loaded per table since the transaction began.
    rows: HashMap<&'static str, usize>,
    /// The held commits' bookkeeping rows (request log, quota ledger) and
    /// checkpoints, loaded once when the transaction commits
    /// ([`DuckDbSink::land`]). Each was a statement or two per
    /// commit, 2-4 ms apiece whatever the rows: 1.2 s of a 300,000-item news
    /// backfill's 188 commits (BENCHMARKS.md, Ingest). They land in the
    /// same transaction as the rows they go with, so nothing changes for a
    /// reader or a crash.
    deferred: Vec<TableBatch>,
    checkpoints: Vec<Checkpoint>,
}

impl Held {
    /// `commit` without its bookkeeping rows and checkpoints, which `self`
    /// keeps for the end of the transaction.
    fn defer_bookkeeping(&mut self, commit: Commit) -> Commit {
        let (deferred, batches): (Vec<TableBatch>, Vec<TableBatch>) =
            commit.batches.into_iter().partition(|b| b.table.is_bookkeeping());
        self.deferred.extend(deferred);
        self.checkpoints.extend(commit.checkpoints);
        Commit {
            batches,
            checkpoints: Vec::new(),
        }
    }

    /// Whether `commit`, a small one ([`SMALL_COMMIT_ROWS`]), would take one
    /// of its tables past [`HELD_ROW_GROUPS`] whole row groups: the
    /// transaction then lands without it, its last row group at least three
    /// quarters full. Landing after it left a few hundred rows in a row group
    /// of their own, which a checkpoint's vacuum merges, together with the
    /// row groups between, into the last landing of a backfill when that one
    /// ends short: about 1.9 s of compressing again at the close of a
    /// million-item news backfill. A large commit (a group of whole price histories, up to
    /// 150,000 rows) lands with its transaction as before: landing without
    /// it would leave the last row group partly empty, and prices at 2,000
    /// companies ran 24 s to 30 s and 307 to 479 MiB that way.
    fn overflows_with(&self, commit: &Commit) -> bool {
        commit.batches.iter().any(|b| {
            let held = self.rows.get(b.table.name).copied().unwrap_or(0);
            let rows = b.batch.num_rows();
            held > 0 && rows <= SMALL_COMMIT_ROWS && held + rows > HELD_ROW_GROUPS * ROW_GROUP_ROWS
        })
    }

    /// Whether the transaction should commit now: once a table holds
    /// [`HELD_ROW_GROUPS`] of DuckDB's row groups. DuckDB writes a
    /// transaction's rows straight into the file, compressed, a row group at
    /// a time, and ends it with a partial row group; a checkpoint merges up
    /// to four adjacent row groups whose rows fit in one fewer (DuckDB 2's
    /// `RowGroupCollection::ScheduleVacuumTasks`), so with three whole ones
    /// or more between two partial ones, none ever merges. Small commits
    /// land just before this instead ([`Held::overflows_with`]).
    fn fills_row_groups(&self) -> bool {
        self.most_rows() >= HELD_ROW_GROUPS * ROW_GROUP_ROWS
    }

    /// The rows of the table that holds the most.
    fn most_rows(&self) -> usize {
        self.rows.values().copied().max().unwrap_or(0)
    }
}

/// The writer connection's DuckDB settings (`[warehouse]`).
#[derive(Debug, Clone)]
pub struct Settings {
    pub memory_limit_mb: u64,
    pub threads: u64,
    /// Rows committed before the writer closes the file and opens it again
    /// ([`REOPEN_AFTER_ROWS`] but in tests).
    pub reopen_after_rows: usize,
}

impl Settings {
    /// Whether bulk commits may be held in one transaction until it fills
    /// DuckDB's row groups ([`DuckDbSink::commit_held`]): from
    /// [`HOLD_FROM_MB`]. Until the transaction commits, DuckDB keeps the
    /// index entries of every key it loaded in memory, and buffers each
    /// table's rows until a row group is full.
    pub fn holds_bulk_commits(&self) -> bool {
        self.memory_limit_mb >= HOLD_FROM_MB
    }

    /// The WAL size at which DuckDB checkpoints: half the memory limit from
    /// a 64 MiB limit, DuckDB's own 16 MiB below it. After each checkpoint
    /// DuckDB starts a new row group and the next one merges it into the
    /// last, compressing that row group's strings again: at 16 MiB a news
    /// backfill compressed each row about ten times over, 40% of its time.
    /// Fewer checkpoints cost memory (the rows and index entries since the
    /// last one stay in memory), so the threshold follows the limit: 1 GiB
    /// ran out of memory at 48 MiB, and 24 MiB there was no faster, so
    /// small pods keep DuckDB's default (BENCHMARKS.md, Ingest).
    pub fn checkpoint_threshold_mb(&self) -> u64 {
        if self.memory_limit_mb >= 64 {
            self.memory_limit_mb / 2
        } else {
            16
        }
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            memory_limit_mb: 256,
            threads: 1,
            reopen_after_rows: REOPEN_AFTER_ROWS,
        }
    }
}

/// One table's statements for loading its staging table.
struct Merge {
    /// Creates the staging table anew, empty. A fresh table rather than a
    /// `DELETE`: temp tables are never checkpointed, so deleted rows kept
    /// their memory and the staging tables grew with every commit (82 MiB
    /// after a 60,000-item backfill).
    create_stage: String,
    /// Run in order with the commit number as their one parameter.
    statements: Vec<String>,
    /// For loads that merge by key: whether any staged key is stored
    /// already, and the plain `INSERT` that replaces the statements when none
    /// is. A merge joins the staged rows with the table, about 12 us a news
    /// row against 1 for the probe and 3 for the plain insert, and a
    /// backfill's keys are all new.
    new_keys_only: Option<NewKeysOnly>,
}

struct NewKeysOnly {
    /// One boolean row: true when a staged key is in the table.
    probe: String,
    /// Takes the commit number, as the statements do.
    insert: String,
    /// Creates the staging table anew with only the key's columns: what the
    /// probe reads when the rows themselves may go straight into the table.
    create_key_stage: String,
}

/// The fewest rows a merge statement takes when a batch is sliced: below
/// this a statement's fixed cost outweighs the memory it saves.
const MIN_SLICE_ROWS: usize = 256;

/// The fewest staged rows worth probing for stored keys: the probe and the
/// keys' staging cost 2-4 ms (each planned anew), a merge 5 ms plus about
/// 20 us a news row more than the plain append (BENCHMARKS.md, Ingest), and
/// the bookkeeping tables' one-row loads mostly update.
const MIN_PROBE_ROWS: usize = 100;

/// The fewest staged rows that make a transaction a bulk load, whose automatic
/// checkpoint does not merge row groups. After each checkpoint DuckDB starts
/// a new row group, and the next checkpoint's vacuum merges it into the one
/// before, compressing those rows' strings again: during a backfill every
/// row was compressed several times over, half of the checkpoints' time
/// (BENCHMARKS.md, Ingest). Left to merge, they are merged once, by the first
/// checkpoint after the backfill.
const BULK_ROWS: usize = 1000;

/// Rows of one table from which a transaction that DuckDB writes through
/// its WAL checkpoints as it commits. A table's rows under one row group
/// ([`ROW_GROUP_ROWS`]) are not a bulk append: DuckDB writes each of them to
/// the WAL, then compresses them again at the next checkpoint, which that
/// much WAL soon calls for. A `COMMIT` that checkpoints skips the WAL
/// write (DuckDB's `auto_checkpoint_skip_wal_threshold`), as the baseline's
/// single commit does at DuckDB's default threshold: a 100,000-item news
/// backfill's landing, under one of DuckDB's default row groups, wrote
/// 2 x 60 MB of WAL in 0.2 s (BENCHMARKS.md, Ingest). Only where bulk
/// commits are held ([`Settings::holds_bulk_commits`]), so that this is a
/// backfill landing; small pods' commits of ten price histories (50,000
/// rows) keep the configured threshold, since a checkpoint rewrites the
/// row group they append to.
const CHECKPOINT_ON_COMMIT_ROWS: usize = 50_000;

/// Tables whose `raw` records are long JSON documents, stored with ZSTD. A
/// news item is about 600 bytes, on which DuckDB's own choice (DICT_FSST) took
/// most of a news backfill's write time and kept the column 4x larger: 300,000
/// items' `raw`, 1.1-1.2 s and 70 MiB against 0.4 s and 18 MiB (BENCHMARKS.md,
/// "Stored compression of raw"). A price bar's 80 bytes gain nothing from it.
/// Warehouses made before keep DuckDB's choice: a column's compression is
/// fixed when it is created.
const ZSTD_RAW_TABLES: &[&str] = &["news_items", "news_headline_revisions"];

/// Stops checkpoints merging row groups ([`DuckDbSink::commit_open`]), until
/// [`RESUME_MERGES`] or the database is opened again.
const PAUSE_MERGES: &str = "SET GLOBAL max_vacuum_tasks = 0";
const RESUME_MERGES: &str = "RESET GLOBAL max_vacuum_tasks";

/// Rows a connection commits before the writer closes the file and opens it
/// again. While a database is open DuckDB keeps, outside its `memory_limit`,
/// what it knows of every row group and block written: a million-item news
/// backfill at a 32 MiB limit ended holding 13 MiB more of it than a
/// 100,000-item one, which made a small pod's peak grow with the data. A
/// database opened again loads only what it reads (BENCHMARKS.md, Memory).
pub const REOPEN_AFTER_ROWS: usize = 500_000;

/// Rows per row group of the warehouse where bulk commits are held
/// ([`Settings::holds_bulk_commits`]): the writer attaches the file with
/// this `ROW_GROUP_SIZE`, half DuckDB's default of 122,880. A transaction
/// that appends at least a row group to a table is a bulk append: DuckDB
/// writes its row groups into the file compressed as they fill, while the
/// rest of the load goes on, and moves them into the table whole as it
/// commits. Under a row group, it copies every row from the transaction's
/// storage into the table as it commits, then compresses it at the next
/// checkpoint: a 100,000-item news backfill spent 0.3 s copying and 0.5 s
/// compressing after its last page, and took 1.8-1.9 s against 1.4 s with
/// this size (BENCHMARKS.md, "Row groups of 61,440 rows"). Larger backfills
/// were no slower and peaked lower. Readers open the file with any row
/// group size; rows written before keep the row groups they have.
const ROW_GROUP_ROWS: usize = 61_440;

/// What the writer's connection calls the warehouse file it attaches.
const WAREHOUSE_ALIAS: &str = "warehouse";

/// Row groups of one table that end a held transaction
/// ([`Held::fills_row_groups`]): 368,640 rows, as many as before the row
/// groups were halved.
const HELD_ROW_GROUPS: usize = 6;

/// The most rows of a table a commit may bring to land a held transaction
/// without it ([`Held::overflows_with`]): news pages, not whole price histories.
const SMALL_COMMIT_ROWS: usize = ROW_GROUP_ROWS / 4;

/// The smallest `memory_limit_mb` that holds bulk commits
/// ([`Settings::holds_bulk_commits`]): news backfills held ran out of memory
/// at 64 MiB and passed at 80 (BENCHMARKS.md, Ingest), and real items may be
/// larger than the emulator's.
const HOLD_FROM_MB: u64 = 192;

/// Prepared statements kept per connection: a few per table.
const STATEMENT_CACHE: usize = 256;

/// The statement that sets DuckDB's `checkpoint_threshold` to `mb` MiB.
fn set_checkpoint_threshold(mb: u64) -> String {
    format!("SET checkpoint_threshold = '{mb}MiB'")
}

/// Quotes an identifier: several contract names (`at`, `date`, `type`) are keywords.
pub fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
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
/// [`ROW_GROUP_ROWS`]. The file is attached rather than opened, as only
/// ATTACH takes a row group size. Small pods hold no bulk commits, so no
/// commit of theirs fills a row group: they open the file directly and keep
/// DuckDB's size, and with it half as many row groups, of which DuckDB keeps
/// what it knows in memory while the file is open ([`REOPEN_AFTER_ROWS`]).
/// At 32 MiB the two peaked within the runs' spread of each other
/// (BENCHMARKS.md, Memory). An in-memory database spills into `.tmp` in
/// the working directory, which a service may not be able to write, so the
/// file's own place (`<file>.tmp`, where DuckDB spills for a file opened
/// directly) is set again.
fn attach_with_row_groups(path: &Path) -> Result<Connection, String> {
    let file = path
        .to_str()
        .ok_or("the path is not valid UTF-8, which DuckDB needs; set `[warehouse] duckdb` to a UTF-8 path")?;
    let conn = Connection::open_in_memory().map_err(|e| e.to_string())?;
    conn.execute_batch(&format!(
        "ATTACH {} AS {WAREHOUSE_ALIAS} (ROW_GROUP_SIZE {ROW_GROUP_ROWS}); USE {WAREHOUSE_ALIAS}; \
         SET temp_directory = {};",
        sql_string(file),
        sql_string(&format!("{file}.tmp"))
    ))
    .map_err(|e| explain_open_error(&e.to_string()))?;
    Ok(conn)
}

/// A SQL list of string literals, for `IN (...)`: DuckDB binds no list
/// parameter to `IN`, and keys come from the service, so each is escaped.
pub fn string_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| sql_string(v)).collect();
    quoted.join(", ")
}

/// `value` as a SQL string literal.
fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
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

/// Every row carries the commit that last wrote it: what changed since a
/// commit is then one range scan, which the lake publisher reads. Commits run
/// one at a time on the writer thread, so the sequence is also commit order.
pub const COMMIT_SEQ: &str = "_commit_seq";

/// The partitions a [`LoadRule::Replace`] commit replaced, even those left
/// empty: rows deleted leave no row behind to say so.
pub const REPLACED_LOG: &str = "_sync_replaced";

const COMMIT_LOG: &str = "
CREATE SEQUENCE IF NOT EXISTS _sync_commit_seq START 1;
CREATE TABLE IF NOT EXISTS _sync_replaced (
    _commit_seq BIGINT NOT NULL, table_name VARCHAR NOT NULL, \"partition\" VARCHAR NOT NULL
);
";

fn staging(table: &TableDef) -> String {
    ident(&format!("_stage_{}", table.name))
}

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
        sink.create_schema()?;
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
        let conn = if settings.holds_bulk_commits() {
            attach_with_row_groups(path).map_err(open_err)?
        } else {
            Connection::open(path).map_err(|e| open_err(explain_open_error(&e.to_string())))?
        };
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        conn.execute_batch(&format!(
            "SET memory_limit = '{}MiB'; SET threads = {}; {};",
            settings.memory_limit_mb.max(16),
            settings.threads.max(1),
            set_checkpoint_threshold(settings.checkpoint_threshold_mb())
        ))
        .map_err(|e| SinkError::Open {
            path: path.to_owned(),
            message: format!("setting the memory limit, threads and checkpoint threshold: {e}"),
        })?;
        Ok(DuckDbSink {
            conn,
            path: path.to_owned(),
            merges: HashMap::new(),
            memory_limit_mb: settings.memory_limit_mb.max(16),
            rows_since_open: 0,
            reopen_after_rows: settings.reopen_after_rows,
            held: None,
            holds_bulk_commits: settings.holds_bulk_commits(),
            checkpoint_threshold_mb: settings.checkpoint_threshold_mb(),
        })
    }

    /// Whether this connection has committed enough rows to be closed and
    /// opened again ([`REOPEN_AFTER_ROWS`]).
    pub fn wants_reopen(&self) -> bool {
        self.held.is_none() && self.rows_since_open >= self.reopen_after_rows
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

    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// The rows of `sql` with one text parameter, each read by `row`;
    /// failures name `table` and `context`.
    ///
    /// # Errors
    /// When the query cannot be prepared or run, or a row cannot be read.
    pub fn rows<T, C: FromIterator<T>>(
        &self,
        (table, context): (&'static str, &'static str),
        sql: &str,
        param: &str,
        row: impl FnMut(&duckdb::Row<'_>) -> duckdb::Result<T>,
    ) -> Result<C, SinkError> {
        let mut stmt = self.conn.prepare(sql).map_err(sql_err(table, context))?;
        let rows = stmt.query_map([param], row).map_err(sql_err(table, context))?;
        rows.collect::<Result<C, _>>().map_err(sql_err(table, context))
    }

    fn create_schema(&self) -> Result<(), SinkError> {
        for table in TABLES {
            let mut cols: Vec<String> = table
                .all_columns()
                .map(|c| {
                    let not_null = if table.key.contains(&c.name) { " NOT NULL" } else { "" };
                    let compression = if c.name == "raw" && ZSTD_RAW_TABLES.contains(&table.name) {
                        " USING COMPRESSION zstd"
                    } else {
                        ""
                    };
                    format!("{} {}{compression}{not_null}", ident(c.name), c.ty.sql())
                })
                .collect();
            // Only the bookkeeping tables declare their key. A data table's
            // key is kept by the loads, as in the Parquet sink: each stages its
            // rows once per key and merges them with `MERGE INTO`, which joins
            // whether or not an index exists and costs the same either way.
            // DuckDB keeps a declared key in an ART index, inserted twice per
            // row (the transaction's own, then the table's at commit): 17% of
            // a price backfill's time (BENCHMARKS.md, Ingest), for no faster
            // merges. Warehouses made before keep their keys; the loads work
            // on both.
            if !table.key.is_empty() && table.is_bookkeeping() {
                let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                cols.push(format!("PRIMARY KEY ({})", key.join(", ")));
            }
            let ddl = format!(
                "CREATE TABLE IF NOT EXISTS {name} ({}); ALTER TABLE {name} ADD COLUMN IF NOT EXISTS {COMMIT_SEQ} BIGINT;",
                cols.join(", "),
                name = ident(table.name),
            );
            self.conn
                .execute_batch(&ddl)
                .map_err(sql_err(table.name, "creating table"))?;
        }
        self.conn.execute_batch(COMMIT_LOG).map_err(sql_err(
            REPLACED_LOG,
            "creating the commit sequence and replaced-partition log",
        ))?;
        self.conn
            .execute_batch(MACRO_VIEWS)
            .map_err(sql_err("macro_observations", "creating macro_latest and macro_as_of"))?;
        Ok(())
    }

    /// Commits rows and checkpoints in one transaction, with any commits
    /// held before them.
    ///
    /// # Errors
    /// Any failure rolls the whole transaction back; nothing is half-written.
    pub fn commit(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.load_commit(commit, false)
    }

    /// Loads rows and checkpoints as [`DuckDbSink::commit`] does, but leaves
    /// the transaction open for the next commits until it fills DuckDB's row
    /// groups ([`Held::fills_row_groups`]). Each commit of a backfill used to
    /// end in a partial row group, and the next one started a new one; the
    /// first checkpoint after the load then merged them, compressing most
    /// rows a second time: a quarter of a backfill's time, and a file two
    /// thirds larger (BENCHMARKS.md, Ingest). Rows and checkpoints still
    /// commit together, so a crash loses the held commits whole and the next
    /// run reads them again. [`DuckDbSink::commit_held_now`] or the next
    /// [`DuckDbSink::commit`] commits them.
    ///
    /// # Errors
    /// Any failure rolls back this commit and those held with it.
    pub fn commit_held(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.load_commit(commit, self.holds_bulk_commits)
    }

    /// Commits the transaction [`DuckDbSink::commit_held`] left open, if any.
    ///
    /// # Errors
    /// When the commit fails: the held commits are rolled back.
    pub fn commit_held_now(&mut self) -> Result<(), SinkError> {
        let Some(mut held) = self.held.take() else {
            return Ok(());
        };
        if let Err(e) = self.land(&mut held) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(self.rolled_back(e, held.commits, true));
        }
        tracing::trace!(message = "Committed the held commits.", commits = held.commits);
        Ok(())
    }

    /// Ends the transaction `held` describes: loads the bookkeeping rows and
    /// checkpoints it deferred, as one commit's (each table's rows together,
    /// the last checkpoint of a partition winning as it would have one commit
    /// at a time), then `COMMIT`s.
    fn land(&mut self, held: &mut Held) -> Result<(), SinkError> {
        if !held.deferred.is_empty() || !held.checkpoints.is_empty() {
            let commit = Commit {
                batches: TableBatch::coalesce(std::mem::take(&mut held.deferred))?,
                checkpoints: std::mem::take(&mut held.checkpoints),
            };
            let seq = self.next_commit_seq()?;
            self.commit_inner(commit, seq)?;
        }
        self.commit_open(held)
    }

    /// `COMMIT`s the open transaction, which `held` describes. The automatic
    /// checkpoint a `COMMIT` may run does not merge row groups when the
    /// transaction was a bulk load ([`BULK_ROWS`]), and runs as it commits,
    /// instead of the WAL write, when a held transaction's rows go through
    /// the WAL ([`CHECKPOINT_ON_COMMIT_ROWS`]).
    fn commit_open(&self, held: &Held) -> Result<(), SinkError> {
        let bulk = held.rows.values().sum::<usize>() >= BULK_ROWS;
        if bulk {
            self.conn
                .execute_batch(PAUSE_MERGES)
                .map_err(sql_err("-", "pausing row-group merges for a bulk load"))?;
        }
        let checkpoint_now =
            self.holds_bulk_commits && (CHECKPOINT_ON_COMMIT_ROWS..ROW_GROUP_ROWS).contains(&held.most_rows());
        if checkpoint_now {
            self.conn
                .execute_batch(&set_checkpoint_threshold(0))
                .map_err(sql_err("-", "checkpointing as the commit lands"))?;
        }
        let committed = self.conn.execute_batch("COMMIT").map_err(sql_err("-", "commit"));
        if checkpoint_now {
            if let Err(e) = self
                .conn
                .execute_batch(&set_checkpoint_threshold(self.checkpoint_threshold_mb))
            {
                tracing::warn!(message = "Could not set the checkpoint threshold back.", error = %e);
            }
        }
        if bulk {
            // Back to DuckDB's default, so the next checkpoint of small
            // commits (or the one at close) merges what the bulk load left.
            if let Err(e) = self.conn.execute_batch(RESUME_MERGES) {
                tracing::warn!(message = "Could not resume row-group merges.", error = %e);
            }
        }
        committed
    }

    fn load_commit(&mut self, commit: Commit, may_hold: bool) -> Result<CommitStats, SinkError> {
        let started = std::time::Instant::now();
        let staged_rows: usize = commit.batches.iter().map(|b| b.batch.num_rows()).sum();
        self.rows_since_open = self.rows_since_open.saturating_add(staged_rows);
        if may_hold && self.held.as_ref().is_some_and(|held| held.overflows_with(&commit)) {
            self.commit_held_now()?;
        }
        let mut held = match self.held.take() {
            Some(held) => held,
            None => {
                self.conn
                    .execute_batch("BEGIN TRANSACTION")
                    .map_err(sql_err("-", "begin"))?;
                Held::default()
            }
        };
        held.commits += 1;
        for b in &commit.batches {
            *held.rows.entry(b.table.name).or_default() += b.batch.num_rows();
        }
        let commit = if may_hold {
            held.defer_bookkeeping(commit)
        } else {
            commit
        };
        let loaded = self.next_commit_seq().and_then(|seq| self.commit_inner(commit, seq));
        let committed = loaded.and_then(|stats| {
            let load_ms = started.elapsed().as_secs_f64() * 1e3;
            if may_hold && !held.fills_row_groups() {
                tracing::trace!(message = "Held.", load_ms, commits = held.commits);
                return Ok((stats, Some(std::mem::take(&mut held))));
            }
            self.land(&mut held)?;
            tracing::trace!(
                message = "Committed.",
                load_ms,
                total_ms = started.elapsed().as_secs_f64() * 1e3,
                commits = held.commits
            );
            Ok((stats, None))
        });
        match committed {
            Ok((stats, still_held)) => {
                self.held = still_held;
                Ok(stats)
            }
            Err(e) => {
                // After a failed COMMIT no transaction is left: this fails, harmlessly.
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(self.rolled_back(e, held.commits - 1, may_hold))
            }
        }
    }

    /// `e` from a transaction that also held `earlier` commits: explained,
    /// and those commits named in the log, since their callers were told
    /// they were loaded. Out of memory on a commit it could hold, the writer
    /// stops holding.
    fn rolled_back(&mut self, e: SinkError, earlier: usize, holding: bool) -> SinkError {
        if earlier > 0 {
            tracing::warn!(
                message = "A failed commit rolled back the commits held with it; the next run reads their pages again.",
                commits = earlier
            );
        }
        let e = self.explained(e);
        if holding && matches!(e, SinkError::OutOfMemory { .. }) {
            // What this writer holds is what ran out: it commits each bulk
            // load on its own from now on, as below HOLD_FROM_MB.
            self.holds_bulk_commits = false;
            tracing::warn!(
                message = "Out of memory while holding bulk commits; this writer no longer holds them.",
                memory_limit_mb = self.memory_limit_mb
            );
        }
        e
    }

    /// `e`, named for what the operator can do about it when it is DuckDB
    /// running out of memory or of disk.
    fn explained(&self, e: SinkError) -> SinkError {
        let SinkError::Sql { table, context, source } = e else {
            return e;
        };
        let message = source.to_string();
        let first_line = message.lines().next().unwrap_or_default().to_owned();
        if message.contains("Out of Memory") || message.contains("could not allocate block") {
            SinkError::OutOfMemory {
                table,
                context,
                limit_mb: self.memory_limit_mb,
                message: first_line,
            }
        } else if message.contains("No space left on device") {
            SinkError::DiskFull {
                path: self.path.clone(),
                message: first_line,
            }
        } else {
            SinkError::Sql { table, context, source }
        }
    }

    fn next_commit_seq(&self) -> Result<i64, SinkError> {
        self.conn
            .prepare_cached("SELECT nextval('_sync_commit_seq')")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(sql_err(REPLACED_LOG, "numbering the commit"))
    }

    fn commit_inner(&mut self, commit: Commit, seq: i64) -> Result<CommitStats, SinkError> {
        let mut stats = CommitStats::default();
        for TableBatch {
            table,
            batch,
            partitions,
        } in commit.batches
        {
            if batch.num_rows() == 0 && partitions.is_empty() {
                continue;
            }
            let written = self.load(table, batch, &partitions, seq)?;
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
            let TableBatch { table, batch, .. } = TableBatch::build(b)?;
            self.load(table, batch, &[], seq)?;
        }
        Ok(stats)
    }

    /// Loads one batch by its table's rule and returns the rows inserted or changed.
    fn load(
        &mut self,
        table: &'static TableDef,
        batch: RecordBatch,
        partitions: &[String],
        seq: i64,
    ) -> Result<u64, SinkError> {
        self.merges.entry(table.name).or_insert_with(|| {
            let (statements, new_keys_only) = merge_statements(table);
            Merge {
                create_stage: create_stage(table),
                statements,
                new_keys_only,
            }
        });
        let mut written = 0;
        for slice in self.slices(table, batch) {
            written += self.load_slice(table, slice, partitions, seq)?;
        }
        Ok(written)
    }

    /// `batch` cut into the slices merged one statement at a time. DuckDB's
    /// `MERGE INTO` holds a statement's whole input in memory:
    /// ten companies' price histories (50,000 rows) in one statement ran out
    /// of 48 MiB, the same rows in five statements of one transaction did
    /// not. A slice is at most a sixteenth of the memory limit, so at the
    /// default limit a commit of ten companies stays one statement.
    fn slices(&self, table: &TableDef, batch: RecordBatch) -> Vec<RecordBatch> {
        let rows = batch.num_rows();
        let bytes = batch.get_array_memory_size().max(1);
        let budget = usize::try_from(self.memory_limit_mb << 20).unwrap_or(usize::MAX) / 16;
        let per_slice = (rows.saturating_mul(budget) / bytes).max(MIN_SLICE_ROWS);
        // Replace deletes what the whole batch no longer holds, and History and
        // AppendOnChange compare with what is stored: those see the batch whole.
        let last_first = match table.load {
            // A keyless log keeps its rows in the order they came.
            LoadRule::Upsert => false,
            LoadRule::Append => !table.key.is_empty(),
            LoadRule::InsertOnce => true,
            LoadRule::Replace | LoadRule::History | LoadRule::AppendOnChange => return vec![batch],
        };
        if rows <= per_slice {
            return vec![batch];
        }
        let mut slices: Vec<RecordBatch> = (0..rows)
            .step_by(per_slice)
            .map(|offset| batch.slice(offset, per_slice.min(rows - offset)))
            .collect();
        // The last staged row of a key wins. An upsert's later slice overwrites
        // an earlier one; an insert-once keeps the first it sees, so its slices
        // go last first.
        if last_first {
            slices.reverse();
        }
        slices
    }

    fn load_slice(
        &mut self,
        table: &'static TableDef,
        batch: RecordBatch,
        partitions: &[String],
        seq: i64,
    ) -> Result<u64, SinkError> {
        let stage = staging(table);
        let staged_rows = batch.num_rows();
        let merge = &self.merges[table.name];
        // A batch of new keys, each once, goes into the table by the appender,
        // as the issue's baseline does: staging the rows and copying them over
        // cost twice the rows' appending. Only its keys are staged, to probe.
        let mut known_stored = false;
        if let Some(new_keys_only) = &merge.new_keys_only
            && staged_rows >= MIN_PROBE_ROWS
            && partitions.is_empty()
        {
            let keys = batch.project(&key_positions(table)).map_err(batch_err(table.name))?;
            if keys_are_distinct(table, &keys)? {
                self.stage(table, &new_keys_only.create_key_stage, keys)?;
                if !self.any_staged_key_stored(table, &new_keys_only.probe)? {
                    return self.append_new_rows(table, batch, seq);
                }
                known_stored = true;
            }
        }
        self.stage(table, &merge.create_stage, batch)?;
        if table.load == LoadRule::Replace && !partitions.is_empty() {
            let target = ident(table.name);
            let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
            let on: Vec<String> = key.iter().map(|k| format!("t.{k} = s.{k}")).collect();
            let part = &key[0];
            self.conn
                .execute(
                    &format!(
                        "DELETE FROM {target} t WHERE t.{part} IN ({}) \
                         AND NOT EXISTS (SELECT 1 FROM {stage} s WHERE {})",
                        string_list(partitions),
                        on.join(" AND ")
                    ),
                    [],
                )
                .map_err(sql_err(table.name, "removing rows the service no longer serves"))?;
            let mut log = self
                .conn
                .prepare_cached(&format!("INSERT INTO {REPLACED_LOG} VALUES (?, ?, ?)"))
                .map_err(sql_err(table.name, "logging the replaced partitions"))?;
            for partition in partitions {
                log.execute(duckdb::params![seq, table.name, partition.as_str()])
                    .map_err(sql_err(table.name, "logging the replaced partitions"))?;
            }
        }
        let merge_started = std::time::Instant::now();
        let all_new = match &merge.new_keys_only {
            Some(NewKeysOnly { probe, insert, .. }) if staged_rows >= MIN_PROBE_ROWS && !known_stored => {
                (!self.any_staged_key_stored(table, probe)?).then_some(insert)
            }
            _ => None,
        };
        let statements = match all_new {
            Some(insert) => std::slice::from_ref(insert),
            None => merge.statements.as_slice(),
        };
        let mut written = 0;
        for sql in statements {
            written = self
                .conn
                .prepare_cached(sql)
                .and_then(|mut s| s.execute([seq]))
                .map_err(sql_err(table.name, "merging the staged rows"))?;
        }
        tracing::trace!(
            message = "Loaded.",
            table = table.name,
            rows = written,
            merge_ms = merge_started.elapsed().as_secs_f64() * 1e3
        );
        Ok(written as u64)
    }

    /// `table`'s staging table made anew by `create`, holding `batch`.
    fn stage(&self, table: &TableDef, create: &str, batch: RecordBatch) -> Result<(), SinkError> {
        self.conn
            .execute_batch(create)
            .map_err(sql_err(table.name, "preparing the staging table"))?;
        let mut appender = self
            .conn
            .appender_to_catalog_and_db(&format!("_stage_{}", table.name), "temp", "main")
            .map_err(sql_err(table.name, "opening the appender"))?;
        appender
            .append_record_batch(batch)
            .map_err(sql_err(table.name, "appending the batch"))?;
        appender.flush().map_err(sql_err(table.name, "flushing the appender"))
    }

    fn any_staged_key_stored(&self, table: &TableDef, probe: &str) -> Result<bool, SinkError> {
        self.conn
            .prepare_cached(probe)
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(sql_err(table.name, "looking up the staged keys"))
    }

    /// Appends `batch`, whose keys are all new and distinct, to `table` with
    /// the commit number, by column name: a warehouse whose columns were
    /// added over versions may hold them in another order.
    fn append_new_rows(&self, table: &TableDef, batch: RecordBatch, seq: i64) -> Result<u64, SinkError> {
        let rows = batch.num_rows();
        let mut fields: Vec<arrow::datatypes::FieldRef> = batch.schema().fields().iter().cloned().collect();
        fields.push(std::sync::Arc::new(arrow::datatypes::Field::new(
            COMMIT_SEQ,
            arrow::datatypes::DataType::Int64,
            false,
        )));
        let mut columns = batch.columns().to_vec();
        columns.push(std::sync::Arc::new(arrow::array::Int64Array::from_value(seq, rows)));
        let with_seq = RecordBatch::try_new(std::sync::Arc::new(arrow::datatypes::Schema::new(fields)), columns)
            .map_err(batch_err(table.name))?;
        let names: Vec<&str> = table.all_columns().map(|c| c.name).chain([COMMIT_SEQ]).collect();
        let mut appender = self
            .conn
            .appender_with_columns(table.name, &names)
            .map_err(sql_err(table.name, "opening the appender"))?;
        appender
            .append_record_batch(with_seq)
            .map_err(sql_err(table.name, "appending new rows"))?;
        appender.flush().map_err(sql_err(table.name, "appending new rows"))?;
        tracing::trace!(message = "Appended.", table = table.name, rows);
        Ok(rows as u64)
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

/// `table`'s key columns in the key's order, each with where it is in a batch.
fn key_columns(table: &TableDef) -> impl Iterator<Item = (usize, &'static tables::Column)> + '_ {
    table
        .key
        .iter()
        .filter_map(|k| table.all_columns().enumerate().find(|(_, c)| c.name == *k))
}

fn key_positions(table: &TableDef) -> Vec<usize> {
    key_columns(table).map(|(position, _)| position).collect()
}

/// Whether no row of `keys` (a batch's key columns) occurs twice: were one
/// to, its last row would have to win.
fn keys_are_distinct(table: &TableDef, keys: &RecordBatch) -> Result<bool, SinkError> {
    let converter = arrow::row::RowConverter::new(
        keys.columns()
            .iter()
            .map(|k| arrow::row::SortField::new(k.data_type().clone()))
            .collect(),
    )
    .map_err(batch_err(table.name))?;
    let rows = converter
        .convert_columns(keys.columns())
        .map_err(batch_err(table.name))?;
    let mut seen = std::collections::HashSet::with_capacity(rows.num_rows());
    Ok(rows.iter().all(|row| seen.insert(row)))
}

/// `CREATE OR REPLACE` of `table`'s staging table: its columns, JSON as text.
fn create_stage(table: &TableDef) -> String {
    let stage_cols: Vec<String> = table
        .all_columns()
        .map(|c| {
            let ty = if c.ty == ColType::Json { "VARCHAR" } else { c.ty.sql() };
            format!("{} {ty}", ident(c.name))
        })
        .collect();
    format!(
        "CREATE OR REPLACE TEMP TABLE {} ({})",
        staging(table),
        stage_cols.join(", ")
    )
}

/// The commit number in a merge statement: its one parameter.
const SEQ_PARAM: &str = "CAST($1 AS BIGINT)";

/// The statements that load `table`'s staging table into it by its load rule,
/// in order; each takes the commit number as its one parameter, and the last
/// one's count is the rows written. With them, for a load that merges by
/// key, the probe and plain insert that do the same when every staged key is
/// new.
fn merge_statements(table: &TableDef) -> (Vec<String>, Option<NewKeysOnly>) {
    let stage = staging(table);
    let target = ident(table.name);
    let cols: Vec<String> = table.all_columns().map(|c| ident(c.name)).collect();
    let col_list = format!("{}, {COMMIT_SEQ}", cols.join(", "));
    let s_cols: Vec<String> = cols.iter().map(|c| format!("s.{c}")).collect();
    let s_cols = format!("{}, {SEQ_PARAM}", s_cols.join(", "));
    let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
    let key_eq = |a: &str, b: &str, key: &[String]| -> String {
        let on: Vec<String> = key.iter().map(|k| format!("{a}.{k} = {b}.{k}")).collect();
        on.join(" AND ")
    };
    // The last staged row of each key wins: a page may carry a record twice.
    let newest_staged = |by: &[String]| {
        format!(
            "SELECT * FROM {stage} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY rowid DESC) = 1",
            by.join(", ")
        )
    };
    // What replaces a merge by key when no staged key is stored.
    let new_keys_only = || NewKeysOnly {
        probe: format!(
            "SELECT EXISTS (SELECT 1 FROM {stage} s JOIN {target} t ON {})",
            key_eq("s", "t", &key)
        ),
        insert: format!(
            "INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM ({}) s",
            newest_staged(&key)
        ),
        create_key_stage: {
            let key_cols: Vec<String> = key_columns(table)
                .map(|(_, c)| format!("{} {}", ident(c.name), c.ty.sql()))
                .collect();
            format!("CREATE OR REPLACE TEMP TABLE {stage} ({})", key_cols.join(", "))
        },
    };
    let mut by_key = None;
    let own_values_equal = |a: &str, b: &str| -> Vec<String> {
        table
            .columns
            .iter()
            .filter(|c| !table.key.contains(&c.name))
            .map(|c| {
                let n = ident(c.name);
                format!("{a}.{n} IS NOT DISTINCT FROM {b}.{n}")
            })
            .collect()
    };
    let mut statements = Vec::new();
    let last = match table.load {
        LoadRule::Append if key.is_empty() => {
            format!("INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM {stage} s")
        }
        // The same join DuckDB 2 plans for `INSERT ... ON CONFLICT DO
        // NOTHING` (its `bind_insert.cpp` binds every `ON CONFLICT` as a
        // `MERGE INTO`), which needs no declared key.
        LoadRule::Append | LoadRule::InsertOnce => {
            by_key = Some(new_keys_only());
            format!(
                "INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM ({}) s ANTI JOIN {target} t ON {}",
                newest_staged(&key),
                key_eq("t", "s", &key)
            )
        }
        LoadRule::History => {
            let on = key_eq("t", "s", &key);
            let distinct = newest_staged(&key);
            // Seen again: only the last sighting moves.
            statements.push(format!(
                "UPDATE {target} t SET last_seen_at = s.last_seen_at, {COMMIT_SEQ} = {SEQ_PARAM} \
                 FROM ({distinct}) s WHERE {on} AND s.last_seen_at > t.last_seen_at"
            ));
            format!(
                "INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM ({distinct}) s ANTI JOIN {target} t ON {on}"
            )
        }
        LoadRule::AppendOnChange => {
            let (part, order) = key.split_at(key.len() - 1);
            let order = &order[0];
            let unchanged = own_values_equal("t", "s");
            format!(
                "INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM ({}) s \
                 LEFT JOIN (SELECT * FROM {target} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY {order} DESC) = 1) t \
                 ON {} WHERE (t.{} IS NULL OR NOT ({})) \
                 AND NOT EXISTS (SELECT 1 FROM {target} k WHERE {})",
                newest_staged(part),
                part.join(", "),
                key_eq("t", "s", part),
                part[0],
                unchanged.join(" AND "),
                key_eq("k", "s", &key)
            )
        }
        LoadRule::Upsert | LoadRule::Replace => {
            // The staged row, with stored values kept where the new one is NULL
            // (`keep_stored`), and skipped when older than the stored version.
            let merged = |c: &crate::tables::Column| -> String {
                let q = ident(c.name);
                if table.keep_stored.contains(&c.name) {
                    format!("COALESCE(s.{q}, t.{q})")
                } else {
                    format!("s.{q}")
                }
            };
            let set: Vec<String> = table
                .all_columns()
                .filter(|c| !table.key.contains(&c.name))
                .map(|c| format!("{} = {}", ident(c.name), merged(c)))
                .chain(std::iter::once(format!("{COMMIT_SEQ} = {SEQ_PARAM}")))
                .collect();
            let mut only_if = Vec::new();
            if let Some(v) = table.newer_by {
                let v = ident(v);
                only_if.push(format!("s.{v} >= t.{v}"));
            }
            if table.lineage {
                // A row whose content is unchanged is not rewritten: its lineage
                // (_run_id, _fetched_at) keeps saying when it really arrived.
                let mut same: Vec<String> = table
                    .columns
                    .iter()
                    .filter(|c| !table.key.contains(&c.name))
                    .map(|c| format!("{} IS NOT DISTINCT FROM t.{}", merged(c), ident(c.name)))
                    .collect();
                // Tables fed by several routes compare content only: each route
                // serves the same record in its own envelope.
                if table.keep_stored.is_empty() {
                    same.push("s.raw::VARCHAR IS NOT DISTINCT FROM t.raw::VARCHAR".into());
                }
                if !same.is_empty() {
                    only_if.push(format!("NOT ({})", same.join(" AND ")));
                }
            }
            // Bookkeeping rows (checkpoints, runs) always take the newest values.
            let only_if = if only_if.is_empty() {
                String::new()
            } else {
                format!(" AND {}", only_if.join(" AND "))
            };
            by_key = Some(new_keys_only());
            format!(
                "MERGE INTO {target} t USING ({}) s ON {} \
                 WHEN MATCHED{only_if} THEN UPDATE SET {} \
                 WHEN NOT MATCHED THEN INSERT ({col_list}) VALUES ({s_cols})",
                newest_staged(&key),
                key_eq("t", "s", &key),
                set.join(", ")
            )
        }
    };
    statements.push(last);
    (statements, by_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::date32;
    use crate::sink::Checkpoint;
    use chrono::NaiveDate;

    /// 30,000 price bars of one company on distinct days, then its first day
    /// again closing at `last_close`: the two rows of that key land in
    /// different slices at a 32 MiB limit.
    fn prices_with_a_repeat(last_close: f64) -> TableBatch {
        price_days((0..=30_000i64).map(|i| if i == 30_000 { (0, last_close) } else { (i, 1.0) }))
    }

    /// One company's bars: a day's number from 1950-01-01 and its close.
    fn price_days(days: impl Iterator<Item = (i64, f64)>) -> TableBatch {
        let table = tables::table("prices_daily").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        let day0 = NaiveDate::from_ymd_opt(1950, 1, 1).unwrap();
        for (day, close) in days {
            let date = day0 + chrono::Duration::days(day);
            b.row()
                .text(Some("S0001"))
                .date(Some(date))
                .text(Some("S1"))
                .int(Some(i64::from(date32(date)) * 86_400_000))
                .float(Some(1.0))
                .float(Some(1.0))
                .float(Some(1.0))
                .float(Some(close))
                .int(Some(100))
                .end(
                    r#"{"padding":"a raw record long enough to make the batch several MiB"}"#,
                    "/x",
                );
        }
        TableBatch::build(b).unwrap()
    }

    fn text_rows(texts: &[&str]) -> TableBatch {
        let table = tables::table("event_item_texts").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        for (i, text) in texts.iter().enumerate() {
            // Every row but the last has its own key; the last repeats the first's.
            let accession = if i + 1 == texts.len() {
                "0".to_owned()
            } else {
                i.to_string()
            };
            b.row()
                .text(Some(&accession))
                .text(Some("8.01"))
                .text(Some("S0001"))
                .text(Some(text))
                .end("{}", "/x");
        }
        TableBatch::build(b).unwrap()
    }

    /// The first commit's keys are all new (a plain insert), the second's all
    /// stored (the upsert); a key staged twice keeps its last row either way.
    #[test]
    fn new_keys_and_stored_keys_both_load_by_the_tables_rule() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        let one = |sink: &DuckDbSink, sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        let commit = |sink: &mut DuckDbSink, batch: TableBatch| {
            sink.commit(Commit {
                batches: vec![batch],
                checkpoints: Vec::new(),
            })
            .unwrap();
        };
        for last_close in [7.0, 9.0] {
            commit(&mut sink, prices_with_a_repeat(last_close));
            assert_eq!(one(&sink, "SELECT count(*)::VARCHAR FROM prices_daily"), "30000");
            assert_eq!(
                one(
                    &sink,
                    "SELECT close::VARCHAR FROM prices_daily WHERE date = DATE '1950-01-01'"
                ),
                format!("{last_close:.1}")
            );
        }
        let texts = |last: &str| {
            let long = "x".repeat(40);
            let mut texts = vec![long.as_str(); 2000];
            texts.push(last);
            text_rows(&texts)
        };
        for last in ["the first", "the second"] {
            commit(&mut sink, texts(last));
        }
        // Insert once: the first load's last row of the key, never replaced.
        assert_eq!(one(&sink, "SELECT count(*)::VARCHAR FROM event_item_texts"), "2000");
        assert_eq!(
            one(&sink, "SELECT text FROM event_item_texts WHERE accession = '0'"),
            "the first"
        );
    }

    /// A batch whose keys are all new and distinct is appended as it is, with
    /// its commit's number; one with a stored key is merged by the table's rule.
    #[test]
    fn a_batch_of_new_keys_is_appended_and_one_with_stored_keys_merged() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        let mut commit = |days: std::ops::Range<i64>, close: f64| {
            sink.commit(Commit {
                batches: vec![price_days(days.map(|d| (d, close)))],
                checkpoints: Vec::new(),
            })
            .unwrap()
            .rows_written
        };
        assert_eq!(commit(0..2000, 1.0), 2000, "all new: appended");
        assert_eq!(commit(1000..3000, 2.0), 2000, "half stored: merged");
        assert_eq!(commit(3000..4000, 3.0), 1000, "all new again: appended");
        let one = |sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(
            one(
                "SELECT string_agg(close::VARCHAR || ' x' || n, ', ' ORDER BY close) FROM \
                 (SELECT close, count(*) n FROM prices_daily GROUP BY close)"
            ),
            "1.0 x1000, 2.0 x2000, 3.0 x1000"
        );
        // Each commit's rows carry its number, whichever way they went in.
        assert_eq!(
            one("SELECT string_agg(n::VARCHAR, ', ' ORDER BY s) FROM \
                 (SELECT _commit_seq s, count(*) n FROM prices_daily GROUP BY s)"),
            "1000, 2000, 1000"
        );
        assert_eq!(
            one(
                "SELECT count(*)::VARCHAR FROM prices_daily WHERE json_extract_string(raw, '$.padding') IS NULL \
                 OR _run_id IS NULL OR _fetched_at IS NULL"
            ),
            "0"
        );
    }

    /// News items' `raw` is stored with ZSTD, in both tables it goes to,
    /// loaded the way a backfill loads it; a price bar's stays DuckDB's choice.
    #[test]
    fn news_raw_records_are_stored_with_zstd_and_price_bars_with_duckdbs_choice() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        let mut rows = crate::records::Rows::new("run-1", "/api/v1/news/feed", Utc::now());
        for n in 0..3000 {
            let item = format!(
                r#"{{"id":"n_{n:010}","publishedAt":"2026-11-01T00:00:00Z","firstSeenAt":"2026-11-01T00:00:01.000Z",
                "updatedAt":"2026-11-01T00:00:01.000Z","headline":"Company {n} reports: markets update",
                "snippet":"Company {n} shared an update on markets.","url":"https://example.invalid/news/n_{n:010}",
                "source":{{"id":"sec_edgar","name":"SEC EDGAR","licenceClass":"public","attribution":"Source: U.S. SEC EDGAR",
                "displayPolicy":"full"}},"tickers":["S{n}"],"ciks":["{n:010}"],"people":[],"indicators":[],
                "topics":["markets"],"storylineId":"st_{n:08}","importance":50,"flash":false,"form":"8-K"}}"#
            );
            let raw = serde_json::value::RawValue::from_string(item).unwrap();
            assert!(crate::records::news_item(&mut rows, &raw).is_some());
        }
        let mut batches = rows.into_batches().unwrap();
        batches.push(price_days((0..3000).map(|d| (d, 1.0))));
        sink.commit(Commit {
            batches,
            checkpoints: Vec::new(),
        })
        .unwrap();
        sink.conn.execute_batch("CHECKPOINT").unwrap();
        let raw_compression = |table: &str| -> String {
            sink.conn
                .query_row(
                    &format!(
                        "SELECT string_agg(DISTINCT compression, ', ' ORDER BY compression) FROM pragma_storage_info('{table}') \
                         WHERE column_name = 'raw' AND segment_type <> 'VALIDITY'"
                    ),
                    [],
                    |r| r.get(0),
                )
                .unwrap()
        };
        assert_eq!(raw_compression("news_items"), "ZSTD");
        assert_eq!(raw_compression("news_headline_revisions"), "ZSTD");
        assert_ne!(raw_compression("prices_daily"), "ZSTD");
    }

    /// `prices_daily` as an earlier version made it: its columns in another
    /// order, its key declared.
    const OLDER_PRICES_DAILY: &str = "CREATE TABLE prices_daily (_commit_seq BIGINT, raw JSON, close DOUBLE, \
         volume BIGINT, company_key VARCHAR NOT NULL, date DATE NOT NULL, symbol VARCHAR, t_ms BIGINT, \
         open DOUBLE, high DOUBLE, low DOUBLE, _route VARCHAR, _run_id VARCHAR, _fetched_at TIMESTAMPTZ, \
         PRIMARY KEY (company_key, date))";

    /// A warehouse at `path` whose `prices_daily` an earlier version made.
    fn open_older_warehouse(path: &Path) -> DuckDbSink {
        Connection::open(path)
            .unwrap()
            .execute_batch(OLDER_PRICES_DAILY)
            .unwrap();
        DuckDbSink::open(path, &Settings::default()).unwrap()
    }

    fn primary_keys(conn: &Connection) -> String {
        conn.query_row(
            "SELECT coalesce(string_agg(table_name, ', ' ORDER BY table_name), '') FROM duckdb_constraints() \
             WHERE constraint_type = 'PRIMARY KEY' AND NOT starts_with(table_name, '_sync_')",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    /// A new warehouse declares only the bookkeeping tables' keys; a
    /// warehouse made when entity tables declared theirs keeps them, and the
    /// same merges load it, with a key updated twice in one transaction.
    #[test]
    fn entity_keys_are_kept_by_the_loads_with_or_without_a_declared_key() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = DuckDbSink::open(&dir.path().join("new.duckdb"), &Settings::default()).unwrap();
        assert_eq!(primary_keys(&fresh.conn), "", "no data table declares its key");
        let bookkeeping: i64 = fresh
            .conn
            .query_row(
                "SELECT count(*) FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' \
                 AND table_name IN ('_sync_checkpoints', '_sync_runs')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(bookkeeping, 2);

        let path = dir.path().join("older.duckdb");
        let mut sink = open_older_warehouse(&path);
        for close in [1.0, 2.0, 3.0] {
            sink.commit_held(Commit {
                batches: vec![price_days((0..2000).map(|d| (d, close)))],
                checkpoints: Vec::new(),
            })
            .unwrap();
        }
        sink.commit_held_now().unwrap();
        sink.commit(Commit {
            batches: vec![price_days((1990..2010).map(|d| (d, 4.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
        let closes: String = sink
            .conn
            .query_row(
                "SELECT string_agg(close::VARCHAR || ' x' || n, ', ' ORDER BY close) FROM \
                 (SELECT close, count(*) n FROM prices_daily GROUP BY close)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(closes, "3.0 x1990, 4.0 x20");
        assert_eq!(primary_keys(&sink.conn), "prices_daily");
    }

    /// New rows go in by column name: a warehouse made by another version
    /// may hold the same columns in another order.
    #[test]
    fn new_rows_are_appended_by_column_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let mut sink = open_older_warehouse(&path);
        let written = sink
            .commit(Commit {
                batches: vec![price_days((0..2000).map(|d| (d, 5.0)))],
                checkpoints: Vec::new(),
            })
            .unwrap()
            .rows_written;
        assert_eq!(written, 2000);
        let matching: i64 = sink
            .conn
            .query_row(
                "SELECT count(*) FROM prices_daily WHERE close = 5.0 AND volume = 100 AND company_key = 'S0001' \
                 AND symbol = 'S1' AND _run_id = 'run-1' AND _route = '/x' AND _commit_seq IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(matching, 2000);
    }

    /// Whether the writer's connection is still the one that created the
    /// temp table `marker` (a temp table lives as long as its connection).
    async fn first_connection(sink: &crate::sink::SinkHandle) -> bool {
        sink.call(|s| {
            s.connection().query_row(
                "SELECT count(*) FROM duckdb_tables() WHERE table_name = 'marker'",
                [],
                |r| r.get::<_, i64>(0),
            )
        })
        .await
        .unwrap()
        .unwrap()
            == 1
    }

    #[tokio::test]
    async fn the_writer_opens_the_file_again_after_enough_rows_and_keeps_them_all() {
        let dir = tempfile::tempdir().unwrap();
        let options = crate::sink::SinkOptions {
            duckdb: Settings {
                reopen_after_rows: 1_000,
                ..Settings::default()
            },
            ..crate::sink::SinkOptions::default()
        };
        let sink = crate::sink::SinkHandle::open_duckdb_with(dir.path().join("w.duckdb"), options)
            .await
            .unwrap();
        sink.call(|s| s.connection().execute_batch("CREATE TEMP TABLE marker (x INT)"))
            .await
            .unwrap()
            .unwrap();
        let days = |range: std::ops::Range<i64>| Commit {
            batches: vec![price_days(range.map(|day| (day, 1.0)))],
            checkpoints: Vec::new(),
        };
        let stored = || {
            sink.call(|s| {
                s.connection().query_row(
                    "SELECT count(*), current_setting('max_vacuum_tasks') FROM prices_daily",
                    [],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
                )
            })
        };
        sink.commit(days(0..600)).await.unwrap();
        assert!(first_connection(&sink).await, "600 rows: not yet");
        sink.commit(days(600..1_200)).await.unwrap();
        assert!(!first_connection(&sink).await, "1,200 rows: opened again");
        // Every row is there, and the pause the reopen set for its closing
        // checkpoint did not outlive it.
        assert_eq!(stored().await.unwrap().unwrap(), (1_200, 100));
        sink.commit(days(1_200..1_300)).await.unwrap();
        assert_eq!(stored().await.unwrap().unwrap(), (1_300, 100));
        sink.close().await;
    }

    /// With a checkpoint at every commit: the row groups two bulk loads
    /// leave stay apart, and the next small commit's checkpoint merges them.
    #[test]
    fn a_bulk_load_leaves_row_groups_for_the_next_small_commit_to_merge() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        sink.conn.execute_batch("SET checkpoint_threshold = '1KB'").unwrap();
        let table = tables::table("event_item_texts").unwrap();
        let mut commit_texts = |from: usize, count: usize| {
            let mut b = BatchBuilder::new(table, "run-1", Utc::now());
            for accession in from..from + count {
                b.row()
                    .text(Some(&accession.to_string()))
                    .text(Some("8.01"))
                    .text(Some("S0001"))
                    .text(Some("an item's text"))
                    .end("{}", "/x");
            }
            sink.commit(Commit {
                batches: vec![TableBatch::build(b).unwrap()],
                checkpoints: Vec::new(),
            })
            .unwrap();
            sink.conn
                .query_row(
                    "SELECT count(DISTINCT row_group_id)::VARCHAR || ' row groups, ' || \
                     current_setting('max_vacuum_tasks')::VARCHAR || ' vacuum tasks' \
                     FROM pragma_storage_info('event_item_texts')",
                    [],
                    |r| r.get::<_, String>(0),
                )
                .unwrap()
        };
        assert_eq!(commit_texts(0, BULK_ROWS), "1 row groups, 100 vacuum tasks");
        assert_eq!(commit_texts(BULK_ROWS, BULK_ROWS), "2 row groups, 100 vacuum tasks");
        // Enough rows for the commit's log to pass the 1 KB threshold.
        assert_eq!(commit_texts(2 * BULK_ROWS, 100), "1 row groups, 100 vacuum tasks");
    }

    /// Held commits land together, with their checkpoints: a writer that
    /// stops before they land (a crash) leaves neither their rows nor their
    /// checkpoints, and one that lands them leaves both.
    #[test]
    fn held_commits_land_together_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let commit = |days: std::ops::Range<i64>, cursor: &str| Commit {
            batches: vec![price_days(days.map(|d| (d, 1.0)))],
            checkpoints: vec![Checkpoint {
                pipeline: "prices".into(),
                partition: "S0001".into(),
                cursor: cursor.into(),
            }],
        };
        let stored = |path: &Path| {
            let sink = DuckDbSink::open(path, &Settings::default()).unwrap();
            let rows: i64 = sink
                .conn
                .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
                .unwrap();
            let cursor = sink.checkpoints("prices").unwrap().remove("S0001").map(|c| c.cursor);
            (rows, cursor)
        };
        let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
        sink.commit_held(commit(0..2000, "a")).unwrap();
        sink.commit_held(commit(2000..4000, "b")).unwrap();
        assert_eq!(
            sink.held.as_ref().map(|h| (h.commits, h.checkpoints.len())),
            Some((2, 2)),
            "both held, their checkpoints loaded when they land"
        );
        drop(sink);
        assert_eq!(stored(&path), (0, None), "a crash loses them whole");

        let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
        sink.commit_held(commit(0..2000, "a")).unwrap();
        sink.commit_held(commit(2000..4000, "b")).unwrap();
        sink.commit_held_now().unwrap();
        assert!(sink.held.is_none());
        drop(sink);
        assert_eq!(
            stored(&path),
            (4000, Some("b".to_owned())),
            "landed: rows and checkpoint"
        );

        // A small pod's writer does not hold: each commit lands at once.
        let small = Settings {
            memory_limit_mb: 64,
            ..Settings::default()
        };
        let mut sink = DuckDbSink::open(&path, &small).unwrap();
        sink.commit_held(commit(4000..6000, "c")).unwrap();
        assert!(sink.held.is_none());
    }

    /// A writer that runs out of memory on a commit it could hold reports it,
    /// rolled back, and commits each load on its own from then on.
    #[test]
    fn a_writer_out_of_memory_while_holding_stops_holding() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        let commit = |from: i64| Commit {
            batches: vec![price_days((from..from + 100_000).map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        };
        sink.conn.execute_batch("SET memory_limit = '1MiB'").unwrap();
        let failed = sink.commit_held(commit(0)).unwrap_err();
        assert!(matches!(failed, SinkError::OutOfMemory { .. }), "{failed}");
        assert!(sink.held.is_none() && !sink.holds_bulk_commits);
        sink.conn.execute_batch("SET memory_limit = '256MiB'").unwrap();
        let stored = |sink: &DuckDbSink| -> i64 {
            sink.conn
                .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(stored(&sink), 0, "rolled back");
        sink.commit_held(commit(0)).unwrap();
        assert!(sink.held.is_none(), "committed on its own");
        assert_eq!(stored(&sink), 100_000);
    }

    /// A held transaction commits once a table holds six row groups, and
    /// a checkpoint (merges allowed) leaves the row groups it wrote as they
    /// are. Committed one by one, each of these loads ended in a partial row
    /// group, and the checkpoint merged them.
    #[test]
    fn held_commits_land_in_row_groups_no_checkpoint_merges() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        let mut held_after = |from: i64| {
            let days = (from..from + 150_000).map(|d| (d, 1.0));
            sink.commit_held(Commit {
                batches: vec![price_days(days)],
                checkpoints: Vec::new(),
            })
            .unwrap();
            sink.held.as_ref().map_or(0, |h| h.commits)
        };
        assert_eq!(held_after(0), 1);
        assert_eq!(held_after(150_000), 2);
        assert_eq!(held_after(300_000), 0, "450,000 rows: six row groups and more");
        sink.conn.execute_batch("FORCE CHECKPOINT").unwrap();
        assert_eq!(
            price_row_groups(&sink.conn),
            "61440, 61440, 61440, 61440, 61440, 61440, 61440, 19920"
        );
    }

    /// The rows of each of `prices_daily`'s row groups, in order.
    fn price_row_groups(conn: &Connection) -> String {
        conn.query_row(
            "SELECT string_agg(n::VARCHAR, ', ' ORDER BY g) FROM (SELECT row_group_id g, \
             sum(count) FILTER (WHERE column_path = '[1]') n FROM pragma_storage_info('prices_daily') GROUP BY g)",
            [],
            |r| r.get(0),
        )
        .unwrap()
    }

    #[test]
    fn the_checkpoint_threshold_follows_the_memory_limit() {
        let dir = tempfile::tempdir().unwrap();
        for (memory_limit_mb, expected) in [(256, "128.0 MiB"), (64, "32.0 MiB"), (48, "16.0 MiB")] {
            let settings = Settings {
                memory_limit_mb,
                ..Settings::default()
            };
            let sink = DuckDbSink::open(&dir.path().join(format!("w{memory_limit_mb}.duckdb")), &settings).unwrap();
            let threshold: String = sink
                .conn
                .query_row("SELECT current_setting('checkpoint_threshold')", [], |r| r.get(0))
                .unwrap();
            assert_eq!(threshold, expected, "memory_limit_mb = {memory_limit_mb}");
        }
    }

    /// Small held commits land before one would take a table past six
    /// row groups, so a landing ends with a nearly full row group, not a
    /// few rows in one of their own that a later vacuum would merge.
    #[test]
    fn small_held_commits_land_before_they_pass_six_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &Settings::default()).unwrap();
        for first in (0..400_000i64).step_by(10_000) {
            sink.commit_held(Commit {
                batches: vec![price_days((first..first + 10_000).map(|d| (d, 1.0)))],
                checkpoints: Vec::new(),
            })
            .unwrap();
        }
        sink.commit_held_now().unwrap();
        let counts: Vec<i64> = {
            let mut stmt = sink
                .conn
                .prepare(
                    "SELECT sum(count)::BIGINT FROM pragma_storage_info('prices_daily') \
                     WHERE column_name = 'date' AND segment_type = 'DATE' GROUP BY row_group_id ORDER BY row_group_id",
                )
                .unwrap();
            stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
        };
        assert_eq!(counts.iter().sum::<i64>(), 400_000, "{counts:?}");
        let (last, before) = counts.split_last().unwrap();
        assert!(*last > 0);
        assert!(
            before.iter().all(|c| *c as usize >= ROW_GROUP_ROWS * 3 / 4),
            "a row group under three quarters full before the last: {counts:?}"
        );
    }

    /// The writer attaches the file with the warehouse's row group size and
    /// spills beside it. A held landing of more than a row group goes into
    /// the file as whole row groups, its WAL naming them rather than holding
    /// the rows, and DuckDB opened on the file directly reads them. A small
    /// pod's writer keeps DuckDB's row groups.
    #[test]
    fn the_warehouse_is_attached_with_its_row_group_size_and_spills_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let row_groups = |path: &Path| price_row_groups(&Connection::open(path).unwrap());
        let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
        let spill: String = sink
            .conn
            .query_row("SELECT current_setting('temp_directory')", [], |r| r.get(0))
            .unwrap();
        assert_eq!(spill, format!("{}.tmp", path.display()));
        sink.commit_held(Commit {
            batches: vec![price_days((0..100_000).map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
        sink.commit_held_now().unwrap();
        let wal_bytes = std::fs::metadata(dir.path().join("w.duckdb.wal")).map_or(0, |m| m.len());
        assert!(
            wal_bytes < 64 * 1024,
            "the landing's rows went through the WAL: {wal_bytes} bytes"
        );
        drop(sink);
        assert_eq!(row_groups(&path), "61440, 38560");

        let small = dir.path().join("small.duckdb");
        let settings = Settings {
            memory_limit_mb: 64,
            ..Settings::default()
        };
        let mut sink = DuckDbSink::open(&small, &settings).unwrap();
        sink.commit(Commit {
            batches: vec![price_days((0..100_000).map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
        drop(sink);
        assert_eq!(row_groups(&small), "100000");
    }

    /// A held transaction with fewer rows than a row group, which DuckDB
    /// would write row by row to its WAL, lands with a checkpoint instead:
    /// the WAL stays empty, the rows are in the file, and the configured
    /// threshold is back for the commits after it.
    #[test]
    fn a_held_landing_under_a_row_group_checkpoints_instead_of_writing_the_wal() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.duckdb");
        let wal_bytes = || std::fs::metadata(dir.path().join("w.duckdb.wal")).map_or(0, |m| m.len());
        let mut sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
        for days in [0..30_000, 30_000..60_000] {
            sink.commit_held(Commit {
                batches: vec![price_days(days.map(|d| (d, 1.0)))],
                checkpoints: Vec::new(),
            })
            .unwrap();
        }
        sink.commit_held_now().unwrap();
        assert!(
            wal_bytes() < 64 * 1024,
            "the landing went through the WAL: {} bytes",
            wal_bytes()
        );
        let setting = |sink: &DuckDbSink| -> String {
            sink.conn
                .query_row("SELECT current_setting('checkpoint_threshold')", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(setting(&sink), "128.0 MiB");
        // A small commit after it goes to the WAL as before.
        sink.commit(Commit {
            batches: vec![price_days((60_000..60_010).map(|d| (d, 1.0)))],
            checkpoints: Vec::new(),
        })
        .unwrap();
        assert!(wal_bytes() > 0, "a small commit checkpointed");
        drop(sink);
        let sink = DuckDbSink::open(&path, &Settings::default()).unwrap();
        let rows: i64 = sink
            .conn
            .query_row("SELECT count(*) FROM prices_daily", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 60_010);
    }

    #[test]
    fn a_batch_merged_in_slices_keeps_the_last_row_of_each_key() {
        let dir = tempfile::tempdir().unwrap();
        let settings = Settings {
            memory_limit_mb: 32,
            ..Settings::default()
        };
        let mut sink = DuckDbSink::open(&dir.path().join("w.duckdb"), &settings).unwrap();
        let prices = prices_with_a_repeat(7.0);
        let table = prices.table;
        assert!(
            sink.slices(table, prices.batch.clone()).len() > 1,
            "the batch is sliced"
        );
        let long = "x".repeat(400);
        let mut texts = vec![long.as_str(); 20_000];
        texts.push("the last one");
        let texts = text_rows(&texts);
        assert!(
            sink.slices(texts.table, texts.batch.clone()).len() > 1,
            "the batch is sliced"
        );
        sink.commit(Commit {
            batches: vec![prices, texts],
            checkpoints: Vec::new(),
        })
        .unwrap();
        let one = |sql: &str| -> String { sink.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(one("SELECT count(*)::VARCHAR FROM prices_daily"), "30000");
        assert_eq!(
            one("SELECT close::VARCHAR FROM prices_daily WHERE date = DATE '1950-01-01'"),
            "7.0"
        );
        assert_eq!(one("SELECT count(*)::VARCHAR FROM event_item_texts"), "20000");
        assert_eq!(
            one("SELECT text FROM event_item_texts WHERE accession = '0'"),
            "the last one"
        );
    }
}
