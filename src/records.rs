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
    /// The `news_sources` rows already made from this response's items, or
    /// from every page of a tape ([`Rows::share_news_sources`]): a page of
    /// 200 items names a handful of sources, and each row more is one more
    /// for the commit to stage and merge.
    news_sources_made: NewsSourcesMade,
}

/// The `news_sources` rows made so far, by their JSON: shared by the pages
/// of a tape, which are mapped on blocking threads.
pub type NewsSourcesMade = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

impl Rows {
    pub fn new(run_id: &str, route: &str, fetched_at: DateTime<Utc>) -> Rows {
        Rows {
            run_id: run_id.into(),
            route: route.into(),
            fetched_at,
            builders: Vec::new(),
            replaced: Vec::new(),
            quarantined: Vec::new(),
            news_sources_made: NewsSourcesMade::default(),
        }
    }

    /// Makes `news_sources` rows only for sources `made` has not seen: the
    /// pages of one tape share it, so an unchanged source is loaded once a
    /// run rather than once a page (a merge each, about 5 ms). A source
    /// whose fields change is a new row.
    pub fn share_news_sources(&mut self, made: NewsSourcesMade) {
        self.news_sources_made = made;
    }

    /// Declares that these rows hold all of `partition` in `table` (a
    /// [`crate::tables::LoadRule::Replace`] table): stored rows not among them go.
    pub fn replace_partition(&mut self, table: &'static TableDef, partition: &str) {
        self.builder(table);
        self.replaced.push((table.name, partition.to_owned()));
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

    /// Whether `source_json` (a news source as its rows would hold it) is new
    /// to this response or the tape sharing [`Rows::share_news_sources`].
    pub fn news_source_is_new(&self, source_json: &str) -> bool {
        self.news_sources_made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(source_json.to_owned())
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
