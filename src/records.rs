//! What a feed's reader writes one response into: a batch per table, and
//! the records that could not be loaded.
//!
//! A record that does not fit its table (a missing key field, a wrong type) is
//! quarantined with the reason instead of stopping the run or vanishing.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::batch::{BatchBuilder, BatchError, Row, TableBatch};
use crate::bookkeeping::{QuarantineRow, SYNC_QUARANTINE};
use crate::tables::TableDef;

/// A record that could not be loaded, kept for `_sync_quarantine`.
#[derive(Debug, Clone)]
pub struct Quarantined {
    pub route: String,
    pub record: String,
    pub error: String,
}

/// What one response maps to.
pub struct Rows {
    pub run_id: String,
    pub route: String,
    pub fetched_at: DateTime<Utc>,
    builders: Vec<BatchBuilder>,
    /// Partitions of `replace` tables this response holds in full.
    replaced: Vec<(&'static str, String)>,
    pub quarantined: Vec<Quarantined>,
    /// The keys of rows already made from this response, or from every page
    /// of a tape ([`Rows::share_seen`]).
    seen: SeenKeys,
}

/// Keys of rows made so far: shared by the pages of a tape, which are
/// mapped on blocking threads.
pub type SeenKeys = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

impl Rows {
    pub fn new(run_id: &str, route: &str, fetched_at: DateTime<Utc>) -> Rows {
        Rows {
            run_id: run_id.into(),
            route: route.into(),
            fetched_at,
            builders: Vec::new(),
            replaced: Vec::new(),
            quarantined: Vec::new(),
            seen: SeenKeys::default(),
        }
    }

    /// Shares `seen` ([`Rows::is_new`]) with the other pages of one tape, so
    /// that a row many pages repeat is loaded once a run rather than once a
    /// page (a merge each, about 5 ms).
    pub fn share_seen(&mut self, seen: SeenKeys) {
        self.seen = seen;
    }

    /// Declares that these rows hold all of `partition` in `table` (a
    /// [`crate::tables::LoadRule::Replace`] table): stored rows not among them go.
    pub fn replace_partition(&mut self, table: &'static TableDef, partition: &str) {
        self.builder(table);
        self.replaced.push((table.name, partition.to_owned()));
    }

    /// Whether nothing was written: no row, no replaced partition, no quarantine.
    pub fn is_empty(&self) -> bool {
        self.builders.is_empty() && self.quarantined.is_empty()
    }

    /// Appends `row` to its table, with the record as served.
    pub fn push<R: Row>(&mut self, row: R, raw: &str) {
        let i = self.builder(R::TABLE);
        self.builders[i].push(row, raw, &self.route);
    }

    /// Appends `row` to its table, which has no lineage.
    pub fn push_bare<R: Row>(&mut self, row: R) {
        let i = self.builder(R::TABLE);
        self.builders[i].push_bare(row);
    }

    /// The index of `table`'s builder, created on first use.
    fn builder(&mut self, table: &'static TableDef) -> usize {
        match self.builders.iter().position(|b| b.table().name == table.name) {
            Some(i) => i,
            None => {
                self.builders
                    .push(BatchBuilder::new(table, &self.run_id, self.fetched_at));
                self.builders.len() - 1
            }
        }
    }

    /// Whether `key` (a row as it would be stored) is new to this response or
    /// the tape sharing [`Rows::share_seen`]; a row whose fields change is a
    /// new key.
    pub fn is_new(&self, key: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_owned())
    }

    /// Parses one record, or quarantines it with the reason.
    pub fn parse<T: DeserializeOwned>(&mut self, raw: &RawValue, what: &str) -> Option<T> {
        match serde_json::from_str(raw.get()) {
            Ok(v) => Some(v),
            Err(e) => {
                self.quarantine(raw.get(), format!("{what}: {e}"));
                None
            }
        }
    }

    pub fn quarantine(&mut self, record: &str, error: String) {
        tracing::warn!(message = "Record quarantined.", route = %self.route, %error);
        self.quarantined.push(Quarantined {
            route: self.route.clone(),
            record: record.to_owned(),
            error,
        });
    }

    pub fn row_count(&self) -> usize {
        self.builders.iter().map(BatchBuilder::len).sum()
    }

    /// About the bytes these rows hold, quarantined records included.
    pub fn value_bytes(&self) -> usize {
        let quarantined: usize = self.quarantined.iter().map(|q| q.record.len() + q.error.len()).sum();
        self.builders.iter().map(BatchBuilder::value_bytes).sum::<usize>() + quarantined
    }

    /// Finished batches, the quarantine included.
    ///
    /// # Errors
    /// When a reader wrote a misshapen row (a bug, reported with the table).
    pub fn into_batches(self) -> Result<Vec<TableBatch>, BatchError> {
        let mut out = Vec::with_capacity(self.builders.len() + 1);
        for b in self.builders {
            let mut batch = TableBatch::build(b)?;
            batch.partitions = self
                .replaced
                .iter()
                .filter(|(t, _)| *t == batch.table.name)
                .map(|(_, p)| p.clone())
                .collect();
            out.push(batch);
        }
        if !self.quarantined.is_empty() {
            let mut b = BatchBuilder::new(&SYNC_QUARANTINE, &self.run_id, self.fetched_at);
            for q in &self.quarantined {
                b.push_bare(QuarantineRow {
                    run_id: Some(&self.run_id),
                    route: Some(&q.route),
                    record: Some(&q.record),
                    error: Some(&q.error),
                    seen_at: Some(self.fetched_at),
                });
            }
            out.push(TableBatch::build(b)?);
        }
        Ok(out)
    }
}
