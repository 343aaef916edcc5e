//! Loading one table's batch: sliced to the memory limit, staged, then
//! merged by its load rule; a batch of new keys is appended directly.

use arrow::record_batch::RecordBatch;

use super::arrow_scan::ARROW_ROWS;
use super::merge::{
    Merge, NewKeysOnly, create_stage, insert_version, key_bounds, key_columns, key_positions, log_lake_partitions_left,
    merge_statements, staged_key_range, staging, stored_columns,
};
use super::settings::{APPEND_ROOM_BYTES, MIN_PROBE_ROWS, MIN_SLICE_ROWS};
use super::{BOUND_LIST, COMMIT_SEQ, DuckDbSink, REPLACED_LOG, ident, json_list, partition_text, sql_err};
use crate::batch::{Replaced, batch_err, keys_are_distinct};
use crate::sink::SinkError;
use crate::tables::{ColType, LoadRule, TableDef};

/// The least and greatest staged value of each of a table's key columns, as
/// text, in key order; `None` for a keyless table. A bound is `None` when no
/// staged key has a value there, which no stored row matches.
type StagedKeyRange = Option<Vec<Option<String>>>;

/// What probing a batch's keys found.
enum AllNew {
    /// Every key was new: the rows were appended.
    Appended(u64),
    /// Some key is stored: the batch merges.
    SomeStored,
    /// The batch does not qualify for the probe.
    NotProbed,
}

impl DuckDbSink {
    /// Loads one batch by its table's rule and returns the rows inserted or
    /// changed; `distinct_keys` is [`keys_are_distinct`] of it when that is known.
    pub(super) fn load(
        &mut self,
        table: &'static TableDef,
        batch: RecordBatch,
        partitions: &[Replaced],
        distinct_keys: Option<bool>,
        seq: i64,
    ) -> Result<u64, SinkError> {
        self.merges.entry(table.name).or_insert_with(|| {
            let (statements, new_keys_only) = merge_statements(table);
            Merge {
                create_stage: create_stage(table),
                statements,
                staged_key_range: staged_key_range(table),
                new_keys_only,
                last_held_stored: std::cell::Cell::new(false),
            }
        });
        // A batch of new keys goes in whole, whatever its size: only a merge
        // needs its input sliced to the memory limit.
        let known_stored = match self.append_if_all_new(table, &batch, partitions, distinct_keys, seq)? {
            AllNew::Appended(rows) => return Ok(rows),
            AllNew::SomeStored => true,
            AllNew::NotProbed => false,
        };
        let mut written = 0;
        // A batch that replaces partitions deletes what it does not hold, so
        // it merges whole.
        let slices = if partitions.is_empty() {
            self.slices(table, batch)
        } else {
            vec![batch]
        };
        for slice in slices {
            written += self.load_slice(table, slice, partitions, seq, known_stored)?;
        }
        Ok(written)
    }

    /// Appends `batch` straight into `table` when its keys
    /// are distinct and none is stored, as the baseline does: staging
    /// the rows and copying them over cost twice the rows' appending. Only
    /// its keys are staged, to probe.
    fn append_if_all_new(
        &self,
        table: &'static TableDef,
        batch: &RecordBatch,
        partitions: &[Replaced],
        distinct_keys: Option<bool>,
        seq: i64,
    ) -> Result<AllNew, SinkError> {
        let merge = &self.merges[table.name];
        let Some(new_keys_only) = &merge.new_keys_only else {
            return Ok(AllNew::NotProbed);
        };
        if batch.num_rows() < MIN_PROBE_ROWS || !partitions.is_empty() {
            return Ok(AllNew::NotProbed);
        }
        let keys = batch.project(&key_positions(table)).map_err(batch_err(table.name))?;
        let distinct = match distinct_keys {
            Some(distinct) => distinct,
            None => keys_are_distinct(table, batch)?,
        };
        if !distinct {
            return Ok(AllNew::NotProbed);
        }
        let bounds = key_bounds(&keys);
        if !merge.last_held_stored.get()
            && bounds.is_some()
            && !self.any_staged_key_stored(table, &new_keys_only.stored_in_range, &bounds)?
        {
            return self.append_new_rows(table, batch.clone(), seq).map(AllNew::Appended);
        }
        self.stage(table, &new_keys_only.create_key_stage, keys)?;
        // The staged keys' range is the batch's, when it has an exact text.
        let range = if bounds.is_some() {
            bounds
        } else {
            self.staged_key_range(table, merge.staged_key_range.as_deref())?
        };
        let some_stored = self.any_staged_key_stored(table, &new_keys_only.probe, &range)?;
        merge.last_held_stored.set(some_stored);
        if some_stored {
            return Ok(AllNew::SomeStored);
        }
        self.append_new_rows(table, batch.clone(), seq).map(AllNew::Appended)
    }

    /// `batch` cut into the slices merged one statement at a time. A merge
    /// holds a statement's whole input in memory, so a slice is at most a
    /// sixteenth of the memory limit: the same rows in several statements of
    /// one transaction fit where one statement does not.
    pub(super) fn slices(&self, table: &TableDef, batch: RecordBatch) -> Vec<RecordBatch> {
        let rows = batch.num_rows();
        let bytes = batch.get_array_memory_size().max(1);
        let budget = usize::try_from(self.settings.duckdb_memory_limit_mb() << 20).unwrap_or(usize::MAX) / 16;
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
        // Even slices: a short last one would cost a whole statement's fixed cost.
        let per_slice = rows.div_ceil(rows.div_ceil(per_slice));
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

    pub(super) fn load_slice(
        &mut self,
        table: &'static TableDef,
        batch: RecordBatch,
        partitions: &[Replaced],
        seq: i64,
        known_stored: bool,
    ) -> Result<u64, SinkError> {
        self.unlimit_memory();
        let stage = staging(table);
        let staged_rows = batch.num_rows();
        let merge = &self.merges[table.name];
        self.stage(table, &merge.create_stage, batch)?;
        // A Replace table's responses, or another's read again whole (a
        // restated history), name the partitions they hold in full.
        if !partitions.is_empty() {
            let target = ident(table.name);
            let key: Vec<String> = table.key.iter().map(|k| ident(k)).collect();
            let on: Vec<String> = key.iter().map(|k| format!("t.{k} = s.{k}")).collect();
            let part = partition_text(table, Some("t"));
            let withdrawn = format!("NOT EXISTS (SELECT 1 FROM {stage} s WHERE {})", on.join(" AND "));
            if table.versions {
                // Kept as they were, closed as of the response that left them
                // out: one statement for every partition of the commit.
                let served: Vec<serde_json::Value> = partitions
                    .iter()
                    .map(|p| serde_json::json!({"part": p.partition, "seen": p.seen_at.to_rfc3339(), "run": p.run_id}))
                    .collect();
                self.conn
                    .execute(
                        &format!(
                            "{} SELECT {}, CAST(p.u.seen AS TIMESTAMPTZ), p.u.run, 'withdrawn', CAST({seq} AS BIGINT) \
                             FROM {target} t JOIN (SELECT unnest(from_json(?::JSON, \
                             '[{{\"part\":\"VARCHAR\",\"seen\":\"VARCHAR\",\"run\":\"VARCHAR\"}}]')) AS u) p \
                             ON {part} = p.u.part WHERE {withdrawn}",
                            insert_version(table),
                            stored_columns(table, "t"),
                        ),
                        [serde_json::Value::Array(served).to_string()],
                    )
                    .map_err(sql_err(table.name, "keeping the rows the service no longer serves"))?;
            }
            let names: Vec<String> = partitions.iter().map(|p| p.partition.clone()).collect();
            if let Some(lake) = table.lake_partition {
                // The lake partitions the withdrawn rows leave: rewritten
                // at the next publish even when no other row changed there.
                self.conn
                    .execute(
                        &format!(
                            "{} {target} t WHERE {part} IN (SELECT value FROM {BOUND_LIST}) AND {withdrawn}",
                            log_lake_partitions_left(table, lake, &seq.to_string()),
                        ),
                        [json_list(&names)],
                    )
                    .map_err(sql_err(
                        table.name,
                        "logging the lake partitions rows are withdrawn from",
                    ))?;
            }
            self.conn
                .execute(
                    &format!("DELETE FROM {target} t WHERE {part} IN (SELECT value FROM {BOUND_LIST}) AND {withdrawn}"),
                    [json_list(&names)],
                )
                .map_err(sql_err(table.name, "removing rows the service no longer serves"))?;
            let mut log = self
                .conn
                .prepare_cached(&format!("INSERT INTO {REPLACED_LOG} VALUES (?, ?, ?)"))
                .map_err(sql_err(table.name, "logging the replaced partitions"))?;
            for p in partitions {
                log.execute(duckdb::params![seq, table.name, p.partition.as_str()])
                    .map_err(sql_err(table.name, "logging the replaced partitions"))?;
            }
        }
        let merge_started = std::time::Instant::now();
        let range = self.staged_key_range(table, merge.staged_key_range.as_deref())?;
        let all_new = match &merge.new_keys_only {
            Some(NewKeysOnly { probe, insert, .. }) if staged_rows >= MIN_PROBE_ROWS && !known_stored => {
                (!self.any_staged_key_stored(table, probe, &range)?).then_some(insert)
            }
            _ => None,
        };
        let run = |sql: &str, with_range: bool| {
            let mut statement = self.conn.prepare_cached(sql)?;
            match (with_range, &range) {
                (true, Some(bounds)) => {
                    let bounds = bounds.iter().map(|b| b as &dyn duckdb::ToSql);
                    statement.execute(duckdb::params_from_iter(
                        std::iter::once(&seq as &dyn duckdb::ToSql).chain(bounds),
                    ))
                }
                _ => statement.execute([seq]),
            }
        };
        let mut written = 0;
        match all_new {
            Some(insert) => written = run(insert, false).map_err(sql_err(table.name, "merging the staged rows"))?,
            None => {
                let mut skip = 0;
                for statement in &merge.statements {
                    if skip > 0 {
                        skip -= 1;
                        continue;
                    }
                    let changed = run(&statement.sql, true).map_err(sql_err(table.name, "merging the staged rows"))?;
                    if statement.counts {
                        written += changed;
                    }
                    if changed == 0 {
                        skip = statement.skips_when_none;
                    }
                }
            }
        }
        tracing::trace!(
            message = "Loaded.",
            table = table.name,
            rows = written,
            merge_ms = merge_started.elapsed().as_secs_f64() * 1e3
        );
        Ok(written as u64)
    }

    /// `table`'s staging table made anew by `create`, holding `batch`. It is
    /// appended by the appender, not through [`ARROW_ROWS`], whose scan
    /// holds more memory for the merges of a run that finds nothing new.
    pub(super) fn stage(&self, table: &TableDef, create: &str, batch: RecordBatch) -> Result<(), SinkError> {
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

    /// Whether `probe` finds a stored row among those in `range`, which is
    /// `None` only for a keyless table (one without a probe): a staged key,
    /// or ([`NewKeysOnly::stored_in_range`]) any row at all.
    pub(super) fn any_staged_key_stored(
        &self,
        table: &TableDef,
        probe: &str,
        range: &StagedKeyRange,
    ) -> Result<bool, SinkError> {
        let Some(bounds) = range else {
            return Ok(false);
        };
        self.conn
            .prepare_cached(probe)
            .and_then(|mut s| s.query_row(duckdb::params_from_iter(bounds), |r| r.get(0)))
            .map_err(sql_err(table.name, "looking up the staged keys"))
    }

    /// The least and greatest staged value of each of `table`'s key columns,
    /// by its `query` ([`Merge::staged_key_range`]); `None` for a keyless table.
    fn staged_key_range(&self, table: &TableDef, query: Option<&str>) -> Result<StagedKeyRange, SinkError> {
        let Some(query) = query else {
            return Ok(None);
        };
        let columns = 2 * key_columns(table).count();
        self.conn
            .prepare_cached(query)
            .and_then(|mut s| {
                s.query_row([], |r| {
                    (0..columns).map(|i| r.get(i)).collect::<Result<Vec<_>, _>>().map(Some)
                })
            })
            .map_err(sql_err(table.name, "reading the staged keys' range"))
    }

    /// Appends `batch`, whose keys are all new and distinct, to `table` with
    /// the commit number, by column name: a warehouse whose columns were
    /// added over versions may hold them in another order.
    pub(super) fn append_new_rows(&self, table: &TableDef, batch: RecordBatch, seq: i64) -> Result<u64, SinkError> {
        let rows = batch.num_rows();
        // Under a bulk load's lowered limit, with room for the rows on their
        // way in ([`Settings::append_memory_limit_mb`]).
        let bytes = batch.get_array_memory_size().min(APPEND_ROOM_BYTES);
        self.limit_memory(self.settings.append_memory_limit_mb(bytes));
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
        let json = table.all_columns().map(|c| c.ty == ColType::Json).collect();
        self.insert_rows(table.name, &names, with_seq, json)
            .map_err(sql_err(table.name, "appending new rows"))?;
        tracing::trace!(message = "Appended.", table = table.name, rows);
        Ok(rows as u64)
    }

    /// Inserts `batch` into `table`'s `columns`, in the batch's order, in one
    /// statement reading it through [`ARROW_ROWS`].
    pub(super) fn insert_rows(
        &self,
        table: &str,
        columns: &[&str],
        batch: RecordBatch,
        json: Vec<bool>,
    ) -> Result<usize, duckdb::Error> {
        let columns: Vec<String> = columns.iter().map(|n| ident(n)).collect();
        let lent = self.instance.lend(batch, json).map_err(|message| {
            duckdb::Error::DuckDBFailure(duckdb::ffi::Error::new(duckdb::ffi::DuckDBError), Some(message))
        })?;
        self.conn
            .prepare_cached(&format!(
                "INSERT INTO {} ({}) SELECT * FROM {ARROW_ROWS}(?)",
                ident(table),
                columns.join(", ")
            ))?
            .execute([lent.token()])
    }
}
