//! What the lake publisher reads out of the warehouse: the rows committed
//! after a commit number, written to a Parquet file with their lake
//! partition.

use std::path::{Path, PathBuf};

use super::{COMMIT_SEQ, DuckDbSink, MOVES_LOG, REPLACED_LOG, ident, partition_text, sql_err, sql_string};
use crate::bookkeeping::SYNC_RESETS;
use crate::sink::SinkError;
use crate::tables::{ColType, LakePartition, LoadRule, TableDef};

/// The rows to publish, read out of the warehouse.
#[derive(Debug)]
pub struct Changes {
    /// The newest commit they include: the table's new watermark.
    pub upto: i64,
    pub rows: u64,
    /// [`LoadRule::Replace`]: the partitions (companies) whose lake rows are
    /// all replaced by these, including any now empty.
    pub replaced: Vec<String>,
    /// Lake partitions that rows of these left when their partition column
    /// changed ([`TableDef::partition_can_move`]): their old copies go.
    pub moved_from: Vec<Option<String>>,
    /// `fdsync reset --drop-rows` deleted rows of the table since `after`:
    /// these are all its rows, and the lake's files are replaced by them.
    pub rebuild: bool,
    pub file: PathBuf,
}

impl DuckDbSink {
    /// Writes the rows of `table` committed after sequence `after` to `file`,
    /// with their partition value; `None` when nothing was committed since.
    ///
    /// # Errors
    /// When the warehouse cannot be read or the file written.
    pub fn export_changes(&self, table: &TableDef, after: i64, file: &Path) -> Result<Option<Changes>, SinkError> {
        let conn = &self.conn;
        let name = ident(table.name);
        let err = |context| sql_err(table.name, context);
        let upto: i64 = conn
            .query_row(
                &format!(
                    "SELECT greatest((SELECT coalesce(max({COMMIT_SEQ}), 0) FROM {name}), \
                     (SELECT coalesce(max({COMMIT_SEQ}), 0) FROM {REPLACED_LOG} WHERE table_name = ?))"
                ),
                [table.name],
                |r| r.get(0),
            )
            .map_err(err("finding the newest commit"))?;
        // `None` when no reset deleted rows of the table: a first publish
        // (`after` -1) is not a rebuild, which would drop what other
        // instances published into a shared lake.
        let reset: Option<i64> = conn
            .query_row(
                &format!(
                    "SELECT max({COMMIT_SEQ}) FROM {} WHERE drop_rows AND list_contains(tables, ?)",
                    ident(SYNC_RESETS.name)
                ),
                [table.name],
                |r| r.get(0),
            )
            .map_err(err("finding the resets that deleted rows"))?;
        let upto = upto.max(reset.unwrap_or(0));
        if upto <= after {
            return Ok(None);
        }
        let rebuild = reset.is_some_and(|reset| reset > after);
        let after = if rebuild { -1 } else { after };
        let changed = format!("coalesce({COMMIT_SEQ}, 0) > {after}");
        // Partitions a response held in full (a Replace table's, or another's
        // read again whole after a restatement): their lake rows are all
        // replaced. A Replace table's changed rows name theirs too.
        let (filter, replaced) = match table.key.first().map(|_| partition_text(table, None)) {
            Some(part) => {
                let logged = format!(
                    "SELECT DISTINCT \"partition\" FROM {REPLACED_LOG} WHERE table_name = '{}' AND {COMMIT_SEQ} > {after}",
                    table.name.replace('\'', "''")
                );
                let also_changed = if table.load == LoadRule::Replace {
                    format!(" UNION SELECT {part} FROM {name} WHERE {changed}")
                } else {
                    String::new()
                };
                let replaced: Vec<String> = self.rows(
                    (table.name, "finding the replaced partitions"),
                    &format!("{logged}{also_changed} ORDER BY 1"),
                    &[],
                    |r| r.get(0),
                )?;
                if replaced.is_empty() {
                    (changed, replaced)
                } else {
                    (format!("{part} IN ({logged}) OR {changed}"), replaced)
                }
            }
            None => (changed, Vec::new()),
        };
        let mut select: Vec<String> = table
            .all_columns()
            .map(|c| match c.ty {
                // Plain text in the lake: JSON is not a type every engine knows.
                ColType::Json => format!("CAST({n} AS VARCHAR) AS {n}", n = ident(c.name)),
                _ => ident(c.name),
            })
            .collect();
        select.push(ident(COMMIT_SEQ));
        if let Some(part) = table.lake_partition {
            select.push(format!(
                "{} AS {}",
                partition_sql(table, part, None),
                ident(part.column())
            ));
        }
        let copy = format!(
            "COPY (SELECT {} FROM {name} WHERE {filter}) TO {} (FORMAT parquet, COMPRESSION zstd)",
            select.join(", "),
            sql_string(&file.display().to_string())
        );
        let rows = conn
            .query_row(&copy, [], |r| r.get::<_, i64>(0))
            .map_err(err("writing the changed rows for the lake"))?
            .max(0) as u64;
        // Rows that moved, and rows withdrawn from a replaced partition, left
        // copies in lake partitions the changes may not touch.
        let moved_from = if table.partition_can_move() || (table.lake_partition.is_some() && !replaced.is_empty()) {
            self.rows(
                (table.name, "finding the partitions rows moved out of"),
                &format!(
                    "SELECT DISTINCT \"partition\" FROM {MOVES_LOG} WHERE table_name = ? AND {COMMIT_SEQ} > {after} ORDER BY 1"
                ),
                &[table.name],
                |r| r.get(0),
            )?
        } else {
            Vec::new()
        };
        Ok(Some(Changes {
            upto,
            rows,
            replaced,
            moved_from,
            rebuild,
            file: file.to_owned(),
        }))
    }
}

/// The partition column computed from the row's own date (of the row
/// `alias` names, when given), as SQL. The bundled DuckDB has no ICU, so a
/// timestamp's UTC date is read from its text form.
pub(super) fn partition_sql(table: &TableDef, part: LakePartition, alias: Option<&str>) -> String {
    let source = match alias {
        Some(alias) => format!("{alias}.{}", ident(part.source())),
        None => ident(part.source()),
    };
    let ty = table
        .columns
        .iter()
        .find(|c| c.name == part.source())
        .map(|c| c.ty)
        .expect("a lake partition names a column of its table");
    match (part, ty) {
        (LakePartition::Year(_), ColType::Date) => format!("CAST(year({source}) AS INTEGER)"),
        (LakePartition::Year(_), _) => format!("CAST(left(CAST({source} AS VARCHAR), 4) AS INTEGER)"),
        (LakePartition::Month(_), ColType::Date) => format!("strftime({source}, '%Y-%m')"),
        (LakePartition::Month(_), _) => format!("left(CAST({source} AS VARCHAR), 7)"),
    }
}
