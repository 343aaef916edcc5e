//! What a warehouse table is: column types, load rules, lake partitions.
//! Tables are declared with `table!` (`crate::batch`), each next to what
//! writes it: a feed's in its module, fdsync's own in [`crate::bookkeeping`].
//! `../shared/spec/warehouse-contract.md` is the public interface; the
//! catalogue of every table is [`crate::feeds::catalogue`], and every sink
//! derives its DDL, staging and merge from it.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

/// A column's type, named for what the warehouse stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColType {
    Text,
    Int,
    Float,
    Bool,
    Date,
    Timestamp,
    /// JSON text; staged as VARCHAR, stored as DuckDB's JSON type.
    Json,
    TextList,
}

impl ColType {
    pub fn sql(self) -> &'static str {
        match self {
            ColType::Text => "VARCHAR",
            ColType::Int => "BIGINT",
            ColType::Float => "DOUBLE",
            ColType::Bool => "BOOLEAN",
            ColType::Date => "DATE",
            ColType::Timestamp => "TIMESTAMPTZ",
            ColType::Json => "JSON",
            ColType::TextList => "VARCHAR[]",
        }
    }

    pub fn arrow(self) -> DataType {
        match self {
            ColType::Text | ColType::Json => DataType::Utf8,
            ColType::Int => DataType::Int64,
            ColType::Float => DataType::Float64,
            ColType::Bool => DataType::Boolean,
            ColType::Date => DataType::Date32,
            ColType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            ColType::TextList => DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
        }
    }
}

/// How a batch of rows lands in its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadRule {
    /// Insert new keys; replace a stored row only when its content changed.
    Upsert,
    /// Insert new keys; a key already stored is never touched.
    InsertOnce,
    /// Keep every row (history and logs). With a key, a row whose key is
    /// already stored is the same version seen again and is skipped.
    Append,
    /// Point-in-time history keyed by its whole content: a row seen before only
    /// has its `last_seen_at` moved; anything new is a new row; nothing is
    /// deleted or overwritten.
    History,
    /// A partition (the first key column, such as a company) is replaced as a
    /// whole by what the service serves now: rows no longer served go, new ones
    /// come, unchanged ones are not rewritten. Partitions are named by the batch,
    /// so a partition that became empty is emptied too.
    Replace,
    /// A change log: a row is appended only when its content differs from the
    /// newest stored row of its partition (every key column but the last, which
    /// orders the log).
    AppendOnChange,
}

#[derive(Debug, Clone, Copy)]
pub struct Column {
    pub name: &'static str,
    pub ty: ColType,
    /// What the column holds: its declaration's doc comment, one line per `///` line.
    pub doc: &'static str,
}

#[derive(Debug)]
pub struct TableDef {
    pub name: &'static str,
    /// The declaration's doc comment, one line per `///` line.
    pub doc: &'static str,
    pub columns: &'static [Column],
    /// Columns that identify a row; empty for append-only logs.
    pub key: &'static [&'static str],
    pub load: LoadRule,
    /// Whether the entity columns `raw`, `_fetched_at`, `_run_id`, `_route` follow.
    pub lineage: bool,
    /// Upsert: columns where a new row's NULL keeps the stored value. The same
    /// record reaches these tables through routes that carry different fields
    /// (a licence withholds a body, an index entry lacks the filer's name), and
    /// an absent field is not news that the value went away.
    pub keep_stored: &'static [&'static str],
    /// Upsert: a column that orders versions of a row; an older version arriving
    /// late never replaces a newer one.
    pub newer_by: Option<&'static str>,
    /// Append with a key: a staged row whose key is stored with another
    /// value of this column is a version the service's key did not tell
    /// apart (a headline rewritten without `updatedAt` moving). It is kept
    /// too, its key's last column (a timestamp) taken from `_fetched_at`:
    /// when fdsync first saw that version.
    pub versioned_by: Option<&'static str>,
    /// Upsert or Replace: every row a load replaces or withdraws is kept in
    /// the table's versions table (`<name>_versions`, [`TableDef::versions_table`])
    /// with when it stopped being served, so the table can be read as known
    /// at any past moment (`<name>_as_of(ts)`).
    pub versions: bool,
    /// A versions table: the table whose superseded rows it keeps.
    pub versions_of: Option<&'static str>,
    /// How the lake splits the table into hive partitions; `None` for tables
    /// small enough to be one partition.
    pub lake_partition: Option<LakePartition>,
    /// Columns stored with one compression rather than DuckDB's choice
    /// among all it has, fixed when the column is created. Every lineage
    /// table's `_run_id` and `_route` are [`Compression::Dictionary`] too
    /// ([`TableDef::compression_of`]).
    pub compression: &'static [(&'static str, Compression)],
}

/// How a column is stored when its table names it ([`TableDef::compression`]).
/// DuckDB otherwise analyses every method it has on each row group it
/// writes and keeps the smallest; for these columns the winner is known, and
/// analysing the others was most of a fifth of the writer's time in a
/// backfill.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Long JSON records and text: DuckDB's own choice is slow and large on
    /// them, and the dictionary
    /// analysis of distinct strings of a few hundred bytes holds a copy of a
    /// row group's column in memory.
    Zstd,
    /// Short text that is mostly distinct: ids, headlines, URLs, a price
    /// bar's record.
    Fsst,
    /// Labels and keys that repeat: sources, companies, symbols.
    Dictionary,
}

impl Compression {
    /// The name DuckDB's `USING COMPRESSION` takes.
    pub fn sql(self) -> &'static str {
        match self {
            Compression::Zstd => "zstd",
            Compression::Fsst => "fsst",
            Compression::Dictionary => "dictionary",
        }
    }
}

/// A lake partition: the year (`year`, an integer) or month (`month`, text
/// `YYYY-MM`, UTC) of one of the table's own date columns, so a row always
/// lands in the same partition whenever and however often it is loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LakePartition {
    Year(&'static str),
    Month(&'static str),
}

impl LakePartition {
    /// The partition column's name in the lake.
    pub fn column(self) -> &'static str {
        match self {
            LakePartition::Year(_) => "year",
            LakePartition::Month(_) => "month",
        }
    }

    /// The date or timestamp column it is computed from.
    pub fn source(self) -> &'static str {
        match self {
            LakePartition::Year(c) | LakePartition::Month(c) => c,
        }
    }
}

/// The columns every entity table carries after its own.
pub const LINEAGE: &[Column] = &[
    col(
        "raw",
        ColType::Json,
        "The record exactly as served (JSON), unknown fields included.",
    ),
    col(
        "_fetched_at",
        ColType::Timestamp,
        "When fdsync fetched the record (UTC).",
    ),
    col(
        "_run_id",
        ColType::Text,
        "The run that wrote the row (`_sync_runs.run_id`).",
    ),
    col(
        "_route",
        ColType::Text,
        "The request path the row came from, without the key.",
    ),
];

/// The columns a versions table carries after its table's own, before the lineage.
pub const VERSION_COLUMNS: &[Column] = &[
    col(
        "_superseded_at",
        ColType::Timestamp,
        "When fdsync first saw the row no longer served as it is here: replaced by another version, or withdrawn (UTC).",
    ),
    col(
        "_superseded_by",
        ColType::Text,
        "The run that saw it (`_sync_runs.run_id`).",
    ),
    col(
        "_change",
        ColType::Text,
        "`changed`: the service serves the key with other values; `withdrawn`: a response listing the whole set no longer holds the key.",
    ),
];

const fn col(name: &'static str, ty: ColType, doc: &'static str) -> Column {
    Column { name, ty, doc }
}

impl TableDef {
    /// The `_sync_*` tables: fdsync's own record of runs, checkpoints,
    /// requests, quota and quarantine, not data from the service.
    pub fn is_bookkeeping(&self) -> bool {
        self.name.starts_with("_sync_")
    }

    /// Whether a stored row can change its lake partition: the partition is
    /// computed from a column outside the key of a table whose rows change.
    pub fn partition_can_move(&self) -> bool {
        matches!(self.load, LoadRule::Upsert | LoadRule::Replace | LoadRule::History)
            && self.lake_partition.is_some_and(|p| !self.key.contains(&p.source()))
    }

    /// Whether the table declares a column `name` (lineage aside).
    pub fn has_column(&self, name: &str) -> bool {
        self.columns.iter().any(|c| c.name == name)
    }

    /// Every column in storage order, lineage included.
    pub fn all_columns(&self) -> impl Iterator<Item = &'static Column> + '_ {
        let lineage: &'static [Column] = if self.lineage { LINEAGE } else { &[] };
        self.columns.iter().chain(lineage.iter())
    }

    /// How `column` is stored when it is not DuckDB's choice: as the table
    /// names it, or for the lineage columns that repeat a run's and a
    /// request's name, with a dictionary.
    pub fn compression_of(&self, column: &str) -> Option<Compression> {
        self.compression
            .iter()
            .find(|(name, _)| *name == column)
            .map(|&(_, compression)| compression)
            .or_else(|| (self.lineage && ["_run_id", "_route"].contains(&column)).then_some(Compression::Dictionary))
    }

    /// The name of the table that keeps this one's superseded rows.
    pub fn versions_name(&self) -> String {
        format!("{}_versions", self.name)
    }

    /// The table that keeps this one's superseded rows: its columns and
    /// [`VERSION_COLUMNS`], one row per version, in its lake partitions.
    /// Made once per table for the life of the process (the catalogue's).
    pub fn versions_table(&self) -> TableDef {
        let columns: Vec<Column> = self.columns.iter().chain(VERSION_COLUMNS).copied().collect();
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        TableDef {
            name: leak(self.versions_name()),
            doc: leak(format!(
                "Every row `{}` held before the service changed or withdrew it, from when fdsync first saw it \
                 (`_fetched_at`) to when it saw it superseded (`_superseded_at`); `{}_as_of(ts)` reads both as known at `ts`. \
                 Its other columns are `{}`'s, described there.",
                self.name, self.name, self.name
            )),
            columns: Box::leak(columns.into_boxed_slice()),
            lineage: self.lineage,
            versions_of: Some(self.name),
            lake_partition: self.lake_partition,
            compression: self.compression,
            ..TableDef::DEFAULT
        }
    }

    pub fn arrow_schema(&self) -> SchemaRef {
        let fields: Vec<Field> = self
            .all_columns()
            .map(|c| Field::new(c.name, c.ty.arrow(), !self.key.contains(&c.name)))
            .collect();
        Arc::new(Schema::new(fields))
    }
}

impl TableDef {
    /// The fields a declaration leaves out: no key, nothing kept or ordered,
    /// one lake partition, DuckDB's own compression.
    pub const DEFAULT: TableDef = TableDef {
        name: "",
        doc: "",
        columns: &[],
        key: &[],
        load: LoadRule::Append,
        lineage: true,
        keep_stored: &[],
        newer_by: None,
        versioned_by: None,
        versions: false,
        versions_of: None,
        lake_partition: None,
        compression: &[],
    };
}
