//! The company-index engine ([`Fetch::CompanyIndex`](crate::feeds::Fetch::CompanyIndex)):
//! each company's whole index once; then a `limit` sized to what the
//! warehouse already knows is newer than the last sync, plus pending records
//! to fill and a margin; the whole index again if that page does not reach
//! the last entry seen (however many entries it holds: the service may cap a page).

use std::collections::HashMap;

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::offset_windows::PENDING_LOOKBACK_DAYS;
use super::{Member, Progress, SyncError, Syncer, Turn, found_for, send_fetched};
use crate::feeds::{CompanyIndex, Entry};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, UpstreamError, encode};

/// New entries allowed for beyond what the warehouse already knows about.
const INDEX_MARGIN: i64 = 5;
const MAX_INDEX_LIMIT: i64 = 500;

/// A company index checkpoint: the newest entry seen.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexCursor {
    /// The entry's id; the name is that of the checkpoints already stored.
    accession: String,
    accepted_at: Option<DateTime<Utc>>,
}

struct IndexPage {
    rows: Rows,
    entries: Vec<Entry>,
}

impl Syncer {
    pub(super) async fn run_company_index(
        &self,
        pipeline: &Pipeline,
        feed: &CompanyIndex,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let pending_since = self.clock.now() - Duration::days(PENDING_LOOKBACK_DAYS);
        let known: HashMap<String, IndexCursor> = members
            .iter()
            .filter_map(|m| {
                let cursor = serde_json::from_str(&checkpoints.get(&m.key)?.cursor).ok()?;
                Some((m.key.clone(), cursor))
            })
            .collect();
        let limits = self.index_limits(feed, &known, pending_since).await?;
        let (known, limits) = (&known, &limits);
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for member in members {
                let (known, limit) = (known.get(&member.key).cloned(), limits.get(&member.key).copied());
                let step = match self
                    .company_index(Turn { pipeline, run_id }, feed, &member, known, limit, &mut noted)
                    .await
                {
                    Ok(Some((rows, checkpoint))) => Ok((rows, checkpoint.into_iter().collect())),
                    Ok(None) => continue,
                    Err(e) => Err(e),
                };
                if !send_fetched(&done, step).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// One company's index page and the checkpoint after it; `None` when the
    /// company is unknown (404, noted).
    async fn company_index(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &CompanyIndex,
        member: &Member,
        known: Option<IndexCursor>,
        limit: Option<i64>,
        progress: &mut Progress,
    ) -> Result<Option<(Rows, Option<Checkpoint>)>, SyncError> {
        let path = pipeline.route.replace("{company}", &encode(&member.key));
        let route = match limit {
            Some(n) => format!("{path}?limit={n}"),
            None => path.clone(),
        };
        let Some(mut page) = found_for(
            self.fetch_index(feed, &route, run_id, &member.key).await,
            progress,
            &member.key,
        )?
        else {
            return Ok(None);
        };
        // Without the last entry seen, the page may have stopped short of it
        // (the service's own cap on `limit`, or more arrivals than allowed
        // for): the whole index, rather than a gap.
        if let (Some(cursor), Some(_)) = (&known, limit)
            && !page.entries.iter().any(|e| e.id == cursor.accession)
        {
            tracing::info!(message = "Index page did not reach the last entry seen; reading the whole index.", company = %member.key);
            let Some(whole) = found_for(
                self.fetch_index(feed, &path, run_id, &member.key).await,
                progress,
                &member.key,
            )?
            else {
                return Ok(None);
            };
            page = whole;
        }
        let newest = page
            .entries
            .iter()
            .max_by_key(|e| e.received)
            .map(|e| IndexCursor {
                accession: e.id.clone(),
                accepted_at: e.received,
            })
            .or(known);
        let checkpoint = newest.map(|c| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: member.key.clone(),
            cursor: serde_json::to_string(&c).expect("a cursor serializes"),
        });
        Ok(Some((page.rows, checkpoint)))
    }

    async fn fetch_index(
        &self,
        feed: &CompanyIndex,
        route: &str,
        run_id: &str,
        company_key: &str,
    ) -> Result<crate::upstream::Fetched<IndexPage>, UpstreamError> {
        let read = feed.read;
        self.client
            .get(route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, route, self.clock.now());
                let entries = read(&mut rows, body, company_key)?;
                Ok(IndexPage { rows, entries })
            })
            .await
    }

    /// For each company with a cursor, the `limit` of its index request: its
    /// stored records from the anchor on (the last entry seen, or an older
    /// one received since `pending_since` still pending), plus a margin for
    /// arrivals. One query for the run: asked company by company, each query
    /// waited behind the commit in flight.
    async fn index_limits(
        &self,
        feed: &CompanyIndex,
        known: &HashMap<String, IndexCursor>,
        pending_since: DateTime<Utc>,
    ) -> Result<HashMap<String, i64>, SyncError> {
        if known.is_empty() {
            return Ok(HashMap::new());
        }
        let anchors: Vec<(String, String)> = known
            .iter()
            .map(|(company, c)| (company.clone(), c.accession.clone()))
            .collect();
        let (stored, pending) = (feed.stored, feed.pending);
        let counts = self
            .sink
            .call(move |s| s.stored_since_anchors(stored, pending, &anchors, pending_since))
            .await??;
        Ok(counts
            .into_iter()
            .map(|(company, n)| (company, (n + INDEX_MARGIN).clamp(1, MAX_INDEX_LIMIT)))
            .collect())
    }
}
