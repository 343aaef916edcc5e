//! The run log's vocabulary: when a pipeline ran, and what a run that
//! stopped with work left says.

use chrono::{DateTime, Utc};

/// What a run that stopped with work left says: its next run goes on.
pub const RESUMES: &str = "the next run resumes from the checkpoints";

/// When a pipeline last ran, from the run log.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunTimes {
    /// Its newest run's start.
    pub started: Option<DateTime<Utc>>,
    /// The start of its newest run that ended `ok`.
    pub ok_started: Option<DateTime<Utc>>,
    /// When `fdsync reset` forgot its checkpoints, if that came after its
    /// newest run (in commit order: a frozen clock gives both one instant).
    pub reset: Option<DateTime<Utc>>,
    /// Runs started after its newest `ok` one: how many times in a row it
    /// did not end `ok`.
    pub since_ok: u32,
}
