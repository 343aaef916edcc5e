//! What is due: from checkpoints and pipeline settings, the requests a run makes.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::config::UniverseConfig;
use crate::pipeline::Pipeline;
use crate::sink::StoredCheckpoint;

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
