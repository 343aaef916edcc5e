//! Rows to Arrow record batches: one typed builder per column of a [`TableDef`].
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
    fn new(ty: ColType) -> ColumnBuilder {
        match ty {
            ColType::Text | ColType::Json => ColumnBuilder::Text(StringBuilder::new()),
            ColType::Int => ColumnBuilder::Int(Int64Builder::new()),
            ColType::Float => ColumnBuilder::Float(Float64Builder::new()),
            ColType::Bool => ColumnBuilder::Bool(BooleanBuilder::new()),
            ColType::Date => ColumnBuilder::Date(Date32Builder::new()),
            ColType::Timestamp => ColumnBuilder::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC")),
            ColType::TextList => ColumnBuilder::TextList(ListBuilder::new(StringBuilder::new())),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables;

    #[test]
    fn builds_a_batch_with_lineage() {
        let table = tables::table("coverage_snapshots").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        b.row()
            .date(NaiveDate::from_ymd_opt(2026, 11, 25))
            .text(Some("US"))
            .text(Some("prices"))
            .int(Some(5231))
            .date(NaiveDate::from_ymd_opt(1990, 1, 2))
            .float(Some(99.1))
            .int(Some(8731))
            .end("{}", "/api/v1/landing/coverage");
        let batch = b.finish().unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.num_columns(), table.all_columns().count());
    }

    #[test]
    fn a_misshapen_row_is_an_error_not_a_panic() {
        let table = tables::table("coverage_snapshots").unwrap();
        let mut b = BatchBuilder::new(table, "run-1", Utc::now());
        b.row().int(Some(1)).end("{}", "/x");
        assert!(b.finish().unwrap_err().to_string().contains("observed_date"));
    }
}
