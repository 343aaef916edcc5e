//! The universe engine ([`Fetch::Universe`]): each configured identifier
//! resolved once to its canonical `company_key`, aliases of one company
//! merged; and, when the universe's own pipeline runs, every company's
//! payload asked again, so renames and predecessor changes land.

use futures::StreamExt;

use super::{Member, Progress, SyncError, Syncer, UNIVERSE_PIPELINE, send_fetched, upstream_error};
use crate::feeds::{self, Fetch};
use crate::records::Rows;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};

impl Syncer {
    /// Maps every configured identifier to its canonical `company_key`, asking the
    /// service only about identifiers never resolved before, and drops duplicates
    /// (`MSFT` and `789019` are one company). With `refresh`, every company
    /// last asked before the schedule's latest firing is asked again too,
    /// once by its key, the longest unasked first. The lookups run `concurrency` at a
    /// time and commit in groups as they arrive
    /// ([`CommitPolicy::universe_group`](crate::sink::policy::CommitPolicy::universe_group)):
    /// each commit costs the writer the same few statements whatever it
    /// holds, and one lookup a commit, a first sync of 2,000 companies spent
    /// most of a minute here.
    pub(super) async fn resolve_universe(
        &self,
        run_id: &str,
        refresh: Option<&crate::pipeline::Schedule>,
        progress: &mut Progress,
    ) -> Result<Vec<Member>, SyncError> {
        let known = self.sink.call(|s| s.checkpoints(UNIVERSE_PIPELINE)).await??;
        let ids: Vec<String> = self
            .config
            .universe
            .companies
            .iter()
            .map(|id| id.trim().to_owned())
            .collect();
        let universe = |f: &&feeds::Feed| {
            if let Fetch::Universe(read) = f.fetch {
                Some((f.route, read))
            } else {
                None
            }
        };
        let Some((route, read)) = feeds::FEEDS.iter().find_map(|f| universe(f)) else {
            return Err(SyncError::Other("no feed resolves the universe".into()));
        };
        let mut asked = std::collections::HashSet::new();
        let unknown = ids.iter().filter(|id| !known.contains_key(*id));
        // When each company was last asked, on the run's clock: its refresh
        // checkpoint, else when its identifiers were resolved.
        let now = self.clock.now();
        let mut resolved_at: std::collections::HashMap<&str, chrono::DateTime<chrono::Utc>> = Default::default();
        for c in known.values() {
            let at = resolved_at.entry(c.cursor.as_str()).or_insert(c.updated_at);
            *at = (*at).max(c.updated_at);
        }
        let last_asked = |key: &str| {
            known
                .get(&refreshed_partition(key))
                .and_then(|c| c.cursor.parse::<chrono::DateTime<chrono::Utc>>().ok())
                .or_else(|| resolved_at.get(key).copied())
        };
        let mut stale: Vec<_> = match refresh {
            Some(schedule) => members_of(&ids, &known)
                .into_iter()
                .map(|m| (last_asked(&m.key), m.key))
                .filter(|(asked, _)| asked.is_none_or(|t| schedule.next_after(&t).is_some_and(|fired| fired <= now)))
                .collect(),
            None => Vec::new(),
        };
        stale.sort();
        let lookups = unknown
            .chain(stale.iter().map(|(_, key)| key))
            .filter(|id| asked.insert(*id))
            .map(|id| {
                let route = route.replace("{company}", &encode(id));
                async move {
                    let fetched = self
                        .client
                        .get(&route, Access::Key, |body| {
                            let mut rows = Rows::new(run_id, &route, self.clock.now());
                            let company_key = read(&mut rows, body)?;
                            Ok((rows, company_key))
                        })
                        .await;
                    (id, fetched)
                }
            })
            // Collected first: see `run_per_company`.
            .collect::<Vec<_>>();
        if lookups.is_empty() {
            return Ok(members_of(&ids, &known));
        }
        let concurrency = self.config.upstream.concurrency;
        self.commit_as_fetched(run_id, progress, self.policy().universe_group, |done| async move {
            let mut noted = Progress::default();
            let mut results = futures::stream::iter(lookups).buffered(concurrency);
            while let Some((id, fetched)) = results.next().await {
                let ready = match fetched {
                    // A company without its key is quarantined: its rows commit, it joins no
                    // pipeline.
                    Ok(f) => {
                        let (rows, company_key) = f.value;
                        let asked_at = rows.fetched_at;
                        let checkpoints = company_key.into_iter().flat_map(|company_key| {
                            [
                                Checkpoint {
                                    pipeline: UNIVERSE_PIPELINE.into(),
                                    partition: refreshed_partition(&company_key),
                                    cursor: asked_at.to_rfc3339(),
                                },
                                Checkpoint {
                                    pipeline: UNIVERSE_PIPELINE.into(),
                                    partition: id.clone(),
                                    cursor: company_key,
                                },
                            ]
                        });
                        Ok((rows, checkpoints.collect()))
                    }
                    Err(UpstreamError::NotFound { .. }) => {
                        noted.problems.push(format!(
                            "universe.companies: {id:?} is unknown to the service (404); fix or remove it"
                        ));
                        continue;
                    }
                    // Refused otherwise (a 402, a 403): unresolved, asked again next run.
                    Err(e) if e.is_refusal() => {
                        if let Ok(refusal) = e.into_refusal() {
                            noted.problems.push(format!("universe.companies: {id:?}: {refusal}"));
                        }
                        continue;
                    }
                    // Quarantined; the identifier stays unresolved and is asked again next run.
                    Err(e @ UpstreamError::Unreadable { .. }) => {
                        if let SyncError::Unreadable(q) = upstream_error(e) {
                            noted.unreadable.push(*q);
                        }
                        continue;
                    }
                    Err(e) => Err(upstream_error(e)),
                };
                if !send_fetched(&done, ready).await {
                    break;
                }
            }
            noted
        })
        .await?;
        // What the lookups resolved is what they committed.
        let known = self.sink.call(|s| s.checkpoints(UNIVERSE_PIPELINE)).await??;
        Ok(members_of(&ids, &known))
    }
}

/// The checkpoint partition holding when a company was last asked.
fn refreshed_partition(company_key: &str) -> String {
    format!("asked:{company_key}")
}

/// The configured identifiers' companies, in the configured order, each once.
fn members_of(ids: &[String], resolved: &std::collections::HashMap<String, StoredCheckpoint>) -> Vec<Member> {
    let mut seen = std::collections::HashSet::new();
    ids.iter()
        .filter_map(|id| resolved.get(id))
        // Keys resolved before CIKs were padded on arrival take the padding here.
        .map(|stored| crate::wire::company_key(&stored.cursor))
        .filter(|key| seen.insert(key.clone()))
        .map(|key| Member { key })
        .collect()
}
