//! The SQL that loads a staging table into its table by the table's load
//! rule, built once per table from its declaration.

use arrow::record_batch::RecordBatch;

use super::{COMMIT_SEQ, MOVES_LOG, ident};
use crate::tables::{self, ColType, LoadRule, TableDef};

/// One table's statements for loading its staging table.
pub(super) struct Merge {
    /// Creates the staging table anew, empty. A fresh table rather than a
    /// `DELETE`: temp tables are never checkpointed, so deleted rows keep
    /// their memory and a staging table emptied by `DELETE` grows with
    /// every commit.
    pub(super) create_stage: String,
    /// Run in order with the commit number and the staged keys' range
    /// ([`key_range`]) as their parameters, or the commit number alone for a
    /// keyless table.
    pub(super) statements: Vec<Statement>,
    /// For a keyed table: the least and greatest staged value of its first
    /// key column, as text.
    pub(super) staged_key_range: Option<String>,
    /// For loads that merge by key: whether any staged key is stored
    /// already, and the plain `INSERT` that replaces the statements when none
    /// is. A merge joins the staged rows with the table, about 12 us a news
    /// row against 1 for the probe and 3 for the plain insert, and a
    /// backfill's keys are all new.
    pub(super) new_keys_only: Option<NewKeysOnly>,
    /// Whether the table's last probed batch held a stored key: the next is
    /// then staged and probed without [`NewKeysOnly::stored_in_range`] first,
    /// since a run that reads again what is stored finds rows in every range
    /// and the look would be a statement spent for nothing.
    pub(super) last_held_stored: std::cell::Cell<bool>,
}

/// One statement of a load.
pub(super) struct Statement {
    pub(super) sql: String,
    /// Whether the rows it changes count as written: a history's moved
    /// `last_seen_at` does not, an upsert's updated rows do.
    pub(super) counts: bool,
    /// When it changes no row, this many statements after it are skipped:
    /// they would change none either.
    pub(super) skips_when_none: usize,
}

pub(super) struct NewKeysOnly {
    /// One boolean row: true when a stored row lies in the range of a
    /// batch's keys ([`key_bounds`]), which it takes. When none does, the
    /// batch is appended without staging its keys: a backfill's pages and
    /// histories lie outside what is stored, and staging made each probe a
    /// new temporary table that DuckDB planned every statement on again.
    pub(super) stored_in_range: String,
    /// One boolean row: true when a staged key is in the table. Takes the
    /// staged keys' range.
    pub(super) probe: String,
    /// Takes the commit number, as the statements do.
    pub(super) insert: String,
    /// Creates the staging table anew with only the key's columns: what the
    /// probe reads when the rows themselves may go straight into the table.
    pub(super) create_key_stage: String,
}

pub(super) fn staging(table: &TableDef) -> String {
    ident(&format!("_stage_{}", table.name))
}

/// `table`'s key columns in the key's order, each with where it is in a batch.
pub(super) fn key_columns(table: &TableDef) -> impl Iterator<Item = (usize, &'static tables::Column)> + '_ {
    table
        .key
        .iter()
        .filter_map(|k| table.all_columns().enumerate().find(|(_, c)| c.name == *k))
}

pub(super) fn key_positions(table: &TableDef) -> Vec<usize> {
    key_columns(table).map(|(position, _)| position).collect()
}

/// The least and greatest value of each of `keys`' columns (a batch's key
/// columns, in key order) as text that casts back to the same value, as
/// [`staged_key_range`] reads them from a staging table; `None` for a column
/// type whose text form is not exact here (a float, a date past year
/// 9999), which only staging then probes. A bound is `None` where the column
/// holds only nulls.
pub(super) fn key_bounds(keys: &RecordBatch) -> Option<Vec<Option<String>>> {
    use arrow::array::AsArray;
    use arrow::compute::{max, max_string, min, min_string};
    use arrow::datatypes::{DataType, Date32Type, Int64Type, TimeUnit, TimestampMicrosecondType};
    // Both bounds as text, or `None` when either has no exact text.
    fn as_text<T>(
        least: Option<T>,
        greatest: Option<T>,
        text: impl Fn(T) -> Option<String>,
    ) -> Option<[Option<String>; 2]> {
        match (least, greatest) {
            (Some(l), Some(g)) => Some([Some(text(l)?), Some(text(g)?)]),
            _ => Some([None, None]),
        }
    }
    let mut bounds = Vec::with_capacity(2 * keys.num_columns());
    for column in keys.columns() {
        let both = match column.data_type() {
            DataType::Utf8 => {
                let text = column.as_string::<i32>();
                as_text(min_string(text), max_string(text), |v| Some(v.to_owned()))
            }
            DataType::Int64 => {
                let ints = column.as_primitive::<Int64Type>();
                as_text(min(ints), max(ints), |v| Some(v.to_string()))
            }
            DataType::Date32 => {
                let days = column.as_primitive::<Date32Type>();
                as_text(min(days), max(days), |d| {
                    date_text(arrow::temporal_conversions::date32_to_datetime(d)?.date())
                })
            }
            DataType::Timestamp(TimeUnit::Microsecond, Some(tz)) if tz.as_ref() == "UTC" => {
                let micros = column.as_primitive::<TimestampMicrosecondType>();
                as_text(min(micros), max(micros), |us| {
                    let at = chrono::DateTime::from_timestamp_micros(us)?;
                    Some(format!(
                        "{} {}+00",
                        date_text(at.date_naive())?,
                        at.format("%H:%M:%S%.6f")
                    ))
                })
            }
            _ => None,
        }?;
        bounds.extend(both);
    }
    Some(bounds)
}

/// `date` as DuckDB reads a date, for the years its text form is plain in.
fn date_text(date: chrono::NaiveDate) -> Option<String> {
    use chrono::Datelike;
    (1..=9999)
        .contains(&date.year())
        .then(|| date.format("%Y-%m-%d").to_string())
}

/// `CREATE OR REPLACE` of `table`'s staging table: its columns, JSON as text.
pub(super) fn create_stage(table: &TableDef) -> String {
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

/// The commit number in a merge statement: its first parameter.
pub(super) const SEQ_PARAM: &str = "CAST($1 AS BIGINT)";

/// `alias`'s first `columns` key columns each between the staged keys' least
/// and greatest value of that column, bound as parameters from `$from` on, two a column. No stored
/// row outside can match a staged key; planned as constants, the bounds let the scan skip the row
/// groups whose statistics lie outside, where each merge read the whole key column, and a merge of
/// a month of restated bars join that month of each company rather than its whole history.
fn key_range(table: &TableDef, alias: &str, from: usize, columns: usize) -> Option<String> {
    let alias = if alias.is_empty() {
        String::new()
    } else {
        format!("{alias}.")
    };
    let bounds: Vec<String> = key_columns(table)
        .take(columns)
        .enumerate()
        .map(|(i, (_, column))| {
            let ty = column.ty.sql();
            let least = from + 2 * i;
            format!(
                "{alias}{} BETWEEN CAST(${least} AS {ty}) AND CAST(${} AS {ty})",
                ident(column.name),
                least + 1
            )
        })
        .collect();
    (!bounds.is_empty()).then(|| bounds.join(" AND "))
}

/// The query whose one row is the least and greatest staged value of each of
/// `table`'s key columns, in key order and as text, for [`key_range`]'s
/// parameters.
pub(super) fn staged_key_range(table: &TableDef) -> Option<String> {
    let bounds: Vec<String> = key_columns(table)
        .map(|(_, column)| {
            let k = ident(column.name);
            format!("min({k})::VARCHAR, max({k})::VARCHAR")
        })
        .collect();
    (!bounds.is_empty()).then(|| format!("SELECT {} FROM {}", bounds.join(", "), staging(table)))
}

/// The statements that load `table`'s staging table into it by its load rule,
/// in order; each takes the commit number and, for a keyed table, the staged
/// keys' range ([`key_range`]) as its parameters. With them, for a load that
/// merges by key, the probe and plain insert that do the same when every
/// staged key is new.
pub(super) fn merge_statements(table: &TableDef) -> (Vec<Statement>, Option<NewKeysOnly>) {
    let sql = LoadSql::of(table);
    let mut statements = Vec::new();
    let (last, by_key) = match table.load {
        LoadRule::Append if sql.key.is_empty() => (
            format!(
                "INSERT INTO {} ({}) SELECT {} FROM {} s",
                sql.target, sql.col_list, sql.s_cols, sql.stage
            ),
            None,
        ),
        LoadRule::Append | LoadRule::InsertOnce => (sql.insert_once(&mut statements), Some(sql.new_keys_only())),
        LoadRule::History => (sql.history(&mut statements), None),
        LoadRule::AppendOnChange => (sql.append_on_change(), None),
        LoadRule::Upsert | LoadRule::Replace => (sql.upsert(&mut statements), Some(sql.new_keys_only())),
    };
    statements.push(Statement::counted(last));
    (statements, by_key)
}

/// The pieces of one table's load statements, each named once.
struct LoadSql<'t> {
    table: &'t TableDef,
    stage: String,
    target: String,
    /// The table's columns and the commit number, as an insert lists them.
    col_list: String,
    /// The same, selected from the staged row `s`.
    s_cols: String,
    key: Vec<String>,
}

impl<'t> LoadSql<'t> {
    fn of(table: &'t TableDef) -> LoadSql<'t> {
        LoadSql {
            table,
            stage: staging(table),
            target: ident(table.name),
            col_list: format!("{}, {COMMIT_SEQ}", stored_columns(table, "")),
            s_cols: format!("{}, {SEQ_PARAM}", stored_columns(table, "s")),
            key: table.key.iter().map(|k| ident(k)).collect(),
        }
    }

    /// The stored rows a staged key can match: those in the staged keys' range.
    fn ranged_target(&self) -> String {
        format!("(SELECT * FROM {} WHERE {})", self.target, self.in_range(""))
    }

    /// `a.k = b.k` for each column `k` of `key`.
    fn key_eq(a: &str, b: &str, key: &[String]) -> String {
        let on: Vec<String> = key.iter().map(|k| format!("{a}.{k} = {b}.{k}")).collect();
        on.join(" AND ")
    }

    /// The staged rows, the last of each `by` winning: a page may carry a
    /// record twice.
    fn newest_staged(&self, by: &[String]) -> String {
        format!(
            "SELECT * FROM {} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY rowid DESC) = 1",
            self.stage,
            by.join(", ")
        )
    }

    /// `alias`'s rows within the staged range of the first `columns` key columns.
    fn in_range_of(&self, alias: &str, columns: usize) -> String {
        key_range(self.table, alias, 2, columns).unwrap_or_else(|| "true".into())
    }

    fn in_range(&self, alias: &str) -> String {
        self.in_range_of(alias, usize::MAX)
    }

    /// Whether two rows hold the same values outside the key.
    fn own_values_equal(&self, a: &str, b: &str) -> Vec<String> {
        self.table
            .columns
            .iter()
            .filter(|c| !self.table.key.contains(&c.name))
            .map(|c| {
                let n = ident(c.name);
                format!("{a}.{n} IS NOT DISTINCT FROM {b}.{n}")
            })
            .collect()
    }

    /// What replaces a merge by key when no staged key is stored.
    fn new_keys_only(&self) -> NewKeysOnly {
        let (target, stage) = (&self.target, &self.stage);
        let keys_in_range = key_range(self.table, "", 1, usize::MAX).unwrap_or_else(|| "true".into());
        let key_cols: Vec<String> = key_columns(self.table)
            .map(|(_, c)| format!("{} {}", ident(c.name), c.ty.sql()))
            .collect();
        NewKeysOnly {
            stored_in_range: format!("SELECT EXISTS (SELECT 1 FROM {target} WHERE {keys_in_range})"),
            probe: format!(
                "SELECT EXISTS (SELECT 1 FROM {stage} s JOIN (SELECT * FROM {target} WHERE {keys_in_range}) t ON {})",
                Self::key_eq("s", "t", &self.key)
            ),
            insert: format!(
                "INSERT INTO {target} ({}) SELECT {} FROM ({}) s",
                self.col_list,
                self.s_cols,
                self.newest_staged(&self.key)
            ),
            create_key_stage: format!("CREATE OR REPLACE TEMP TABLE {stage} ({})", key_cols.join(", ")),
        }
    }

    /// Keys not stored are inserted; a versioned table also inserts a stored
    /// key's new value as a new version. The same join DuckDB 2 plans for
    /// `INSERT ... ON CONFLICT DO NOTHING` (its `bind_insert.cpp` binds every
    /// `ON CONFLICT` as a `MERGE INTO`), which needs no declared key.
    fn insert_once(&self, statements: &mut Vec<Statement>) -> String {
        let (target, col_list, ranged_target, key) = (&self.target, &self.col_list, self.ranged_target(), &self.key);
        if let (Some(value), Some((last, first))) = (self.table.versioned_by, key.split_last()) {
            // A stored key with another value: this version again, keyed
            // by when it was first seen, unless that is stored already.
            let restamped: Vec<String> = self
                .table
                .all_columns()
                .map(|c| {
                    let n = ident(c.name);
                    if n == *last {
                        "s._fetched_at".to_owned()
                    } else {
                        format!("s.{n}")
                    }
                })
                .collect();
            let v = ident(value);
            let same_item = Self::key_eq("k", "s", first);
            statements.push(Statement::counted(format!(
                "INSERT INTO {target} ({col_list}) SELECT {}, {SEQ_PARAM} FROM ({}) s JOIN {ranged_target} t ON {} \
                 WHERE t.{v} IS DISTINCT FROM s.{v} AND NOT EXISTS (SELECT 1 FROM {target} k WHERE {same_item} \
                 AND {} AND k.{v} IS NOT DISTINCT FROM s.{v} AND k.{last} >= s.{last})",
                restamped.join(", "),
                self.newest_staged(key),
                Self::key_eq("t", "s", key),
                self.in_range_of("k", first.len()),
            )));
        }
        format!(
            "INSERT INTO {target} ({col_list}) SELECT {} FROM ({}) s ANTI JOIN {ranged_target} t ON {}",
            self.s_cols,
            self.newest_staged(key),
            Self::key_eq("t", "s", key)
        )
    }

    /// A value seen again only moves its last sighting; a new one is a new row.
    fn history(&self, statements: &mut Vec<Statement>) -> String {
        let (target, col_list, s_cols, ranged_target) =
            (&self.target, &self.col_list, &self.s_cols, self.ranged_target());
        let on = Self::key_eq("t", "s", &self.key);
        let distinct = self.newest_staged(&self.key);
        statements.push(Statement::uncounted(format!(
            "UPDATE {target} t SET last_seen_at = s.last_seen_at, {COMMIT_SEQ} = {SEQ_PARAM} \
             FROM ({distinct}) s WHERE {on} AND s.last_seen_at > t.last_seen_at AND {}",
            self.in_range("t")
        )));
        format!(
            "INSERT INTO {target} ({col_list}) SELECT {s_cols} FROM ({distinct}) s ANTI JOIN {ranged_target} t ON {on}"
        )
    }

    /// A row is added only when it differs from its partition's newest.
    fn append_on_change(&self) -> String {
        let (target, key) = (&self.target, &self.key);
        let (part, order) = key.split_at(key.len() - 1);
        let order = &order[0];
        let unchanged = self.own_values_equal("t", "s");
        format!(
            "INSERT INTO {target} ({}) SELECT {} FROM ({}) s \
             LEFT JOIN (SELECT * FROM {target} WHERE {} QUALIFY row_number() OVER (PARTITION BY {} ORDER BY {order} DESC) = 1) t \
             ON {} WHERE (t.{} IS NULL OR NOT ({})) \
             AND NOT EXISTS (SELECT 1 FROM {target} k WHERE {} AND {})",
            self.col_list,
            self.s_cols,
            self.newest_staged(part),
            // A partition's newest stored row may lie outside the staged
            // range of the ordering column, never of the partition's own.
            self.in_range_of("", part.len()),
            part.join(", "),
            Self::key_eq("t", "s", part),
            part[0],
            unchanged.join(" AND "),
            Self::key_eq("k", "s", key),
            self.in_range("k")
        )
    }

    /// Stored keys updated where their content changed, then new keys inserted.
    fn upsert(&self, statements: &mut Vec<Statement>) -> String {
        let table = self.table;
        let (target, key) = (&self.target, &self.key);
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
        // An UPDATE, then an INSERT of the keys not stored, rather than one
        // `MERGE INTO`: DuckDB 2 runs a merge whose update rewrites a list
        // column (as delete and insert) with its two actions one after the
        // other, buffering every joined chunk for the second in memory it
        // cannot spill, so a merge of a few thousand news items needs many
        // times the memory of these two statements.
        let staged = self.newest_staged(key);
        if table.versions && !only_if.is_empty() {
            // The stored version a changed row replaces, kept as it was.
            // It changes exactly the rows the update below rewrites: when it
            // finds none (a run that reads again what is stored), the
            // statements through the update are skipped.
            let skip = 1 + usize::from(table.partition_can_move() && table.lake_partition.is_some());
            statements.push(Statement::gate(skip, format!(
                "{} SELECT {}, s._fetched_at, s._run_id, 'changed', {SEQ_PARAM} FROM {target} t JOIN ({staged}) s ON {} \
                 WHERE {}{only_if}",
                insert_version(table),
                stored_columns(table, "t"),
                Self::key_eq("t", "s", key),
                self.in_range("t"),
            )));
        }
        if table.partition_can_move()
            && let Some(part) = table.lake_partition
        {
            // Where a row's lake copy was, before this update moves it.
            let (was, now) = (
                super::export::partition_sql(table, part, Some("t")),
                super::export::partition_sql(table, part, Some("s")),
            );
            statements.push(Statement::uncounted(format!(
                "{} {target} t JOIN ({staged}) s ON {} WHERE {} AND {was} IS DISTINCT FROM {now}{only_if}",
                log_lake_partitions_left(table, part, SEQ_PARAM),
                Self::key_eq("t", "s", key),
                self.in_range("t"),
            )));
        }
        statements.push(Statement::counted(format!(
            "UPDATE {target} t SET {} FROM ({staged}) s WHERE {} AND {}{only_if}",
            set.join(", "),
            Self::key_eq("t", "s", key),
            self.in_range("t")
        )));
        format!(
            "INSERT INTO {target} ({}) SELECT {} FROM ({staged}) s ANTI JOIN {} t ON {}",
            self.col_list,
            self.s_cols,
            self.ranged_target(),
            Self::key_eq("t", "s", key)
        )
    }
}

/// `INSERT INTO _sync_lake_moves ... FROM`, to be followed by the stored rows
/// `t` whose lake partition (`part`) loses them: the next publish rewrites
/// those partitions. `seq` is the commit number as SQL.
pub(super) fn log_lake_partitions_left(table: &TableDef, part: tables::LakePartition, seq: &str) -> String {
    format!(
        "INSERT INTO {MOVES_LOG} ({COMMIT_SEQ}, table_name, \"partition\") SELECT DISTINCT CAST({seq} AS BIGINT), '{}', \
         CAST({} AS VARCHAR) FROM",
        table.name.replace('\'', "''"),
        super::export::partition_sql(table, part, Some("t")),
    )
}

/// `INSERT INTO <table>_versions (...)`, its columns in the order
/// [`stored_columns`] then the version's own and the commit number.
pub(super) fn insert_version(table: &TableDef) -> String {
    format!(
        "INSERT INTO {} ({}, _superseded_at, _superseded_by, _change, {COMMIT_SEQ})",
        ident(&table.versions_name()),
        stored_columns(table, "")
    )
}

/// `table`'s columns, lineage included, each of `alias` when one is given.
pub(super) fn stored_columns(table: &TableDef, alias: &str) -> String {
    let prefix = if alias.is_empty() {
        String::new()
    } else {
        format!("{alias}.")
    };
    let cols: Vec<String> = table
        .all_columns()
        .map(|c| format!("{prefix}{}", ident(c.name)))
        .collect();
    cols.join(", ")
}

impl Statement {
    fn counted(sql: String) -> Statement {
        Statement {
            sql,
            counts: true,
            skips_when_none: 0,
        }
    }

    fn uncounted(sql: String) -> Statement {
        Statement {
            sql,
            counts: false,
            skips_when_none: 0,
        }
    }

    fn gate(skips_when_none: usize, sql: String) -> Statement {
        Statement {
            sql,
            counts: false,
            skips_when_none,
        }
    }
}
