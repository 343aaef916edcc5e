//! What is due: from checkpoints and pipeline settings, the requests a run
//! makes. Below the engine: a run asks it what to fetch, and the report
//! commands print what it decided.
//! - [`standing`]: where each pipeline stands (last run, backfill, due).
//! - [`cost`]: what the schedules spend a day against the quota; `auto` schedules.

pub mod cost;
pub mod standing;

use std::collections::HashMap;

use chrono::{DateTime, Utc};

pub use crate::bookkeeping::RunTimes;
use crate::config::Config;
use crate::feeds::Reach;
use crate::pipeline::Pipeline;
use crate::sink::StoredCheckpoint;

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
    /// Its last runs did not end `ok` (`failed`, or `partial` without work
    /// left to resume): it is tried again on its schedule, each time a
    /// little later, not at every firing of a timer.
    Retry { at: DateTime<Utc>, failures: u32 },
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
            Due::Retry { at, failures } => write!(
                f,
                "retry after {failures} run(s) not ok, due {}",
                at.format("%m-%d %H:%M")
            ),
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
    /// The newest run's status, and whether it left work for the next run.
    pub last: Option<(String, bool)>,
    pub backfill_left: bool,
}

/// Whether `pipeline` is due now, as `sync --once` decides: never synced,
/// its last run stopped with work left, its backfill has further to go, or
/// its schedule fired since its last `ok` run started.
pub fn due(pipeline: &Pipeline, history: &History, now: DateTime<Utc>) -> Due {
    let Some(ok_started) = history.times.ok_started else {
        // Ran and never ended `ok` (nothing left to resume): tried again
        // with backoff, like any failing pipeline, not at every firing.
        return match (history.times.started, &history.last) {
            (Some(started), Some((_, resumes)))
                if history.times.reset.is_none() && !resumes && history.times.since_ok > 0 =>
            {
                match retry_at(&pipeline.schedule, started, history.times.since_ok) {
                    Some(at) if at <= now => Due::Retry {
                        at,
                        failures: history.times.since_ok,
                    },
                    next => Due::NotDue { next },
                }
            }
            _ => Due::NeverSynced,
        };
    };
    if let Some(at) = history.times.reset {
        return Due::Reset { at };
    }
    if let Some((status, true)) = &history.last {
        return Due::Unfinished { status: status.clone() };
    }
    if history.backfill_left {
        return Due::Backfilling;
    }
    let failures = history.times.since_ok;
    if failures > 0
        && let Some(started) = history.times.started
    {
        return match retry_at(&pipeline.schedule, started, failures) {
            Some(at) if at <= now => Due::Retry { at, failures },
            next => Due::NotDue { next },
        };
    }
    match pipeline.schedule.next_after(&ok_started) {
        Some(at) if at <= now => Due::ScheduleFired { at },
        next => Due::NotDue { next },
    }
}

/// The longest a pipeline that keeps failing waits beyond its schedule.
const MOST_RETRY_WAIT_HOURS: i64 = 24;

/// When a pipeline whose last `failures` runs did not end `ok`, the newest
/// started at `started`, is tried again: its schedule's next firing after a
/// wait that doubles with each failure after the first, from one period of
/// the schedule to a day at most (never less than the next firing).
pub fn retry_at(schedule: &crate::pipeline::Schedule, started: DateTime<Utc>, failures: u32) -> Option<DateTime<Utc>> {
    let next = schedule.next_after(&started)?;
    let period = schedule
        .next_after(&next)
        .map_or(chrono::Duration::hours(MOST_RETRY_WAIT_HOURS), |after| after - next);
    let doublings = failures.saturating_sub(1).min(16);
    let wait = (period * (1i32 << doublings) - period).min(chrono::Duration::hours(MOST_RETRY_WAIT_HOURS));
    schedule.next_after(&(started + wait)).or(Some(next))
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
pub fn requests_due(pipelines: &[Pipeline], config: &Config, resolved: &HashMap<String, StoredCheckpoint>) -> u64 {
    let companies = &config.universe.companies;
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
        due += p.feed.fetch.least_requests(Reach {
            companies: distinct,
            ..Reach::of(config)
        });
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

    #[test]
    fn a_failing_pipeline_waits_longer_each_time_up_to_a_day() {
        let hourly = crate::pipeline::parse_schedule("0 * * * *").unwrap();
        let started: DateTime<Utc> = "2026-11-25T10:05:00Z".parse().unwrap();
        let at = |failures| {
            retry_at(&hourly, started, failures)
                .unwrap()
                .format("%d %H:%M")
                .to_string()
        };
        assert_eq!(at(1), "25 11:00", "the next firing");
        assert_eq!(at(2), "25 12:00", "one period later");
        assert_eq!(at(3), "25 14:00", "three periods later");
        assert_eq!(at(30), "26 11:00", "a day at most");
    }
}
