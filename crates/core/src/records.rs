//! What a feed's reader writes one response into: a batch per table, and
//! the records that could not be loaded.
//!
//! A record that does not fit its table (a missing key field, a wrong type) is
//! quarantined with the reason instead of stopping the run or vanishing.

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::batch::{BatchBuilder, BatchError, Row, TableBatch};
use crate::bookkeeping::{
    EnvelopeFieldRow, QuarantineRow, SYNC_ENVELOPE_FIELDS, SYNC_QUARANTINE, SYNC_UNKNOWN_FIELDS, UnknownFieldRow,
};
use crate::drift::UnknownField;
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
    /// Why the response was not read whole, beside its quarantined records.
    not_whole: Vec<String>,
    /// The first day the response says it covers, when it says (a prices
    /// `displayFrom`): a whole read replaces nothing stored before it.
    pub served_from: Option<chrono::NaiveDate>,
    /// What the response said that the run reports: what (the same for
    /// every company), whom it is about, and whether it counts only when
    /// another response of the run says it too.
    pub reported: Vec<(String, String, bool)>,
    pub quarantined: Vec<Quarantined>,
    /// Fields records carried that their row types do not read.
    pub unknown_fields: Vec<UnknownField>,
    /// Fields of the response's envelope no reader reads, with their values.
    pub envelope: Vec<crate::drift::EnvelopeField>,
    /// The record types whose first record was looked over for unknown fields.
    looked_over: Vec<&'static str>,
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
            not_whole: Vec::new(),
            served_from: None,
            reported: Vec::new(),
            quarantined: Vec::new(),
            unknown_fields: Vec::new(),
            envelope: Vec::new(),
            looked_over: Vec::new(),
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

    /// Says that the response was not read whole (`why`): a list it should
    /// hold was absent or under an unknown name.
    pub fn not_whole(&mut self, why: String) {
        self.not_whole.push(why);
    }

    /// Reports `what` about `about` (a company): the run ends partial and
    /// says it once for every company it concerns.
    pub fn report(&mut self, what: &str, about: String) {
        self.reported.push((what.to_owned(), about, false));
    }

    /// As [`Rows::report`], when one response alone may be a coincidence
    /// (a company listed on the very day a lookback range would start): it
    /// counts only when two or more responses of the run report it.
    pub fn report_if_shared(&mut self, what: &str, about: String) {
        self.reported.push((what.to_owned(), about, true));
    }

    /// Whether every record of the response was read: none quarantined, no
    /// list missing. Only such a response may replace what is stored.
    pub fn is_whole(&self) -> bool {
        self.quarantined.is_empty() && self.not_whole.is_empty()
    }

    /// The replacements this response would have made and does not, since
    /// it was not read whole: its rows are added, nothing stored is removed.
    pub fn withheld_replacements(&self) -> Vec<String> {
        if self.is_whole() {
            return Vec::new();
        }
        let why = self
            .not_whole
            .iter()
            .cloned()
            .chain((!self.quarantined.is_empty()).then(|| format!("{} record(s) quarantined", self.quarantined.len())))
            .collect::<Vec<_>>()
            .join("; ");
        self.replaced
            .iter()
            .map(|(table, partition)| {
                format!(
                    "{table} of {partition} not replaced: {} was not read whole ({why}); its stored rows are kept",
                    self.route
                )
            })
            .collect()
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
        let mut seen = self.seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        !seen.contains(key) && seen.insert(key.to_owned())
    }

    /// Notes the envelope fields at `ignored` (serde_ignored's paths) that
    /// reading `body` left unread: named for drift, kept with their values.
    pub fn note_envelope(&mut self, ignored: &[String], body: &[u8]) {
        let fields = crate::drift::envelope_fields(ignored, body, &self.route);
        self.unknown_fields.extend(fields.iter().map(|f| f.unknown.clone()));
        self.envelope.extend(fields);
    }

    /// Parses one record. A field the row can do without whose value is
    /// unusable is read as absent (the value as served stays in `raw`); a
    /// record whose key or other required field is unusable is quarantined,
    /// the reason naming the field, the value and what was expected.
    pub fn parse<T: DeserializeOwned>(&mut self, raw: &RawValue, what: &str) -> Option<T> {
        let unusable = match read_record::<T>(raw.get()) {
            Ok(v) => {
                // One record of each kind a response: drift shows in every record alike.
                let kind = std::any::type_name::<T>();
                if !self.looked_over.contains(&kind) {
                    self.looked_over.push(kind);
                    self.unknown_fields
                        .extend(crate::drift::unknown_fields::<T>(raw.get(), &self.route));
                }
                return Some(v);
            }
            Err(e) => e,
        };
        let first = unusable.to_string();
        match read_without_unusable_fields::<T>(raw.get(), unusable) {
            Ok(v) => {
                tracing::warn!(
                    message = "Unusable field read as absent; its value stays in raw.",
                    route = %self.route,
                    error = %format!("{what}: {first}"),
                );
                // Read, but not whole: a list element left out must not
                // remove its stored row.
                self.not_whole.push(format!("{what}: {first}"));
                Some(v)
            }
            Err(reason) => {
                self.quarantine(raw.get(), format!("{what}: {reason}"));
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
        // A response not read whole replaces nothing: what it lacks may be
        // what fdsync could not read, not what the service stopped serving.
        let whole = self.is_whole();
        for b in self.builders {
            let mut batch = TableBatch::build(b)?;
            batch.partitions = self
                .replaced
                .iter()
                .filter(|(t, _)| whole && *t == batch.table.name)
                .map(|(_, p)| crate::batch::Replaced {
                    partition: p.clone(),
                    seen_at: self.fetched_at,
                    run_id: self.run_id.clone(),
                })
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
        if !self.unknown_fields.is_empty() {
            let mut b = BatchBuilder::new(&SYNC_UNKNOWN_FIELDS, &self.run_id, self.fetched_at);
            for u in &self.unknown_fields {
                b.push_bare(UnknownFieldRow {
                    route: Some(&u.route),
                    field: Some(&u.field),
                    example: Some(&u.example),
                    run_id: Some(&self.run_id),
                    first_seen_at: Some(self.fetched_at),
                    last_seen_at: Some(self.fetched_at),
                });
            }
            out.push(TableBatch::build(b)?);
        }
        if !self.envelope.is_empty() {
            let mut b = BatchBuilder::new(&SYNC_ENVELOPE_FIELDS, &self.run_id, self.fetched_at);
            for f in &self.envelope {
                b.push_bare(EnvelopeFieldRow {
                    route: Some(&self.route),
                    field: Some(&f.unknown.field),
                    fetched_at: Some(self.fetched_at),
                    value: Some(&f.value),
                    run_id: Some(&self.run_id),
                });
            }
            out.push(TableBatch::build(b)?);
        }
        Ok(out)
    }
}

/// Why a record did not read: the field (a JSON path), and serde's words for
/// the value and what was expected.
#[derive(Debug)]
pub struct Unusable {
    path: serde_path_to_error::Path,
    message: String,
}

impl std::fmt::Display for Unusable {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        if self.path.iter().next().is_none() {
            f.write_str(&self.message)
        } else {
            write!(f, "field `{}`: {}", self.path, self.message)
        }
    }
}

impl Unusable {
    fn new(e: serde_path_to_error::Error<serde_json::Error>) -> Unusable {
        let path = e.path().clone();
        let mut message = e.into_inner().to_string();
        // The position is of a record taken out of its page: no help to anyone.
        if let Some(at) = message.rfind(" at line ") {
            message.truncate(at);
        }
        Unusable { path, message }
    }

    fn is_missing_field(&self) -> bool {
        self.message.starts_with("missing field")
    }
}

/// Reads one record, naming the field that failed. Tracking the path costs
/// every record a few percent of a backfill, so only a record that fails is
/// read again to name it.
fn read_record<T: DeserializeOwned>(text: &str) -> Result<T, Unusable> {
    serde_json::from_str(text).or_else(|_| {
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_str(text)).map_err(Unusable::new)
    })
}

/// Reads a record with each unusable field taken out, as long as what is
/// left still reads; else why not: the unusable field the row needs, or a
/// field it needs that is missing.
fn read_without_unusable_fields<T: DeserializeOwned>(text: &str, first: Unusable) -> Result<T, Unusable> {
    /// More bad fields than this in one record: quarantined whole.
    const MOST_FIELDS_LEFT_OUT: usize = 16;
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(text) else {
        return Err(first);
    };
    let mut cause = first;
    for _ in 0..MOST_FIELDS_LEFT_OUT {
        if remove_at(&mut value, &cause.path).is_none() {
            return Err(cause);
        }
        let next = match serde_path_to_error::deserialize::<_, T>(&value) {
            Ok(v) => return Ok(v),
            Err(e) => Unusable::new(e),
        };
        if next.is_missing_field() {
            let removed = cause.path.iter().next_back().map(ToString::to_string);
            let missing = next.message.split('`').nth(1);
            return Err(if removed.as_deref() == missing { cause } else { next });
        }
        cause = next;
    }
    Err(cause)
}

/// Takes the value at `path` out of `value`; `None` when the path is empty
/// (the record itself) or leads nowhere.
fn remove_at(value: &mut serde_json::Value, path: &serde_path_to_error::Path) -> Option<()> {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let (last, parents) = segments.split_last()?;
    let mut at = value;
    for segment in parents {
        at = match segment {
            Segment::Seq { index } => at.get_mut(*index)?,
            Segment::Map { key } => at.get_mut(key.as_str())?,
            _ => return None,
        };
    }
    match last {
        Segment::Seq { index } => {
            let list = at.as_array_mut()?;
            (*index < list.len()).then(|| list.remove(*index)).map(drop)
        }
        Segment::Map { key } => at.as_object_mut()?.remove(key.as_str()).map(drop),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Record {
        key: String,
        #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
        count: Option<i64>,
        #[serde(default)]
        tags: Vec<String>,
    }

    fn parse(text: &str) -> (Option<Record>, Vec<String>) {
        let mut rows = Rows::new("run", "/r", Utc::now());
        let raw: Box<RawValue> = serde_json::from_str(text).unwrap();
        let record = rows.parse::<Record>(&raw, "record");
        (record, rows.quarantined.into_iter().map(|q| q.error).collect())
    }

    #[test]
    fn only_a_required_field_quarantines_and_the_reason_names_field_value_and_expectation() {
        let (record, quarantined) = parse(r#"{"key": "a", "count": "many", "tags": ["x", 7, "y"]}"#);
        let expected = Record {
            key: "a".into(),
            count: None,
            tags: vec!["x".into(), "y".into()],
        };
        assert_eq!((record, quarantined), (Some(expected), vec![]));

        let (record, quarantined) = parse(r#"{"key": 17, "count": 2}"#);
        assert_eq!(record, None);
        assert_eq!(
            quarantined,
            vec!["record: field `key`: invalid type: integer `17`, expected a string"]
        );

        let (_, quarantined) = parse(r#"{"count": 2.5}"#);
        assert_eq!(quarantined, vec!["record: missing field `key`"]);
    }
}
