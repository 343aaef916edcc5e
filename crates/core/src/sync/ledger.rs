//! A run's own records: its `_sync_runs` rows, the request log, and the
//! quota ledger that lets a process started by cron resume today's window.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{PipelineOutcome, Syncer, UNIVERSE_PIPELINE};
use crate::batch::BatchBuilder;
use crate::bookkeeping::RunTimes;
use crate::bookkeeping::{QuotaRow, RequestRow, SYNC_QUOTA, SYNC_REQUESTS, SYNC_RUNS, SyncRunRow};
use crate::pipeline::Pipeline;
use crate::planner;
use crate::sink::{Commit, SinkError, TableBatch};
use crate::upstream::RequestRecord;

impl Syncer {
    /// Writes the pipeline's `_sync_runs` row and the request log not yet committed.
    pub(super) async fn record_run(
        &self,
        run_id: &str,
        o: &PipelineOutcome,
        started_at: DateTime<Utc>,
    ) -> Result<(), SinkError> {
        let mut b = BatchBuilder::new(&SYNC_RUNS, run_id, self.clock.now());
        b.push_bare(SyncRunRow {
            run_id: Some(run_id),
            pipeline: Some(&o.pipeline),
            started_at: Some(started_at),
            finished_at: Some(self.clock.now()),
            status: Some(&o.status.to_string()),
            requests: Some(o.requests as i64),
            rows_written: Some(o.rows_written as i64),
            error: o.error.as_deref(),
            shortfall: Some(o.shortfall as i64),
            resumes: Some(o.resumes),
        });
        self.commit_with_log(run_id, TableBatch::build(b)?).await
    }

    /// Commits `batch` with the request log and quota ledger not yet committed.
    pub(super) async fn commit_with_log(&self, run_id: &str, batch: TableBatch) -> Result<(), SinkError> {
        let mut batches = vec![batch];
        batches.extend(self.bookkeeping(run_id)?);
        self.sink
            .commit(Commit {
                batches,
                checkpoints: Vec::new(),
            })
            .await?;
        Ok(())
    }

    /// The request log since the last commit and the quota ledger, committed
    /// with whatever rows and checkpoint go with them.
    pub(super) fn bookkeeping(&self, run_id: &str) -> Result<Vec<TableBatch>, SinkError> {
        let mut batches: Vec<TableBatch> = self.request_log(run_id)?.into_iter().collect();
        batches.extend(self.quota_ledger(run_id)?);
        Ok(batches)
    }

    pub(super) fn quota_ledger(&self, run_id: &str) -> Result<Option<TableBatch>, SinkError> {
        let Some(key_id) = self.client.key_id() else {
            return Ok(None);
        };
        let Some(seen) = self.client.quota_for_ledger() else {
            return Ok(None);
        };
        if seen.quota.remaining.is_none() && seen.rate.remaining.is_none() {
            return Ok(None);
        }
        let mut b = BatchBuilder::new(&SYNC_QUOTA, run_id, self.clock.now());
        b.push_bare(QuotaRow {
            key_id: Some(&key_id),
            observed_at: Some(self.clock.now()),
            quota_window: seen.quota.window.as_deref(),
            quota_limit: seen.quota.limit.map(saturating_i64),
            quota_remaining: seen.quota.remaining.map(saturating_i64),
            quota_reset_at: seen.quota.reset_at,
            rate_limit: seen.rate.limit.map(i64::from),
            rate_remaining: seen.rate.remaining.map(i64::from),
            billing_source: seen.quota.billing_source.as_deref(),
            credits_remaining_usd: seen.quota.credits_remaining_usd,
        });
        Ok(Some(TableBatch::build(b)?))
    }

    /// Seeds the client with the quota window an earlier process saw, if that
    /// window has not reset since: a cron run that starts fresh must not spend
    /// what the morning's runs already spent as if it were new.
    pub(super) async fn load_quota_ledger(&self) -> Result<(), SinkError> {
        let Some(key_id) = self.client.key_id() else {
            return Ok(());
        };
        let row = self.sink.call(move |s| s.quota_window(&key_id)).await??;
        if let Some(window) = row
            && window.reset_at.is_some_and(|reset| reset > self.clock.now())
        {
            tracing::info!(
                message = "Quota ledger: resuming the current window.",
                remaining = window.remaining,
                resets_at = ?window.reset_at
            );
            self.client.seed_quota(window);
        }
        Ok(())
    }

    /// When the quota known to be left (what the service said last, or the
    /// plan's whole window once it has reset) cannot cover the least that
    /// `pipelines` need: the order that shares it ([`planner::fair_order`]).
    pub(super) async fn short_of_quota<'a>(&self, pipelines: &'a [Pipeline]) -> Option<Vec<&'a Pipeline>> {
        let quota = self.client.quota_seen().quota;
        let left = match (quota.remaining, quota.reset_at) {
            (Some(left), Some(reset)) if self.clock.now() < reset => left,
            (Some(left), None) => left,
            _ => quota.limit?,
        };
        let known = self
            .sink
            .call(|s| s.checkpoints(UNIVERSE_PIPELINE))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        let due = planner::requests_due(pipelines, &self.config, &known);
        if due <= left || pipelines.len() < 2 {
            return None;
        }
        let times: HashMap<String, RunTimes> = match self.sink.call(|s| s.bookkeeping()?.run_times()).await {
            Ok(Ok(times)) => times,
            _ => HashMap::new(),
        };
        let fair = planner::fair_order(pipelines, &times, self.clock.now());
        tracing::warn!(
            message = "The quota left cannot cover every request due; the pipelines share it, the least recently served first.",
            quota_left = left,
            requests_due = due,
            order = ?fair.iter().map(|p| p.name.as_str()).collect::<Vec<_>>()
        );
        Some(fair)
    }

    pub(super) fn request_log(&self, run_id: &str) -> Result<Option<TableBatch>, SinkError> {
        let log: Vec<RequestRecord> = self.client.drain_log();
        if log.is_empty() {
            return Ok(None);
        }
        let mut b = BatchBuilder::new(&SYNC_REQUESTS, run_id, self.clock.now());
        for r in &log {
            b.push_bare(RequestRow {
                at: Some(r.at),
                run_id: Some(run_id),
                route: Some(&r.route),
                status: Some(i64::from(r.status)),
                latency_ms: Some(r.latency_ms),
                rate_remaining: r.rate_remaining.map(i64::from),
                quota_remaining: r.quota_remaining.map(saturating_i64),
                retry_after_s: r.retry_after_s,
                error: r.error.as_deref(),
            });
        }
        Ok(Some(TableBatch::build(b)?))
    }
}

/// A count the service reported, as the ledger's BIGINT holds it: a value
/// past `i64::MAX` (a broken header) is stored as `i64::MAX`, never negative.
fn saturating_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}
