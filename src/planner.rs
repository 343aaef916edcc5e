//! What is due: from checkpoints and pipeline settings, the requests a run makes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::config::UniverseConfig;
use crate::pipeline::Pipeline;
use crate::sink::StoredCheckpoint;

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
}

/// How overdue a pipeline is: how long ago its schedule first fired after
/// its last `ok` run started, in periods of its schedule (negative when not
/// yet due); `None` when it never ran `ok`.
pub fn overdue(pipeline: &Pipeline, times: &RunTimes, now: DateTime<Utc>) -> Option<f64> {
    let fired = pipeline.schedule.next_after(&times.ok_started?)?;
    let period = pipeline
        .schedule
        .next_after(&fired)
        .map_or(86_400, |next| (next - fired).num_seconds().max(1));
    Some((now - fired).num_seconds() as f64 / period as f64)
}

/// Why a pipeline runs in `sync --once`, or when it will.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "due", rename_all = "snake_case")]
pub enum Due {
    /// Named with `--pipeline`, or `--all`.
    Forced,
    /// No run of it ever ended `ok`.
    NeverSynced,
    /// Its last run stopped with work left (the quota, a budget or a
    /// signal); the next run goes on.
    Unfinished { status: String },
    /// Its backfill has further to go.
    Backfilling,
    /// `fdsync reset` forgot its checkpoints after its newest run.
    Reset { at: DateTime<Utc> },
    /// Its schedule fired since its last `ok` run started.
    ScheduleFired { at: DateTime<Utc> },
    /// Not due: its schedule fires next then (never again: `None`).
    NotDue { next: Option<DateTime<Utc>> },
}

impl Due {
    pub fn runs(&self) -> bool {
        !matches!(self, Due::NotDue { .. })
    }
}

impl std::fmt::Display for Due {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Due::Forced => f.write_str("forced"),
            Due::NeverSynced => f.write_str("never synced"),
            Due::Unfinished { status } => write!(f, "unfinished ({status})"),
            Due::Backfilling => f.write_str("backfill left"),
            Due::Reset { at } => write!(f, "reset {}", at.format("%m-%d %H:%M")),
            Due::ScheduleFired { at } => write!(f, "schedule fired {}", at.format("%m-%d %H:%M")),
            Due::NotDue { next: Some(next) } => write!(f, "not due until {}", next.format("%Y-%m-%dT%H:%MZ")),
            Due::NotDue { next: None } => f.write_str("schedule never fires again"),
        }
    }
}

/// What decides whether a pipeline is due: when it ran, how its newest run
/// ended, and whether its backfill has further to go.
#[derive(Debug, Default)]
pub struct History {
    pub times: RunTimes,
    /// The newest run's status and error.
    pub last: Option<(String, Option<String>)>,
    pub backfill_left: bool,
}

/// Whether `pipeline` is due now, as `sync --once` decides: never synced,
/// its last run stopped with work left, its backfill has further to go, or
/// its schedule fired since its last `ok` run started.
pub fn due(pipeline: &Pipeline, history: &History, now: DateTime<Utc>) -> Due {
    let Some(ok_started) = history.times.ok_started else {
        return Due::NeverSynced;
    };
    if let Some(at) = history.times.reset {
        return Due::Reset { at };
    }
    if let Some((status, error)) = &history.last
        && left_work(status, error.as_deref())
    {
        return Due::Unfinished { status: status.clone() };
    }
    if history.backfill_left {
        return Due::Backfilling;
    }
    match pipeline.schedule.next_after(&ok_started) {
        Some(at) if at <= now => Due::ScheduleFired { at },
        next => Due::NotDue { next },
    }
}

/// Whether a run that ended so stopped with work left for the next.
fn left_work(status: &str, error: Option<&str>) -> bool {
    match status {
        "quota_exhausted" | "interrupted" => true,
        "partial" => error.is_some_and(|e| e.contains(crate::sync::RESUMES)),
        _ => false,
    }
}

/// The order a run takes when the quota left cannot cover every pipeline:
/// those that never ran `ok` first (the one that ran longest ago, or never,
/// first: a pipeline that got nothing last time goes first this time), then
/// the most overdue against its schedule; ties keep the given order.
pub fn fair_order<'a>(
    pipelines: &'a [Pipeline],
    times: &HashMap<String, RunTimes>,
    now: DateTime<Utc>,
) -> Vec<&'a Pipeline> {
    let mut ordered: Vec<&Pipeline> = pipelines.iter().collect();
    let none = RunTimes::default();
    let key = |p: &Pipeline| {
        let t = times.get(&p.name).unwrap_or(&none);
        match overdue(p, t, now) {
            None => (0, t.started.map_or(i64::MIN, |s| s.timestamp_millis()), 0.0),
            Some(late) => (1, 0, -late),
        }
    };
    ordered.sort_by(|a, b| {
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.cmp(&kb.1)).then(ka.2.total_cmp(&kb.2))
    });
    ordered
}

/// Members ordered so that those never synced come first, then the least
/// recently synced: when a budget runs out mid-pipeline, the next run starts
/// where this one could not reach. Ties keep the configured order.
pub fn stalest_first<M>(mut members: Vec<M>, synced_at: impl Fn(&M) -> Option<DateTime<Utc>>) -> Vec<M> {
    members.sort_by_key(|m| synced_at(m));
    members
}

/// Requests a run of `pipelines` needs at least: one per single-route pipeline,
/// one per company for each fan-out (the universe's refresh included), and
/// one per identifier not yet resolved.
/// Companies are counted as configured (aliases of one company count twice
/// here, so this errs on the side of warning).
/// `resolved` holds the universe pipeline's checkpoints: identifier -> company key.
pub fn requests_due(
    pipelines: &[Pipeline],
    universe: &UniverseConfig,
    resolved: &HashMap<String, StoredCheckpoint>,
) -> u64 {
    let companies = &universe.companies;
    let unresolved = companies.iter().filter(|c| !resolved.contains_key(c.trim())).count() as u64;
    let distinct = {
        let mut keys: Vec<&str> = companies
            .iter()
            .map(|c| resolved.get(c.trim()).map_or(c.trim(), |r| r.cursor.as_str()))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.len() as u64
    };
    // The universe's own pipeline asks every company (counted by its
    // engine); any other fan-out asks only those not yet resolved.
    let fans_out = pipelines.iter().any(Pipeline::per_company);
    let refreshes = pipelines.iter().any(Pipeline::resolves_universe);
    let mut due = if fans_out && !refreshes { unresolved } else { 0 };
    for p in pipelines {
        due += p.feed.fetch.least_requests(distinct, universe.countries.len() as u64);
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_synced_then_stalest_first() {
        let t =
            |h: u32| Some("2026-11-25T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::Duration::hours(h.into()));
        let members = vec![("a", t(5)), ("b", None), ("c", t(1)), ("d", None)];
        let ordered: Vec<&str> = stalest_first(members, |m| m.1).iter().map(|m| m.0).collect();
        assert_eq!(ordered, ["b", "d", "c", "a"]);
    }
}
