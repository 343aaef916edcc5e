//! `fdsync verify` (and the daemon's daily share of it): stored companies read
//! again whole, oldest verified first, within a request budget, and compared
//! with what was stored. Rows the service serves with other values are
//! replaced and rows it no longer serves withdrawn, as any run would, their
//! old versions kept; each comparison is recorded in `_sync_verify`.

use std::collections::HashMap;
use std::io::Write;

use chrono::{DateTime, NaiveDate, Utc};
use serde::Serialize;

use super::per_company::Ask;
use super::{NO_MANDATE, Progress, Syncer, Turn};
use crate::batch::BatchBuilder;
use crate::bookkeeping::{SYNC_VERIFY, VerifyRow};
use crate::error::SyncError;
use crate::feeds::Fetch;
use crate::pipeline::Pipeline;
use crate::sink::TableBatch;
use crate::sink::duckdb::{Changes, Holding};
use crate::upstream::encode;

/// One company's table, compared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    pub pipeline: String,
    pub company: String,
    pub table: &'static str,
    /// Rows stored before the comparison.
    pub stored: u64,
    /// Stored rows served as they are.
    pub equal: u64,
    /// Stored rows served with other values: replaced, the old kept as versions.
    pub changed: u64,
    /// Stored rows no longer served: withdrawn, kept as versions.
    pub withdrawn: u64,
    /// Served rows that were not stored: added.
    pub missing: u64,
}

/// A table's comparisons added up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct TableTotals {
    pub table: &'static str,
    pub companies: u64,
    pub stored: u64,
    pub equal: u64,
    pub changed: u64,
    pub withdrawn: u64,
    pub missing: u64,
}

/// What one verification did.
#[derive(Debug, Default, Serialize)]
pub struct VerifyReport {
    pub run_id: String,
    /// Requests it could spend, and spent (retries included).
    pub budget: u64,
    pub requests: u64,
    /// Stored companies it could verify, over every pipeline it covers.
    pub candidates: u64,
    pub verified: Vec<Verified>,
    /// Companies not compared, or compared in part: refused, unreadable,
    /// not read whole.
    pub problems: Vec<String>,
}

impl VerifyReport {
    /// The comparisons by table, in the order they were made.
    pub fn totals(&self) -> Vec<TableTotals> {
        let mut by: Vec<TableTotals> = Vec::new();
        for v in &self.verified {
            let i = match by.iter().position(|t| t.table == v.table) {
                Some(i) => i,
                None => {
                    by.push(TableTotals {
                        table: v.table,
                        ..TableTotals::default()
                    });
                    by.len() - 1
                }
            };
            let t = &mut by[i];
            t.companies += 1;
            t.stored += v.stored;
            t.equal += v.equal;
            t.changed += v.changed;
            t.withdrawn += v.withdrawn;
            t.missing += v.missing;
        }
        by
    }

    /// Whether anything differed from what the service serves.
    pub fn repaired(&self) -> bool {
        self.verified.iter().any(|v| v.changed + v.withdrawn + v.missing > 0)
    }

    /// The report for people: one line per table, then what differed.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn write_text(&self, out: &mut impl Write) -> std::io::Result<()> {
        let companies: std::collections::BTreeSet<(&str, &str)> = self
            .verified
            .iter()
            .map(|v| (v.pipeline.as_str(), v.company.as_str()))
            .collect();
        writeln!(
            out,
            "verify {}: {} of {} stored companies read again, {} of {} requests (oldest verified first)",
            self.run_id,
            companies.len(),
            self.candidates,
            self.requests,
            self.budget
        )?;
        writeln!(
            out,
            "\n{:<20} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8}",
            "table", "companies", "stored", "equal", "changed", "withdrawn", "missing"
        )?;
        for t in self.totals() {
            writeln!(
                out,
                "{:<20} {:>9} {:>8} {:>8} {:>8} {:>9} {:>8}",
                t.table, t.companies, t.stored, t.equal, t.changed, t.withdrawn, t.missing
            )?;
        }
        for v in self.verified.iter().filter(|v| v.changed + v.withdrawn + v.missing > 0) {
            writeln!(
                out,
                "repaired {} {}: {} changed, {} withdrawn (old values in {}_versions), {} missing added",
                v.table, v.company, v.changed, v.withdrawn, v.table, v.missing
            )?;
        }
        if !self.repaired() && !self.verified.is_empty() {
            writeln!(out, "every row compared equals what the service serves")?;
        }
        for p in &self.problems {
            writeln!(out, "not verified: {p}")?;
        }
        Ok(())
    }
}

/// A company that can be verified: when it last was, its pipeline (by
/// position), its key, and its checkpoint's day.
type Candidate = (Option<DateTime<Utc>>, usize, String, Option<NaiveDate>);

impl Syncer {
    /// Reads up to `budget` stored companies of `pipelines` again whole,
    /// oldest verified first, and compares them with what was stored.
    pub async fn verify(&self, pipelines: &[Pipeline], budget: u64) -> (VerifyReport, Result<(), SyncError>) {
        let mut report = VerifyReport {
            run_id: self.new_run_id(),
            budget,
            ..VerifyReport::default()
        };
        let sent = self.client.requests_sent();
        let result = self.verify_within(pipelines, budget, &mut report).await;
        report.requests = self.client.requests_sent() - sent;
        for t in report.totals() {
            crate::metrics::verified(
                t.table,
                &[
                    ("equal", t.equal),
                    ("changed", t.changed),
                    ("withdrawn", t.withdrawn),
                    ("missing", t.missing),
                ],
            );
        }
        (report, result)
    }

    async fn verify_within(
        &self,
        pipelines: &[Pipeline],
        budget: u64,
        report: &mut VerifyReport,
    ) -> Result<(), SyncError> {
        self.load_quota_ledger().await?;
        let mut candidates: Vec<Candidate> = Vec::new();
        for (i, pipeline) in pipelines.iter().enumerate() {
            if pipeline.feed.whole_tables().is_none() {
                continue;
            }
            let checkpoints = self.checkpoints_of(pipeline).await?;
            let name = pipeline.name.clone();
            let last = self.sink.call(move |s| s.last_verified(&name)).await??;
            for (company, checkpoint) in checkpoints {
                if checkpoint.cursor.starts_with(NO_MANDATE) {
                    continue;
                }
                let day = checkpoint.cursor.parse().ok();
                candidates.push((last.get(&company).copied(), i, company, day));
            }
        }
        report.candidates = candidates.len() as u64;
        // Never verified first, then the longest ago.
        candidates.sort();
        candidates.truncate(usize::try_from(budget).unwrap_or(usize::MAX));
        for (i, pipeline) in pipelines.iter().enumerate() {
            let chosen: Vec<&Candidate> = candidates.iter().filter(|c| c.1 == i).collect();
            if !chosen.is_empty() {
                self.verify_pipeline(pipeline, &chosen, report).await?;
            }
        }
        Ok(())
    }

    /// Reads `chosen` companies of `pipeline` again whole and records what differed.
    async fn verify_pipeline(
        &self,
        pipeline: &Pipeline,
        chosen: &[&Candidate],
        report: &mut VerifyReport,
    ) -> Result<(), SyncError> {
        let Fetch::PerCompany(per_company) = &pipeline.feed.fetch else {
            return Ok(());
        };
        let tables = pipeline.feed.whole_tables().unwrap_or_default();
        let companies: Vec<String> = chosen.iter().map(|c| c.2.clone()).collect();
        let mut before: HashMap<&'static str, HashMap<String, Holding>> = HashMap::new();
        for &table in &tables {
            let date = per_company
                .restates
                .as_ref()
                .filter(|r| r.table.name == table.name)
                .map(|r| r.date);
            let asked = companies.clone();
            let held = self
                .sink
                .call(move |s| s.partition_holdings(table, date, &asked))
                .await??;
            before.insert(table.name, held);
        }
        let whole = per_company.restates.as_ref().map(|r| r.table);
        let asks: Vec<Ask> = chosen
            .iter()
            .map(|(_, _, company, day)| {
                let path = pipeline.route.replace("{company}", &encode(company));
                let route = match &per_company.restates {
                    Some(r) => format!("{path}?{}", r.whole),
                    None => path,
                };
                let stored_from = whole
                    .and_then(|t| before.get(t.name))
                    .and_then(|held| held.get(company))
                    .and_then(|h| h.earliest);
                Ask {
                    key: company.clone(),
                    route,
                    partial: *day,
                    stored_from,
                }
            })
            .collect();
        let run_id = report.run_id.clone();
        let mut progress = Progress::default();
        let turn = Turn {
            pipeline,
            run_id: &run_id,
        };
        // Only a pass that ended well says which companies committed.
        self.fetch_companies(turn, per_company, asks, whole, &mut progress)
            .await?;
        report.problems.extend(progress.problems());
        report.problems.extend(
            progress
                .not_served
                .iter()
                .map(|n| format!("{} {}: {}", pipeline.name, n.company, n.refusal)),
        );
        report
            .problems
            .extend(progress.unreadable.iter().map(|q| format!("{}: {}", q.route, q.error)));
        let answered: Vec<String> = progress.answered;
        let now = self.clock.now();
        let mut rows = BatchBuilder::new(&SYNC_VERIFY, &run_id, now);
        for &table in &tables {
            let asked = answered.clone();
            let run = run_id.clone();
            let changes: HashMap<String, Changes> =
                self.sink.call(move |s| s.verify_changes(table, &run, &asked)).await??;
            for company in &answered {
                let held = before
                    .get(table.name)
                    .and_then(|h| h.get(company))
                    .copied()
                    .unwrap_or_default();
                let c = changes.get(company).copied().unwrap_or_default();
                let v = Verified {
                    pipeline: pipeline.name.clone(),
                    company: company.clone(),
                    table: table.name,
                    stored: held.rows,
                    equal: held.rows.saturating_sub(c.changed + c.withdrawn),
                    changed: c.changed,
                    withdrawn: c.withdrawn,
                    missing: c.written.saturating_sub(c.changed),
                };
                let as_int = |n: u64| Some(i64::try_from(n).unwrap_or(i64::MAX));
                rows.push_bare(VerifyRow {
                    run_id: Some(&run_id),
                    verified_at: Some(now),
                    pipeline: Some(&pipeline.name),
                    company_key: Some(company),
                    table_name: Some(table.name),
                    stored: as_int(v.stored),
                    equal: as_int(v.equal),
                    changed: as_int(v.changed),
                    withdrawn: as_int(v.withdrawn),
                    missing: as_int(v.missing),
                });
                report.verified.push(v);
            }
        }
        let batch = TableBatch::build(rows).map_err(crate::sink::SinkError::from)?;
        Ok(self.commit_with_log(&run_id, batch).await?)
    }
}
