//! fdsync's own tables: its record of runs, checkpoints, requests, quota
//! and quarantine, not data from the service; and their vocabulary, which
//! the engines write and the planner, status and the sink's readers read.

mod checkpoints;
mod runs;

pub use checkpoints::{
    BACKFILL_COMPLETE, BACKFILL_PARTITION, Backfill, DATES_PARTITION, NO_MANDATE, NOT_SERVED, NOT_SERVED_404,
    NotServedCursor, PENDING_PARTITION, STREAM_PARTITION, TALLY_PARTITION, TALLY_UNSERVED, TapeBackfill, TapeCursor,
};
pub use runs::{RESUMES, RunTimes};

use crate::batch::table;
use crate::tables::{LakePartition, LoadRule, TableDef};

table! {
    /// fdsync's run log: one row per pipeline run.
    pub const SYNC_RUNS: SyncRunRow = "_sync_runs" {
        /// The run (`_sync_runs.run_id`).
        run_id: Text,
        /// The pipeline (a file under pipelines/).
        pipeline: Text,
        /// When the run started (UTC).
        started_at: Timestamp,
        /// When the run ended (UTC).
        finished_at: Timestamp,
        /// Outcome: ok, partial, failed, quota_exhausted or interrupted.
        status: Text,
        /// Upstream requests the run sent, retries included.
        requests: Int,
        /// Rows inserted or changed by the run.
        rows_written: Int,
        /// What went wrong, in words; NULL when nothing did.
        error: Text,
        /// Records the service counted (a wire total, listed sections, item codes) that the run did
        /// not store; 0 when it proved itself complete.
        shortfall: Int,
        /// Whether the run stopped with work its pipeline's next run picks up at once (a quota
        /// wall, a budget, a stop, a credential to replace), not after its schedule or a backoff.
        resumes: Bool,
    }
    key: &["run_id", "pipeline"],
    load: LoadRule::Upsert,
    lineage: false,
}

table! {
    /// Where each pipeline (and partition) resumes; committed with the rows it covers.
    pub const SYNC_CHECKPOINTS: CheckpointRow = "_sync_checkpoints" {
        /// The pipeline (a file under pipelines/).
        pipeline: Text,
        /// The part of the pipeline the checkpoint covers: a company key, a country, a series, or
        /// '' for the whole pipeline.
        partition: Text,
        /// Where the partition's next run resumes: a date, an id or a JSON cursor, as the
        /// pipeline's engine writes it.
        cursor: Text,
        /// When the checkpoint last moved (UTC).
        updated_at: Timestamp,
    }
    key: &["pipeline", "partition"],
    load: LoadRule::Upsert,
    lineage: false,
}

table! {
    /// Records that could not be loaded, so nothing is dropped silently.
    pub const SYNC_QUARANTINE: QuarantineRow = "_sync_quarantine" {
        /// The run (`_sync_runs.run_id`).
        run_id: Text,
        /// The request path the record came from, without the key.
        route: Text,
        /// The record exactly as served (JSON text).
        record: Text,
        /// Why it could not be loaded: the field, its value and what was expected.
        error: Text,
        /// When the record was quarantined (UTC).
        seen_at: Timestamp,
    }
    load: LoadRule::Append,
    lineage: false,
}

table! {
    /// One row per upstream request, with the limits its answer reported.
    pub const SYNC_REQUESTS: RequestRow = "_sync_requests" {
        /// When the request was sent (UTC).
        at: Timestamp,
        /// The run (`_sync_runs.run_id`).
        run_id: Text,
        /// The request path, without the key.
        route: Text,
        /// The HTTP status of the answer; 0 when no answer came.
        status: Int,
        /// Milliseconds from sending the request to its answer.
        latency_ms: Int,
        /// Requests left this minute (RateLimit-Remaining).
        rate_remaining: Int,
        /// Requests left in the quota window after the request (X-Quota-Remaining).
        quota_remaining: Int,
        /// Seconds the service asked to wait (Retry-After), if it did.
        retry_after_s: Float,
        /// What went wrong, in words; NULL when nothing did.
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
        /// One-way fingerprint of the API key (never the key).
        key_id: Text,
        /// When fdsync observed the value (UTC).
        observed_at: Timestamp,
        /// The quota window: day or month.
        quota_window: Text,
        /// Requests allowed in the quota window (X-Quota-Limit).
        quota_limit: Int,
        /// Requests left in the quota window after the request (X-Quota-Remaining).
        quota_remaining: Int,
        /// When the quota window resets (UTC).
        quota_reset_at: Timestamp,
        /// Requests allowed per minute (RateLimit-Limit).
        rate_limit: Int,
        /// Requests left this minute (RateLimit-Remaining).
        rate_remaining: Int,
        /// `credits` when prepaid credits paid for the request (X-Billing-Source).
        billing_source: Text,
        /// Prepaid credits left, in USD (X-Credits-Remaining-USD).
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
        /// When the reset ran (UTC).
        reset_at: Timestamp,
        /// The pipeline (a file under pipelines/).
        pipeline: Text,
        /// The company key reset alone; NULL for the whole pipeline.
        company_key: Text,
        /// Checkpoints the reset forgot.
        checkpoints_removed: Int,
        /// Whether the reset deleted the pipeline's rows too (--drop-rows).
        drop_rows: Bool,
        /// Rows the reset deleted.
        rows_deleted: Int,
        /// The tables whose rows the reset deleted.
        tables: TextList,
    }
    lineage: false,
}

table! {
    /// Fields the service sent that no column holds (drift): one row per route
    /// and field, from the first record of each kind in a response. The values
    /// stay in each row's `raw`; `fdsync status` and `check` name new ones.
    pub const SYNC_UNKNOWN_FIELDS: UnknownFieldRow = "_sync_unknown_fields" {
        /// The route, with identifiers as placeholders (`/api/v1/companies/{id}/prices`).
        route: Text,
        /// The field's path in the record (`a.b` inside an object); from the
        /// body's root (`$.a`) for one of the envelope around the records.
        field: Text,
        /// A value as served (JSON text, at most 200 characters), from the first sighting.
        example: Text,
        /// The run that first saw it (`_sync_runs.run_id`).
        run_id: Text,
        /// When a response first carried it (UTC).
        first_seen_at: Timestamp,
        /// When a response last carried it (UTC).
        last_seen_at: Timestamp,
    }
    key: &["route", "field"],
    load: LoadRule::History,
    lineage: false,
}

table! {
    /// Envelope fields (a body's own, beside its record lists) that no reader
    /// reads, kept as served, one row per response and field; each is also
    /// named in `_sync_unknown_fields` as `$.<field>`.
    pub const SYNC_ENVELOPE_FIELDS: EnvelopeFieldRow = "_sync_envelope_fields" {
        /// The request's path and query, as sent.
        route: Text,
        /// The field's path from the body's root (`$.a.b`).
        field: Text,
        /// When the response was fetched (UTC).
        fetched_at: Timestamp,
        /// The value as served (JSON text).
        value: Text,
        /// The run that fetched it (`_sync_runs.run_id`).
        run_id: Text,
    }
    key: &["route", "fetched_at", "field"],
    load: LoadRule::Append,
    lineage: false,
}

table! {
    /// What `fdsync verify` (and the daemon's daily share of it) found: one
    /// row per company and table it read again whole, beside what was stored.
    pub const SYNC_VERIFY: VerifyRow = "_sync_verify" {
        /// The verify run (`_sync_requests.run_id` of its requests).
        run_id: Text,
        /// When the company's answer was compared (UTC).
        verified_at: Timestamp,
        /// The pipeline (a file under pipelines/).
        pipeline: Text,
        /// The company key.
        company_key: Text,
        /// The table compared.
        table_name: Text,
        /// Rows stored for the company before the comparison.
        stored: Int,
        /// Stored rows the service serves as they are.
        equal: Int,
        /// Stored rows it serves with other values: replaced, the old kept in the versions table.
        changed: Int,
        /// Stored rows it no longer serves: withdrawn, kept in the versions table.
        withdrawn: Int,
        /// Rows it serves that were not stored: added.
        missing: Int,
    }
    lineage: false,
}

table! {
    /// The warehouse's layout, one row per change applied to it, in order
    /// (CHANGELOG.md names each): the newest `version` is the layout it holds.
    pub const SYNC_MIGRATIONS: MigrationRow = "_sync_migrations" {
        /// The layout version the change brought the warehouse to.
        version: Int,
        /// What changed.
        change: Text,
        /// When this warehouse was brought to it (UTC).
        applied_at: Timestamp,
    }
    key: &["version"],
    load: LoadRule::InsertOnce,
    lineage: false,
}

table! {
    /// Alerts the webhook took (`[alerts] webhook`): one per UTC day,
    /// pipeline and cause, so the same failure alerts once a day.
    pub const SYNC_ALERTS: AlertRow = "_sync_alerts" {
        /// The UTC day the alert is for.
        day: Date,
        /// The pipeline, or `*` for drift.
        pipeline: Text,
        /// failed, shortfall, quota_wall or drift.
        cause: Text,
        /// The run that raised it (`_sync_runs.run_id`).
        run_id: Text,
        /// When it was sent (UTC).
        sent_at: Timestamp,
        /// The receiver's HTTP status.
        http_status: Int,
    }
    key: &["day", "pipeline", "cause"],
    load: LoadRule::InsertOnce,
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
    &SYNC_UNKNOWN_FIELDS,
    &SYNC_ENVELOPE_FIELDS,
    &SYNC_VERIFY,
    &SYNC_MIGRATIONS,
    &SYNC_ALERTS,
];
