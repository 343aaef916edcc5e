//! Transactions: a commit's rows and checkpoints loaded together or not at
//! all, and bulk commits held open until they fill the warehouse's row
//! groups.

use std::collections::HashMap;

use chrono::Utc;

use super::settings::{
    APPEND_ROOM_BYTES, BULK_ROWS, CHECKPOINT_ON_COMMIT_ROWS, HELD_ROW_GROUPS, PAUSE_MERGES, RESUME_MERGES,
    ROW_GROUP_ROWS, SMALL_COMMIT_ROWS, set_checkpoint_threshold,
};
use super::{DuckDbSink, REPLACED_LOG, sql_err};
use crate::batch::{BatchBuilder, TableBatch};
use crate::bookkeeping::{CheckpointRow, SYNC_CHECKPOINTS};
use crate::sink::{Checkpoint, Commit, CommitStats, SinkError};

/// Commits loaded in the writer's open transaction and not yet committed.
#[derive(Debug, Default)]
pub(super) struct Held {
    pub(super) commits: usize,
    /// Rows loaded per table since the transaction began.
    pub(super) rows: HashMap<&'static str, usize>,
    /// The held commits' bookkeeping rows (request log, quota ledger) and
    /// checkpoints, loaded once as the transaction commits rather than a
    /// few statements per commit; in the same
    /// transaction, so nothing changes for a reader or a crash.
    pub(super) deferred: Vec<TableBatch>,
    pub(super) checkpoints: Vec<Checkpoint>,
}

impl Held {
    /// `commit` without its bookkeeping rows and checkpoints, which `self`
    /// keeps for the end of the transaction.
    pub(super) fn defer_bookkeeping(&mut self, commit: Commit) -> Commit {
        let (deferred, batches): (Vec<TableBatch>, Vec<TableBatch>) =
            commit.batches.into_iter().partition(|b| b.table.is_bookkeeping());
        self.deferred.extend(deferred);
        self.checkpoints.extend(commit.checkpoints);
        Commit {
            batches,
            checkpoints: Vec::new(),
        }
    }

    /// `commit` without its checkpoints, which `self` loads after those of
    /// the commits held before it: loaded at once, they would land before
    /// the held ones, and an older cursor of the same partition would win.
    pub(super) fn defer_checkpoints(&mut self, mut commit: Commit) -> Commit {
        self.checkpoints.append(&mut commit.checkpoints);
        commit
    }

    /// Whether `commit`, a small one ([`SMALL_COMMIT_ROWS`]), would take one
    /// of its tables past [`HELD_ROW_GROUPS`] whole row groups: the
    /// transaction then lands without it, so no landing ends in a few
    /// hundred rows that a later checkpoint merges and compresses again.
    pub(super) fn overflows_with(&self, commit: &Commit) -> bool {
        commit.batches.iter().any(|b| {
            let held = self.rows.get(b.table.name).copied().unwrap_or(0);
            let rows = b.batch.num_rows();
            held > 0 && rows <= SMALL_COMMIT_ROWS && held + rows > HELD_ROW_GROUPS * ROW_GROUP_ROWS
        })
    }

    /// Whether the transaction should commit now: once a table holds
    /// [`HELD_ROW_GROUPS`] row groups, written compressed as they filled,
    /// which no checkpoint merges again.
    pub(super) fn fills_row_groups(&self) -> bool {
        self.most_rows() >= HELD_ROW_GROUPS * ROW_GROUP_ROWS
    }

    /// The rows of the table that holds the most.
    pub(super) fn most_rows(&self) -> usize {
        self.rows.values().copied().max().unwrap_or(0)
    }
}

impl DuckDbSink {
    /// Commits rows and checkpoints in one transaction, with any commits
    /// held before them.
    ///
    /// # Errors
    /// Any failure rolls the whole transaction back; nothing is half-written.
    pub fn commit(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.load_commit(commit, false)
    }

    /// Loads rows and checkpoints as [`DuckDbSink::commit`] does, but leaves
    /// the transaction open for the next commits until it fills DuckDB's row
    /// groups (`Held::fills_row_groups`). Each commit of a backfill used to
    /// end in a partial row group, and the next one started a new one; the
    /// first checkpoint after the load then merged them, compressing most
    /// rows a second time: a quarter of a backfill's time, and a file two
    /// thirds larger. Rows and checkpoints still
    /// commit together, so a crash loses the held commits whole and the next
    /// run reads them again. [`DuckDbSink::commit_held_now`] or the next
    /// [`DuckDbSink::commit`] commits them.
    ///
    /// # Errors
    /// Any failure rolls back this commit and those held with it.
    pub fn commit_held(&mut self, commit: Commit) -> Result<CommitStats, SinkError> {
        self.load_commit(commit, self.holds_bulk_commits)
    }

    /// Commits the transaction [`DuckDbSink::commit_held`] left open, if any.
    ///
    /// # Errors
    /// When the commit fails: the held commits are rolled back.
    pub fn commit_held_now(&mut self) -> Result<(), SinkError> {
        let Some(mut held) = self.held.take() else {
            return Ok(());
        };
        if let Err(e) = self.land(&mut held) {
            let _ = self.conn.execute_batch("ROLLBACK");
            return Err(self.rolled_back(e, held.commits, true));
        }
        tracing::trace!(message = "Committed the held commits.", commits = held.commits);
        Ok(())
    }

    /// Ends the transaction `held` describes: loads the bookkeeping rows and
    /// checkpoints it deferred, as one commit's (each table's rows together,
    /// the last checkpoint of a partition winning as it would have one commit
    /// at a time), then `COMMIT`s.
    pub(super) fn land(&mut self, held: &mut Held) -> Result<(), SinkError> {
        if !held.deferred.is_empty() || !held.checkpoints.is_empty() {
            let commit = Commit {
                batches: TableBatch::coalesce(std::mem::take(&mut held.deferred))?,
                checkpoints: std::mem::take(&mut held.checkpoints),
            };
            let seq = self.next_commit_seq()?;
            self.commit_inner(commit, seq)?;
        }
        self.commit_open(held)
    }

    /// `COMMIT`s the open transaction, which `held` describes. The automatic
    /// checkpoint a `COMMIT` may run does not merge row groups when the
    /// transaction was a bulk load ([`BULK_ROWS`]), and runs as it commits,
    /// instead of the WAL write, when a held transaction's rows go through
    /// the WAL ([`CHECKPOINT_ON_COMMIT_ROWS`]).
    pub(super) fn commit_open(&mut self, held: &Held) -> Result<(), SinkError> {
        // A bulk load's row groups were written as they filled, save the last, which DuckDB
        // spilled: under the whole limit, committing read it back into memory until the limit was
        // full. A smaller transaction may checkpoint as it commits, which needs the whole limit.
        let fills_row_groups = held.most_rows() >= ROW_GROUP_ROWS;
        if fills_row_groups {
            self.limit_memory(self.settings.append_memory_limit_mb(APPEND_ROOM_BYTES));
        } else {
            self.unlimit_memory();
        }
        let bulk = held.rows.values().sum::<usize>() >= BULK_ROWS;
        if bulk {
            self.conn
                .execute_batch(PAUSE_MERGES)
                .map_err(sql_err("-", "pausing row-group merges for a bulk load"))?;
        }
        let checkpoint_now =
            self.holds_bulk_commits && (CHECKPOINT_ON_COMMIT_ROWS..ROW_GROUP_ROWS).contains(&held.most_rows());
        if checkpoint_now {
            self.conn
                .execute_batch(&set_checkpoint_threshold(0))
                .map_err(sql_err("-", "checkpointing as the commit lands"))?;
        }
        let committed = match self.conn.execute_batch("COMMIT") {
            // The rows are in the WAL; attached again, DuckDB reads them from it.
            Err(e) if super::durable_despite_checkpoint(&e.to_string()) => return self.reattach(),
            result => result.map_err(sql_err("-", "commit")),
        };
        if checkpoint_now
            && let Err(e) = self
                .conn
                .execute_batch(&set_checkpoint_threshold(self.settings.checkpoint_threshold_mb()))
        {
            tracing::warn!(message = "Could not set the checkpoint threshold back.", error = %e);
        }
        if bulk {
            // Back to DuckDB's default, so the next checkpoint of small
            // commits (or the one at close) merges what the bulk load left.
            if let Err(e) = self.conn.execute_batch(RESUME_MERGES) {
                tracing::warn!(message = "Could not resume row-group merges.", error = %e);
            }
        }
        if committed.is_ok() && !fills_row_groups {
            self.trim_cache();
        }
        committed
    }

    pub(super) fn load_commit(&mut self, commit: Commit, may_hold: bool) -> Result<CommitStats, SinkError> {
        let started = std::time::Instant::now();
        let staged_rows: usize = commit.batches.iter().map(|b| b.batch.num_rows()).sum();
        crate::sink::note_load(staged_rows);
        self.rows_since_open = self.rows_since_open.saturating_add(staged_rows);
        if may_hold && self.held.as_ref().is_some_and(|held| held.overflows_with(&commit)) {
            self.commit_held_now()?;
        }
        let mut held = match self.held.take() {
            Some(held) => held,
            None => {
                self.conn
                    .execute_batch("BEGIN TRANSACTION")
                    .map_err(sql_err("-", "begin"))?;
                Held::default()
            }
        };
        held.commits += 1;
        for b in &commit.batches {
            *held.rows.entry(b.table.name).or_default() += b.batch.num_rows();
        }
        let commit = if may_hold {
            held.defer_bookkeeping(commit)
        } else {
            held.defer_checkpoints(commit)
        };
        let loaded = self.next_commit_seq().and_then(|seq| self.commit_inner(commit, seq));
        let committed = loaded.and_then(|stats| {
            let load_ms = started.elapsed().as_secs_f64() * 1e3;
            if may_hold && !held.fills_row_groups() {
                tracing::trace!(message = "Held.", load_ms, commits = held.commits);
                return Ok((stats, Some(std::mem::take(&mut held))));
            }
            self.land(&mut held)?;
            tracing::trace!(
                message = "Committed.",
                load_ms,
                total_ms = started.elapsed().as_secs_f64() * 1e3,
                commits = held.commits
            );
            Ok((stats, None))
        });
        match committed {
            Ok((stats, still_held)) => {
                self.held = still_held;
                Ok(stats)
            }
            Err(e) => {
                // After a failed COMMIT no transaction is left: this fails, harmlessly.
                let _ = self.conn.execute_batch("ROLLBACK");
                Err(self.rolled_back(e, held.commits - 1, may_hold))
            }
        }
    }

    /// `e` from a transaction that also held `earlier` commits: explained,
    /// and those commits named in the log, since their callers were told
    /// they were loaded. Out of memory on a commit it could hold, the writer
    /// stops holding; when DuckDB invalidated the database, the writer
    /// attaches it again, so the next commit works.
    pub(super) fn rolled_back(&mut self, e: SinkError, earlier: usize, holding: bool) -> SinkError {
        // The limit DuckDB ran out under, before the whole one is given back.
        let limit_mb = self.memory_limit_now_mb.get();
        self.unlimit_memory();
        if let SinkError::Sql { source, .. } = &e
            && super::invalidated(&source.to_string())
            && let Err(reopening) = self.reattach()
        {
            tracing::error!(message = "Could not open the warehouse again.", error = %reopening);
        }
        if earlier > 0 {
            tracing::warn!(
                message = "A failed commit rolled back the commits held with it; the next run reads their pages again.",
                commits = earlier
            );
        }
        let e = self.explained(e, limit_mb);
        if holding && matches!(e, SinkError::OutOfMemory { .. }) {
            // What this writer holds is what ran out: it commits each bulk
            // load on its own from now on.
            self.holds_bulk_commits = false;
            tracing::warn!(
                message = "Out of memory while holding bulk commits; this writer no longer holds them.",
                memory_limit_mb = self.settings.duckdb_memory_limit_mb()
            );
        }
        e
    }

    /// `e`, named for what the operator can do about it when it is DuckDB
    /// running out of memory (under `limit_mb`) or of disk.
    pub(super) fn explained(&self, e: SinkError, limit_mb: u64) -> SinkError {
        let SinkError::Sql { table, context, source } = e else {
            return e;
        };
        let message = source.to_string();
        let first_line = message.lines().next().unwrap_or_default().to_owned();
        // The appender passes DuckDB's out-of-memory error on without its
        // "Out of Memory Error" prefix.
        if message.contains("Out of Memory")
            || message.contains("could not allocate block")
            || message.contains("failed to allocate data of size")
        {
            SinkError::OutOfMemory {
                table,
                context,
                limit_mb,
                configured_mb: self.settings.duckdb_memory_limit_mb(),
                message: first_line,
            }
        } else if message.contains("No space left on device") {
            SinkError::DiskFull {
                path: self.path.clone(),
                message: first_line,
            }
        } else {
            SinkError::Sql { table, context, source }
        }
    }

    pub(super) fn next_commit_seq(&self) -> Result<i64, SinkError> {
        self.conn
            .prepare_cached("SELECT nextval('_sync_commit_seq')")
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(sql_err(REPLACED_LOG, "numbering the commit"))
    }

    pub(super) fn commit_inner(&mut self, commit: Commit, seq: i64) -> Result<CommitStats, SinkError> {
        let mut stats = CommitStats::default();
        for TableBatch {
            table,
            batch,
            partitions,
            distinct_keys,
        } in commit.batches
        {
            if batch.num_rows() == 0 && partitions.is_empty() {
                continue;
            }
            let written = self.load(table, batch, &partitions, distinct_keys, seq)?;
            if table.lineage {
                stats.rows_written += written;
                match stats.per_table.iter_mut().find(|(name, _)| *name == table.name) {
                    Some((_, n)) => *n += written,
                    None => stats.per_table.push((table.name, written)),
                }
            }
        }
        if !commit.checkpoints.is_empty() {
            let mut b = BatchBuilder::new(&SYNC_CHECKPOINTS, "", Utc::now());
            let now = Utc::now();
            for c in &commit.checkpoints {
                b.push_bare(CheckpointRow {
                    pipeline: Some(&c.pipeline),
                    partition: Some(&c.partition),
                    cursor: Some(&c.cursor),
                    updated_at: Some(now),
                });
            }
            let TableBatch { table, batch, .. } = TableBatch::build(b)?;
            self.load(table, batch, &[], None, seq)?;
        }
        Ok(stats)
    }
}
