//! What is due: from checkpoints and pipeline settings, the requests a run makes.

use std::collections::HashMap;

use chrono::{DateTime, NaiveDate, Utc};

use crate::config::UniverseConfig;
use crate::pipeline::{FanOut, Params, Pipeline, Records};
use crate::sink::StoredCheckpoint;

/// Days each lookback range surely covers, whatever calendar arithmetic the
/// service uses (a month is counted as 28 days, a year as 364).
const RANGE_SPANS: &[(&str, i64)] = &[
    ("1M", 28),
    ("3M", 89),
    ("6M", 180),
    ("1Y", 364),
    ("2Y", 729),
    ("5Y", 1820),
];

/// The smallest price lookback that still covers every bar after `last_bar`,
/// plus the trailing `restate_days` the service may have corrected. With no
/// checkpoint, the pipeline's first range (default the whole history).
pub fn price_range(last_bar: Option<NaiveDate>, today: NaiveDate, params: &Params) -> String {
    let first = params.first_range.clone().unwrap_or_else(|| "ALL".into());
    let Some(last) = last_bar else { return first };
    let restate = i64::from(params.restate_days.unwrap_or(7));
    let needed = (today - last).num_days().max(0) + restate;
    RANGE_SPANS
        .iter()
        .find(|(_, span)| *span >= needed)
        .map(|(range, _)| (*range).to_owned())
        .unwrap_or_else(|| "ALL".into())
}

/// Members ordered so that those never synced come first, then the least
/// recently synced: when a budget runs out mid-pipeline, the next run starts
/// where this one could not reach. Ties keep the configured order.
pub fn stalest_first<M>(mut members: Vec<M>, synced_at: impl Fn(&M) -> Option<DateTime<Utc>>) -> Vec<M> {
    members.sort_by_key(|m| synced_at(m));
    members
}

/// Requests a run of `pipelines` needs at least: one per single-route pipeline,
/// one per company for each fan-out, and one per identifier not yet resolved.
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
    let fans_out = pipelines.iter().any(|p| p.fan_out == FanOut::Universe);
    let mut due = if fans_out { unresolved } else { 0 };
    for p in pipelines {
        due += match (p.fan_out, p.records) {
            (FanOut::Universe, Records::Company) => 0,
            (FanOut::Universe, _) => distinct,
            // A country's list, then one request per series: at least two.
            (FanOut::Countries, _) => 2 * universe.countries.len() as u64,
            (FanOut::None, _) => 1,
            // Texts of filings not yet fetched: unknown until the parent table is read.
            (FanOut::Parent, _) => 0,
        };
    }
    due
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn first_sync_takes_everything_then_the_smallest_covering_range() {
        let p = Params::default();
        let today = d("2026-11-25");
        assert_eq!(price_range(None, today, &p), "ALL");
        assert_eq!(price_range(Some(d("2026-11-24")), today, &p), "1M");
        assert_eq!(price_range(Some(d("2026-10-01")), today, &p), "3M");
        assert_eq!(price_range(Some(d("2024-01-01")), today, &p), "5Y");
        assert_eq!(price_range(Some(d("2010-01-01")), today, &p), "ALL");
    }

    #[test]
    fn never_synced_then_stalest_first() {
        let t =
            |h: u32| Some("2026-11-25T00:00:00Z".parse::<DateTime<Utc>>().unwrap() + chrono::Duration::hours(h.into()));
        let members = vec![("a", t(5)), ("b", None), ("c", t(1)), ("d", None)];
        let ordered: Vec<&str> = stalest_first(members, |m| m.1).iter().map(|m| m.0).collect();
        assert_eq!(ordered, ["b", "d", "c", "a"]);
    }
}
