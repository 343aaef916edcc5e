//! What a run reports: each pipeline's outcome, and the table `sync --once`
//! and the demo print.

use std::fmt;
use std::io::Write;

use super::SyncError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Ok,
    Partial,
    Failed,
    QuotaExhausted,
    /// Stopped by a signal; what was received is committed.
    Interrupted,
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RunStatus::Ok => "ok",
            RunStatus::Partial => "partial",
            RunStatus::Failed => "failed",
            RunStatus::QuotaExhausted => "quota_exhausted",
            RunStatus::Interrupted => "interrupted",
        })
    }
}

/// How one pipeline's part of a run ended.
#[derive(Debug, Clone)]
pub struct PipelineOutcome {
    pub pipeline: String,
    pub status: RunStatus,
    pub requests: u64,
    pub rows_written: u64,
    pub quarantined: u64,
    pub error: Option<String>,
}

#[derive(Debug)]
pub struct SyncReport {
    pub run_id: String,
    pub outcomes: Vec<PipelineOutcome>,
    /// Pipelines not started because the run's request budget was spent.
    pub deferred: Vec<String>,
}

impl SyncReport {
    /// The report as a table, one line per pipeline, deferred ones last.
    ///
    /// # Errors
    /// When `out` cannot be written.
    pub fn write_text(&self, out: &mut dyn Write) -> Result<(), SyncError> {
        writeln!(
            out,
            "  {:<14} {:<16} {:>8} {:>12}  note",
            "pipeline", "status", "requests", "rows written"
        )?;
        for o in &self.outcomes {
            writeln!(
                out,
                "  {:<14} {:<16} {:>8} {:>12}  {}",
                o.pipeline,
                o.status.to_string(),
                o.requests,
                o.rows_written,
                o.error.as_deref().unwrap_or("")
            )?;
        }
        for name in &self.deferred {
            writeln!(
                out,
                "  {name:<14} {:<16} {:>8} {:>12}  request budget spent",
                "deferred", 0, 0
            )?;
        }
        Ok(())
    }
}
