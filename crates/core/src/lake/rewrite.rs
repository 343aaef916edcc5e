//! The row work of a publish, done by DuckDB: reading what changed out of the
//! warehouse, and merging it with a partition's live files into new ones.

use std::path::{Path, PathBuf};

use duckdb::Connection;

use crate::sink::SinkError;
pub use crate::sink::duckdb::export::Changes;
use crate::sink::duckdb::{COMMIT_SEQ, ident, sql_err};
use crate::tables::{LakePartition, LoadRule, TableDef};

/// Rows per Parquet row group: large enough for good compression and scans,
/// small enough that a reader (and our own merge) holds one group at a time.
const ROW_GROUP_ROWS: u64 = 100_000;

/// What a table's rows need from the lake's live files when they are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Keyless logs: appended as they are.
    Append,
    /// Rows never change once stored: appended, less keys the lake already has
    /// (another instance may have published them).
    AppendNewKeys,
    /// Rows change: a touched partition is rewritten with the new versions.
    Merge,
}

impl Kind {
    pub fn of(table: &TableDef) -> Kind {
        match table.load {
            LoadRule::Append if table.key.is_empty() => Kind::Append,
            LoadRule::Append | LoadRule::InsertOnce | LoadRule::AppendOnChange => Kind::AppendNewKeys,
            LoadRule::Upsert | LoadRule::History | LoadRule::Replace => Kind::Merge,
        }
    }
}

/// The columns a lake file holds, in schema order (the partition column lives
/// in the folder name and the log, not in the file).
fn file_columns(table: &TableDef) -> Vec<String> {
    table
        .all_columns()
        .map(|c| ident(c.name))
        .chain(std::iter::once(ident(COMMIT_SEQ)))
        .collect()
}

/// Runs a `COPY ... TO` and returns the rows it wrote (its one result row).
pub fn copy_count(conn: &Connection, copy: &str) -> duckdb::Result<u64> {
    conn.query_row(copy, [], |r| r.get::<_, i64>(0))
        .map(|n| n.max(0) as u64)
}

fn sql_path(path: &Path) -> String {
    path.display().to_string().replace('\'', "''")
}

fn sql_literal(value: Option<&str>) -> String {
    value.map_or_else(|| "NULL".to_owned(), |v| format!("'{}'", v.replace('\'', "''")))
}

/// A private in-memory DuckDB for merging: the warehouse's writer stays free
/// meanwhile, and spills go to `scratch` rather than memory.
pub fn scratch_connection(scratch: &Path, memory_limit: &str) -> Result<Connection, SinkError> {
    let conn = Connection::open_in_memory().map_err(sql_err("-", "opening a scratch database"))?;
    conn.execute_batch(&format!(
        "SET memory_limit = '{memory_limit}'; SET temp_directory = '{}'; SET preserve_insertion_order = false;",
        sql_path(&scratch.join("spill"))
    ))
    .map_err(sql_err("-", "configuring the scratch database"))?;
    Ok(conn)
}

/// Loads the changed rows into the scratch database's `changes` table and
/// returns the partition values they touch (one `None` for an unpartitioned
/// table).
pub fn load_changes(conn: &Connection, table: &TableDef, changes: &Path) -> Result<Vec<Option<String>>, SinkError> {
    let err = || sql_err(table.name, "loading the changed rows into the scratch database");
    conn.execute_batch(&format!(
        "CREATE OR REPLACE TABLE changes AS SELECT * FROM read_parquet('{}')",
        sql_path(changes)
    ))
    .map_err(err())?;
    let Some(part) = table.lake_partition else {
        return Ok(vec![None]);
    };
    let mut stmt = conn
        .prepare(&format!(
            "SELECT DISTINCT CAST({} AS VARCHAR) FROM changes ORDER BY 1 NULLS FIRST",
            ident(part.column())
        ))
        .map_err(err())?;
    let values = stmt.query_map([], |r| r.get::<_, Option<String>>(0)).map_err(err())?;
    values.collect::<Result<_, _>>().map_err(err())
}

/// Writes one partition's new file: the changed rows (loaded by
/// [`load_changes`]) merged with `old_files` by the table's [`Kind`]. Returns the rows written (0: no file needed).
///
/// # Errors
/// When a file cannot be read or written.
pub fn rewrite_partition(
    conn: &Connection,
    table: &TableDef,
    changes: &Changes,
    partition: Option<&str>,
    old_files: &[PathBuf],
    out: &Path,
) -> Result<u64, SinkError> {
    let columns = file_columns(table).join(", ");
    let chg = match table.lake_partition {
        Some(part) => format!(
            "SELECT {columns} FROM changes WHERE {} IS NOT DISTINCT FROM CAST({} AS {})",
            ident(part.column()),
            sql_literal(partition),
            match part {
                LakePartition::Year(_) => "INTEGER",
                LakePartition::Month(_) => "VARCHAR",
            }
        ),
        None => format!("SELECT {columns} FROM changes"),
    };
    if old_files.is_empty() {
        // Nothing live to merge with (a backfill): the changes as they are.
        return write_file(conn, table, &chg, out);
    }
    // The partition's changes are read by both sides of the merge: once.
    conn.execute_batch(&format!("CREATE OR REPLACE TEMP TABLE partition_changes AS {chg}"))
        .map_err(sql_err(table.name, "selecting a partition's changes"))?;
    let chg = "SELECT * FROM partition_changes";
    let list: Vec<String> = old_files.iter().map(|f| format!("'{}'", sql_path(f))).collect();
    let old = format!(
        "SELECT {columns} FROM read_parquet([{}], union_by_name = true, hive_partitioning = false)",
        list.join(", ")
    );
    let on: Vec<String> = table
        .key
        .iter()
        .map(|k| format!("o.{k} = c.{k}", k = ident(k)))
        .collect();
    let on = on.join(" AND ");
    let result = match Kind::of(table) {
        Kind::Append => chg.to_owned(),
        Kind::AppendNewKeys => format!("SELECT c.* FROM ({chg}) c ANTI JOIN ({old}) o ON {on}"),
        Kind::Merge => {
            let kept = if !changes.replaced.is_empty() {
                let replaced: Vec<String> = changes.replaced.iter().map(|p| sql_literal(Some(p))).collect();
                let part = ident(table.key[0]);
                if replaced.is_empty() {
                    String::new()
                } else {
                    format!("WHERE o.{part} NOT IN ({})", replaced.join(", "))
                }
            } else {
                String::new()
            };
            // A row whose partition column changed left its old copy in
            // another partition: every change's key leaves this one.
            let gone = if table.partition_can_move() {
                let keys: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
                format!("SELECT {} FROM changes", keys.join(", "))
            } else {
                chg.to_owned()
            };
            format!("SELECT o.* FROM ({old}) o ANTI JOIN ({gone}) c ON {on} {kept} UNION ALL SELECT * FROM ({chg})")
        }
    };
    write_file(conn, table, &result, out)
}

/// Rewrites `files` (one partition's) as one file, same rows.
///
/// # Errors
/// When a file cannot be read or written.
pub fn compact_files(conn: &Connection, table: &TableDef, files: &[PathBuf], out: &Path) -> Result<u64, SinkError> {
    let list: Vec<String> = files.iter().map(|f| format!("'{}'", sql_path(f))).collect();
    let rows = format!(
        "SELECT {} FROM read_parquet([{}], union_by_name = true, hive_partitioning = false)",
        file_columns(table).join(", "),
        list.join(", ")
    );
    write_file(conn, table, &rows, out)
}

/// Writes the rows of `select` to one zstd Parquet file; returns how many
/// (none: no file is left behind). Rows are not sorted: with text bodies a
/// sort costs more than the rest of a publish (measured: 2.5 times the
/// unsorted write), and the partition already narrows every scan.
fn write_file(conn: &Connection, table: &TableDef, select: &str, out: &Path) -> Result<u64, SinkError> {
    let rows = copy_count(
        conn,
        &format!(
            "COPY ({select}) TO '{}' \
             (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE {ROW_GROUP_ROWS})",
            sql_path(out)
        ),
    )
    .map_err(sql_err(table.name, "writing a lake file"))?;
    if rows == 0 {
        let _ = std::fs::remove_file(out);
    }
    Ok(rows)
}
