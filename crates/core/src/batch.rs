//! Rows to Arrow record batches: one typed builder per column of a
//! [`TableDef`]; the `table!` macro that declares a table with its row
//! struct.
//!
//! A record is written field by field in column order through [`RowWriter`], then
//! ended with its lineage (`raw`, `_route`); the batch-wide lineage (`_fetched_at`,
//! `_run_id`) is filled in by the builder.

use std::sync::Arc;

use arrow::array::{
    ArrayBuilder, ArrayRef, BooleanBuilder, Date32Builder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow::record_batch::RecordBatch;
use chrono::{DateTime, NaiveDate, Utc};

use crate::tables::{ColType, TableDef};

enum ColumnBuilder {
    Text(StringBuilder),
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Date(Date32Builder),
    Timestamp(TimestampMicrosecondBuilder),
    TextList(ListBuilder<StringBuilder>),
}

impl ColumnBuilder {
    /// An empty builder that allocates on its first value. Arrow's `new`
    /// reserves 1,024 values a column, which many small responses waiting for
    /// their commit would hold unseen by the bound on rows in flight (it
    /// counts values, not reserve).
    fn new(ty: ColType) -> ColumnBuilder {
        match ty {
            ColType::Text | ColType::Json => ColumnBuilder::Text(StringBuilder::with_capacity(0, 0)),
            ColType::Int => ColumnBuilder::Int(Int64Builder::with_capacity(0)),
            ColType::Float => ColumnBuilder::Float(Float64Builder::with_capacity(0)),
            ColType::Bool => ColumnBuilder::Bool(BooleanBuilder::with_capacity(0)),
            ColType::Date => ColumnBuilder::Date(Date32Builder::with_capacity(0)),
            ColType::Timestamp => {
                ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::with_capacity(0).with_timezone("UTC"))
            }
            ColType::TextList => {
                ColumnBuilder::TextList(ListBuilder::with_capacity(StringBuilder::with_capacity(0, 0), 0))
            }
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            ColumnBuilder::Text(b) => Arc::new(b.finish()),
            ColumnBuilder::Int(b) => Arc::new(b.finish()),
            ColumnBuilder::Float(b) => Arc::new(b.finish()),
            ColumnBuilder::Bool(b) => Arc::new(b.finish()),
            ColumnBuilder::Date(b) => Arc::new(b.finish()),
            ColumnBuilder::Timestamp(b) => Arc::new(b.finish()),
            ColumnBuilder::TextList(b) => Arc::new(b.finish()),
        }
    }

    /// Bytes the column's values hold so far (offsets and validity left out).
    fn value_bytes(&self) -> usize {
        match self {
            ColumnBuilder::Text(b) => b.values_slice().len(),
            ColumnBuilder::Int(b) => b.len() * 8,
            ColumnBuilder::Float(b) => b.len() * 8,
            ColumnBuilder::Bool(b) => b.len() / 8,
            ColumnBuilder::Date(b) => b.len() * 4,
            ColumnBuilder::Timestamp(b) => b.len() * 8,
            ColumnBuilder::TextList(b) => b.values_ref().values_slice().len(),
        }
    }

    fn len(&self) -> usize {
        match self {
            ColumnBuilder::Text(b) => b.len(),
            ColumnBuilder::Int(b) => b.len(),
            ColumnBuilder::Float(b) => b.len(),
            ColumnBuilder::Bool(b) => b.len(),
            ColumnBuilder::Date(b) => b.len(),
            ColumnBuilder::Timestamp(b) => b.len(),
            ColumnBuilder::TextList(b) => b.len(),
        }
    }
}

/// Days from the Unix epoch, as Arrow's Date32 counts them.
pub fn date32(date: NaiveDate) -> i32 {
    (date - NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")).num_days() as i32
}

/// Builds one table's record batch from rows.
pub struct BatchBuilder {
    table: &'static TableDef,
    columns: Vec<ColumnBuilder>,
    run_id: String,
    fetched_at_us: i64,
    rows: usize,
    fault: Option<String>,
}

impl BatchBuilder {
    pub fn new(table: &'static TableDef, run_id: &str, fetched_at: DateTime<Utc>) -> BatchBuilder {
        BatchBuilder {
            table,
            columns: table.all_columns().map(|c| ColumnBuilder::new(c.ty)).collect(),
            run_id: run_id.to_owned(),
            fetched_at_us: fetched_at.timestamp_micros(),
            rows: 0,
            fault: None,
        }
    }

    pub fn table(&self) -> &'static TableDef {
        self.table
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// About the bytes the rows so far hold: what bounds the rows fetched but
    /// not yet committed.
    pub fn value_bytes(&self) -> usize {
        self.columns.iter().map(ColumnBuilder::value_bytes).sum()
    }

    /// Starts a row; write every own column in order, then call [`RowWriter::end`].
    pub fn row(&mut self) -> RowWriter<'_> {
        RowWriter { batch: self, next: 0 }
    }

    /// Appends a row of an entity table with its lineage: the record as served and its route.
    pub fn push<R: Row>(&mut self, row: R, raw: &str, route: &str) {
        debug_assert_eq!(R::TABLE.name, self.table.name);
        row.write(self.row()).end(raw, route);
    }

    /// Appends a row of a table without lineage (bookkeeping tables).
    pub fn push_bare<R: Row>(&mut self, row: R) {
        debug_assert_eq!(R::TABLE.name, self.table.name);
        row.write(self.row()).end_bare();
    }

    /// The finished batch.
    ///
    /// # Errors
    /// When a row was written with the wrong types or number of fields (a bug in a
    /// record mapper), or Arrow rejects the arrays.
    pub fn finish(mut self) -> Result<RecordBatch, arrow::error::ArrowError> {
        if let Some(fault) = self.fault.take() {
            return Err(arrow::error::ArrowError::InvalidArgumentError(format!(
                "table {}: {fault}",
                self.table.name
            )));
        }
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(ColumnBuilder::finish).collect();
        RecordBatch::try_new(self.table.arrow_schema(), arrays)
    }
}

/// One row of a table, written column by column in the table's order.
/// Implemented by the row structs `table!` declares.
pub trait Row {
    const TABLE: &'static TableDef;

    /// Writes the row's own columns (lineage is the caller's).
    fn write<'w>(self, w: RowWriter<'w>) -> RowWriter<'w>;
}

/// The Rust type a column of `ColType` takes in a row struct.
macro_rules! col_type {
    ($lt:lifetime, Text) => { Option<&$lt str> };
    ($lt:lifetime, Json) => { Option<&$lt str> };
    ($lt:lifetime, Int) => { Option<i64> };
    ($lt:lifetime, Float) => { Option<f64> };
    ($lt:lifetime, Bool) => { Option<bool> };
    ($lt:lifetime, Date) => { Option<chrono::NaiveDate> };
    ($lt:lifetime, Timestamp) => { Option<chrono::DateTime<chrono::Utc>> };
    ($lt:lifetime, TextList) => { &$lt [String] };
}
pub(crate) use col_type;

/// A column's name: its field's, or the one given after `as` where the
/// column's name is a Rust keyword (`kind as "type"`).
macro_rules! col_name {
    ($col:ident) => {
        stringify!($col)
    };
    ($col:ident as $sql:literal) => {
        $sql
    };
}
pub(crate) use col_name;

/// Declares a warehouse table once: its [`TableDef`] (columns in order, then
/// the table's rules) and a row struct with a field per column. Rows are
/// written by field name, so two same-typed columns swapped do not compile
/// silently into each other, and the DDL, Arrow schema and lake layout all
/// derive from the one declaration.
///
/// ```text
/// table! {
///     pub const PRICES_DAILY: PriceRow = "prices_daily" {
///         company_key: Text,
///         date: Date,
///     }
///     key: &["company_key", "date"],
///     load: LoadRule::Upsert,
/// }
/// ```
macro_rules! table {
    (
        $(#[doc = $doc:literal])*
        $vis:vis const $table:ident: $row:ident = $name:literal {
            $( $(#[doc = $col_doc:literal])* $col:ident $(as $sql:literal)?: $ty:ident ),+ $(,)?
        }
        $( $field:ident: $value:expr ),* $(,)?
    ) => {
        $(#[doc = $doc])*
        $vis const $table: $crate::tables::TableDef = $crate::tables::TableDef {
            name: $name,
            doc: concat!($($doc, "\n",)* ""),
            columns: &[ $( $crate::tables::Column {
                name: $crate::batch::col_name!($col $(as $sql)?),
                ty: $crate::tables::ColType::$ty,
                doc: concat!($($col_doc, "\n",)* ""),
            } ),+ ],
            $( $field: $value, )*
            ..$crate::tables::TableDef::DEFAULT
        };

        #[doc = concat!("One row of `", $name, "`.")]
        #[derive(Debug, Clone, Copy)]
        $vis struct $row<'a> {
            $( $(#[doc = $col_doc])* pub $col: $crate::batch::col_type!('a, $ty), )+
        }

        impl $crate::batch::Row for $row<'_> {
            const TABLE: &'static $crate::tables::TableDef = &$table;

            fn write<'w>(self, w: $crate::batch::RowWriter<'w>) -> $crate::batch::RowWriter<'w> {
                $( let w = $crate::batch::ColumnValue::put(self.$col, w); )+
                w
            }
        }
    };
}
pub(crate) use table;

/// A value of one column of a row struct, written to its column.
pub trait ColumnValue {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_>;
}

impl ColumnValue for Option<&str> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.text(self)
    }
}

impl ColumnValue for Option<i64> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.int(self)
    }
}

impl ColumnValue for Option<f64> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.float(self)
    }
}

impl ColumnValue for Option<bool> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.bool(self)
    }
}

impl ColumnValue for Option<NaiveDate> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.date(self)
    }
}

impl ColumnValue for Option<DateTime<Utc>> {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.timestamp(self)
    }
}

impl ColumnValue for &[String] {
    fn put(self, w: RowWriter<'_>) -> RowWriter<'_> {
        w.text_list(self.iter().map(String::as_str))
    }
}

/// Writes one row's fields in column order.
pub struct RowWriter<'a> {
    batch: &'a mut BatchBuilder,
    next: usize,
}

macro_rules! setter {
    ($name:ident, $variant:ident, $ty:ty, $conv:expr) => {
        pub fn $name(mut self, value: Option<$ty>) -> Self {
            let conv = $conv;
            match self.batch.columns.get_mut(self.next) {
                Some(ColumnBuilder::$variant(b)) => b.append_option(value.map(conv)),
                _ => self.mismatch(stringify!($name)),
            }
            self.next += 1;
            self
        }
    };
}

impl RowWriter<'_> {
    pub fn text(mut self, value: Option<&str>) -> Self {
        match self.batch.columns.get_mut(self.next) {
            Some(ColumnBuilder::Text(b)) => b.append_option(value),
            _ => self.mismatch("text"),
        }
        self.next += 1;
        self
    }

    setter!(int, Int, i64, |v: i64| v);
    setter!(float, Float, f64, |v: f64| v);
    setter!(bool, Bool, bool, |v: bool| v);
    setter!(date, Date, NaiveDate, date32);
    setter!(timestamp, Timestamp, DateTime<Utc>, |v: DateTime<Utc>| v
        .timestamp_micros());

    pub fn text_list<'s>(mut self, values: impl IntoIterator<Item = &'s str>) -> Self {
        match self.batch.columns.get_mut(self.next) {
            Some(ColumnBuilder::TextList(b)) => {
                for v in values {
                    b.values().append_value(v);
                }
                b.append(true);
            }
            _ => self.mismatch("text_list"),
        }
        self.next += 1;
        self
    }

    fn mismatch(&mut self, what: &str) {
        let column = self
            .batch
            .table
            .all_columns()
            .nth(self.next)
            .map(|c| c.name)
            .unwrap_or("<past the end>");
        self.batch
            .fault
            .get_or_insert_with(|| format!("{what} written to column {column}"));
    }

    /// Ends a row of an entity table with its lineage: the record as served and its route.
    pub fn end(self, raw: &str, route: &str) {
        let (run_id, fetched_at) = (self.batch.run_id.clone(), self.batch.fetched_at_us);
        self.text(Some(raw))
            .timestamp_us(fetched_at)
            .text(Some(&run_id))
            .text(Some(route))
            .end_bare();
    }

    fn timestamp_us(mut self, us: i64) -> Self {
        match self.batch.columns.get_mut(self.next) {
            Some(ColumnBuilder::Timestamp(b)) => b.append_value(us),
            _ => self.mismatch("timestamp"),
        }
        self.next += 1;
        self
    }

    /// Ends a row of a table without lineage (bookkeeping tables).
    pub fn end_bare(self) {
        let batch = self.batch;
        if self.next != batch.columns.len() {
            batch.fault.get_or_insert_with(|| {
                format!(
                    "row {} has {} fields, the table has {}",
                    batch.rows,
                    self.next,
                    batch.columns.len()
                )
            });
            // Pad so later rows stay aligned and the fault is reported once at finish().
            let target = batch.rows + 1;
            for c in &mut batch.columns {
                while c.len() < target {
                    match c {
                        ColumnBuilder::Text(b) => b.append_null(),
                        ColumnBuilder::Int(b) => b.append_null(),
                        ColumnBuilder::Float(b) => b.append_null(),
                        ColumnBuilder::Bool(b) => b.append_null(),
                        ColumnBuilder::Date(b) => b.append_null(),
                        ColumnBuilder::Timestamp(b) => b.append_null(),
                        ColumnBuilder::TextList(b) => b.append_null(),
                    }
                }
            }
        }
        batch.rows += 1;
    }
}

/// A table's rows that did not fit Arrow: a bug in a feed's reader.
#[derive(Debug, thiserror::Error)]
#[error("building a batch for {table}: {source}")]
pub struct BatchError {
    pub table: String,
    pub source: arrow::error::ArrowError,
}

pub(crate) fn batch_err(table: &str) -> impl FnOnce(arrow::error::ArrowError) -> BatchError + '_ {
    move |source| BatchError {
        table: table.to_owned(),
        source,
    }
}

/// Whether no key of `table` occurs twice among `batch`'s rows: were one
/// to, its last row would have to win, so the rows could not simply be
/// appended. A keyless table's rows are distinct.
///
/// # Errors
/// When a key column is missing from the batch (a bug in a reader).
pub fn keys_are_distinct(table: &TableDef, batch: &RecordBatch) -> Result<bool, BatchError> {
    use arrow::array::AsArray;
    use arrow::datatypes::{DataType, Date32Type, Float64Type, Int64Type, TimestampMicrosecondType};
    use std::hash::{BuildHasher, Hash};
    fn mix<T: Hash>(state: &foldhash::fast::RandomState, hashes: &mut [u64], values: impl Iterator<Item = Option<T>>) {
        for (hash, value) in hashes.iter_mut().zip(values) {
            *hash = state.hash_one((*hash, value));
        }
    }
    if table.key.is_empty() {
        return Ok(true);
    }
    let keys = table
        .key
        .iter()
        .map(|k| batch.schema().index_of(k).map(|i| batch.column(i).clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(batch_err(table.name))?;
    // Each row's key hashed to 64 bits: keys whose hashes differ differ, and
    // only equal hashes need comparing the keys themselves. Seeded at random,
    // as the keys come from the service.
    let state = foldhash::fast::RandomState::default();
    let mut hashes = vec![0_u64; batch.num_rows()];
    for column in &keys {
        match column.data_type() {
            DataType::Utf8 => mix(&state, &mut hashes, column.as_string::<i32>().iter()),
            DataType::Int64 => mix(&state, &mut hashes, column.as_primitive::<Int64Type>().iter()),
            DataType::Date32 => mix(&state, &mut hashes, column.as_primitive::<Date32Type>().iter()),
            DataType::Timestamp(arrow::datatypes::TimeUnit::Microsecond, _) => {
                mix(
                    &state,
                    &mut hashes,
                    column.as_primitive::<TimestampMicrosecondType>().iter(),
                );
            }
            DataType::Float64 => mix(
                &state,
                &mut hashes,
                column.as_primitive::<Float64Type>().iter().map(|v| v.map(f64::to_bits)),
            ),
            _ => return keys_compared_distinct(table, &keys),
        }
    }
    hashes.sort_unstable();
    if hashes.windows(2).all(|pair| pair[0] != pair[1]) {
        return Ok(true);
    }
    keys_compared_distinct(table, &keys)
}

/// [`keys_are_distinct`] by comparing the keys themselves.
fn keys_compared_distinct(table: &TableDef, keys: &[ArrayRef]) -> Result<bool, BatchError> {
    let converter = arrow::row::RowConverter::new(
        keys.iter()
            .map(|k| arrow::row::SortField::new(k.data_type().clone()))
            .collect(),
    )
    .map_err(batch_err(table.name))?;
    let rows = converter.convert_columns(keys).map_err(batch_err(table.name))?;
    let mut seen =
        std::collections::HashSet::with_capacity_and_hasher(rows.num_rows(), foldhash::fast::RandomState::default());
    Ok(rows.iter().all(|row| seen.insert(row)))
}

/// A partition of a [`LoadRule::Replace`](crate::tables::LoadRule::Replace)
/// table that a response held in full: what it no longer holds is withdrawn
/// as of that response.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Replaced {
    pub partition: String,
    /// When the response was fetched, and the run that fetched it.
    pub seen_at: DateTime<Utc>,
    pub run_id: String,
}

/// One table's rows, ready to load.
#[derive(Debug)]
pub struct TableBatch {
    pub table: &'static TableDef,
    pub batch: RecordBatch,
    /// [`LoadRule::Replace`](crate::tables::LoadRule::Replace): the partitions
    /// this batch holds in full, even those it holds no row of.
    pub partitions: Vec<Replaced>,
    /// [`keys_are_distinct`] of this batch, when it was found before the
    /// batch reached the writer ([`TableBatch::find_distinct_keys`]).
    pub distinct_keys: Option<bool>,
}

impl TableBatch {
    /// Finishes a builder into a batch for its table.
    ///
    /// # Errors
    /// When a row was misshapen (a bug in a feed's reader), named with the table.
    pub fn build(builder: BatchBuilder) -> Result<TableBatch, BatchError> {
        let table = builder.table();
        let batch = builder.finish().map_err(batch_err(table.name))?;
        Ok(TableBatch {
            table,
            batch,
            partitions: Vec::new(),
            distinct_keys: None,
        })
    }

    /// Notes [`keys_are_distinct`] of each batch of a table with a key and
    /// at least `min_rows` rows, so that the writer, a backfill's bottleneck,
    /// need not.
    ///
    /// # Errors
    /// As [`keys_are_distinct`].
    pub fn find_distinct_keys(batches: &mut [TableBatch], min_rows: usize) -> Result<(), BatchError> {
        for b in batches {
            if !b.table.key.is_empty() && b.batch.num_rows() >= min_rows {
                b.distinct_keys = Some(keys_are_distinct(b.table, &b.batch)?);
            }
        }
        Ok(())
    }

    /// One batch per table, in the order tables first appear, rows in their
    /// order: a commit of several pages then merges each table once, since
    /// DuckDB plans every statement anew and the planning, not the rows,
    /// is most of a small merge's cost.
    ///
    /// # Errors
    /// When two batches of one table differ in schema (a bug in a reader).
    pub fn coalesce(batches: Vec<TableBatch>) -> Result<Vec<TableBatch>, BatchError> {
        let mut by_table: Vec<(TableBatch, Vec<RecordBatch>)> = Vec::new();
        for b in batches {
            match by_table.iter_mut().find(|(first, _)| first.table.name == b.table.name) {
                Some((first, more)) => {
                    first.partitions.extend(b.partitions);
                    more.push(b.batch);
                }
                None => by_table.push((b, Vec::new())),
            }
        }
        by_table
            .into_iter()
            .map(|(mut first, more)| {
                if !more.is_empty() {
                    let schema = first.batch.schema();
                    let all = std::iter::once(&first.batch).chain(more.iter());
                    first.batch = arrow::compute::concat_batches(&schema, all).map_err(batch_err(first.table.name))?;
                    first.distinct_keys = None;
                    // The latest response of a partition says what it holds.
                    first.partitions.sort();
                    first.partitions.reverse();
                    first.partitions.dedup_by(|a, b| a.partition == b.partition);
                }
                Ok(first)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_batch_with_lineage() {
        let table = crate::feeds::table("coverage_snapshots").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        b.row()
            .date(NaiveDate::from_ymd_opt(2026, 11, 25))
            .text(Some("US"))
            .text(Some("prices"))
            .int(Some(5231))
            .date(NaiveDate::from_ymd_opt(1990, 1, 2))
            .float(Some(99.1))
            .int(Some(8731))
            .timestamp(Some(Utc::now()))
            .end("{}", "/api/v1/landing/coverage");
        let batch = b.finish().unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.num_columns(), table.all_columns().count());
    }

    #[test]
    fn keys_are_distinct_until_one_repeats() {
        let table = crate::feeds::table("coverage_snapshots").unwrap();
        let batch_of = |keys: &[(u32, &str, &str)]| {
            let mut b = BatchBuilder::new(table, "run-1", Utc::now());
            for (day, market, data_type) in keys {
                b.row()
                    .date(NaiveDate::from_ymd_opt(2026, 11, *day))
                    .text(Some(market))
                    .text(Some(data_type))
                    .int(Some(1))
                    .date(None)
                    .float(None)
                    .int(None)
                    .timestamp(None)
                    .end("{}", "/api/v1/landing/coverage");
            }
            TableBatch::build(b).unwrap()
        };
        let distinct = [
            (1, "US", "prices"),
            (1, "US", "news"),
            (2, "US", "prices"),
            (1, "TW", "prices"),
        ];
        let mut batches = vec![
            batch_of(&distinct),
            batch_of(&[distinct[0], distinct[1], distinct[0]]),
            batch_of(&[distinct[3], distinct[1], distinct[3]]),
        ];
        TableBatch::find_distinct_keys(&mut batches, 3).unwrap();
        let found: Vec<Option<bool>> = batches.iter().map(|b| b.distinct_keys).collect();
        assert_eq!(found, [Some(true), Some(false), Some(false)]);
        TableBatch::find_distinct_keys(&mut batches[..1], 5).unwrap();
        assert_eq!(
            batches[0].distinct_keys,
            Some(true),
            "a batch under the least rows keeps what it had"
        );
        let mut small = vec![batch_of(&distinct)];
        TableBatch::find_distinct_keys(&mut small, 5).unwrap();
        assert_eq!(small[0].distinct_keys, None);
        let together = TableBatch::coalesce(vec![batches.remove(0), batch_of(&distinct[..1])]).unwrap();
        assert_eq!(
            together[0].distinct_keys, None,
            "what held for one page need not for the group"
        );
    }

    #[test]
    fn a_misshapen_row_is_an_error_not_a_panic() {
        let table = crate::feeds::table("coverage_snapshots").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        b.row().int(Some(1)).end("{}", "/x");
        assert!(b.finish().unwrap_err().to_string().contains("observed_date"));
    }
}
