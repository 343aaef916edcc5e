//! fdsync's own tables: its record of runs, checkpoints, requests, quota
//! and quarantine, not data from the service.

use crate::batch::table;
use crate::tables::{LakePartition, LoadRule, TableDef};

table! {
    pub const SYNC_RUNS: SyncRunRow = "_sync_runs" {
        run_id: Text,
        pipeline: Text,
        started_at: Timestamp,
        finished_at: Timestamp,
        status: Text,
        requests: Int,
        rows_written: Int,
        error: Text,
        shortfall: Int,
    }
    key: &["run_id", "pipeline"],
    load: LoadRule::Upsert,
    lineage: false,
}

table! {
    pub const SYNC_CHECKPOINTS: CheckpointRow = "_sync_checkpoints" {
        pipeline: Text,
        partition: Text,
        cursor: Text,
        updated_at: Timestamp,
    }
    key: &["pipeline", "partition"],
    load: LoadRule::Upsert,
    lineage: false,
}

table! {
    pub const SYNC_QUARANTINE: QuarantineRow = "_sync_quarantine" {
        run_id: Text,
        route: Text,
        record: Text,
        error: Text,
        seen_at: Timestamp,
    }
    load: LoadRule::Append,
    lineage: false,
}

table! {
    pub const SYNC_REQUESTS: RequestRow = "_sync_requests" {
        at: Timestamp,
        run_id: Text,
        route: Text,
        status: Int,
        latency_ms: Int,
        rate_remaining: Int,
        quota_remaining: Int,
        retry_after_s: Float,
        error: Text,
    }
    load: LoadRule::Append,
    lineage: false,
    lake_partition: Some(LakePartition::Month("at")),
}

table! {
    /// The quota ledger: what the service last said about each key's windows, so
    /// that a process started by cron knows what today's window already spent.
    /// `key_id` is a one-way fingerprint, never the key.
    pub const SYNC_QUOTA: QuotaRow = "_sync_quota" {
        key_id: Text,
        observed_at: Timestamp,
        quota_window: Text,
        quota_limit: Int,
        quota_remaining: Int,
        quota_reset_at: Timestamp,
        rate_limit: Int,
        rate_remaining: Int,
        billing_source: Text,
        credits_remaining_usd: Float,
    }
    key: &["key_id"],
    load: LoadRule::Upsert,
    lineage: false,
}

table! {
    /// What `fdsync reset` did: the checkpoints it forgot and, with
    /// `--drop-rows`, the rows it deleted from which tables, so the lake's
    /// next publish rebuilds those tables and an auditor sees why rows went.
    pub const SYNC_RESETS: ResetRow = "_sync_resets" {
        reset_at: Timestamp,
        pipeline: Text,
        /// The company key reset alone; NULL for the whole pipeline.
        company_key: Text,
        checkpoints_removed: Int,
        drop_rows: Bool,
        rows_deleted: Int,
        tables: TextList,
    }
    lineage: false,
}

/// fdsync's own tables, after the feeds' in the catalogue
/// ([`crate::feeds::catalogue`]).
pub const BOOKKEEPING: &[&TableDef] = &[
    &SYNC_RUNS,
    &SYNC_CHECKPOINTS,
    &SYNC_QUARANTINE,
    &SYNC_REQUESTS,
    &SYNC_QUOTA,
    &SYNC_RESETS,
];
