//! 8-K events: the market-wide wire by filing date, each company's index, and
//! the item texts of the configured companies' recent filings.

use std::collections::HashMap;

use chrono::{DateTime, Duration, NaiveDate, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{Member, Progress, SyncError, Syncer, found, send_fetched, upstream_error};
use crate::feeds::events::{self as feed, EventEntry, EventsPage};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, UpstreamError, encode};

/// How far back a stored event whose headline is still gated pulls the wire's
/// next window: the gate passes within hours.
const GATED_LOOKBACK_DAYS: i64 = 7;
/// New filings allowed for beyond what the warehouse already knows about.
const INDEX_MARGIN: i64 = 5;
const MAX_INDEX_LIMIT: i64 = 500;
/// Reads of one wire day whose total keeps moving before it is taken as read.
const WIRE_DAY_ATTEMPTS: u32 = 3;

/// A company index checkpoint: the newest filing seen.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct IndexCursor {
    accession: String,
    accepted_at: Option<DateTime<Utc>>,
}

/// A wire page mapped to rows.
struct WirePage {
    rows: Rows,
    total: Option<u64>,
    count: usize,
}

impl Syncer {
    /// The wire, one filing date at a time, oldest first. A day whose `total`
    /// moved while it was read is read again: arrivals can land anywhere in
    /// an offset order, and a repeat is harmless (rows are keyed by accession).
    pub(super) async fn run_events_wire(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let today = self.clock.now().date_naive();
        let limit = pipeline.params.page_limit.unwrap_or(200);
        let horizon = today - Duration::days(i64::from(pipeline.params.backfill_days.unwrap_or(7)));
        let mut start = checkpoints
            .get("")
            .and_then(|c| c.cursor.parse::<NaiveDate>().ok())
            .map_or(horizon, |done| done - Duration::days(1));
        let lookback = today - Duration::days(GATED_LOOKBACK_DAYS);
        let gated = self.sink.call(move |s| s.earliest_gated_filing(lookback)).await??;
        if let Some(g) = gated {
            start = start.min(g);
        }
        let mut day = start;
        while day <= today {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let mut offset = 0u64;
                let mut first_total = None;
                let settled = loop {
                    let route = format!(
                        "{}?from={day}&to={day}&sort=oldest&limit={limit}&offset={offset}",
                        pipeline.route
                    );
                    let fetched = self
                        .client
                        .get(&route, Access::Key, |body| {
                            let page: EventsPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                            let mut rows = Rows::new(run_id, &route, self.clock.now());
                            for raw in &page.events {
                                feed::read(&mut rows, raw, None, None);
                            }
                            Ok(WirePage {
                                rows,
                                total: page.total,
                                count: page.events.len(),
                            })
                        })
                        .await
                        .map_err(upstream_error)?;
                    let page = fetched.value;
                    first_total.get_or_insert(page.total);
                    offset += page.count as u64;
                    let done = page.count == 0 || page.total.is_none_or(|t| offset >= t);
                    // The day is complete once its total held still while it was
                    // read (or after the last attempt): its last page carries it.
                    let settled = done && (first_total == Some(page.total) || attempt == WIRE_DAY_ATTEMPTS);
                    let checkpoint = settled.then(|| Checkpoint {
                        pipeline: pipeline.name.clone(),
                        partition: String::new(),
                        cursor: day.to_string(),
                    });
                    self.commit(run_id, page.rows, checkpoint, progress).await?;
                    if done {
                        break settled;
                    }
                };
                if settled {
                    break;
                }
                tracing::info!(message = "Wire day changed while read; reading it again.", %day);
            }
            day += Duration::days(1);
        }
        Ok(())
    }

    /// Each company's index: the whole history once; then a `limit` sized to
    /// what the warehouse already knows is newer than the last sync, plus
    /// gated headlines to fill and a margin; the whole history again if that
    /// page does not reach the last filing seen.
    pub(super) async fn run_events_index(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let gated_since = self.clock.now() - Duration::days(GATED_LOOKBACK_DAYS);
        let known: HashMap<String, IndexCursor> = members
            .iter()
            .filter_map(|m| {
                let cursor = serde_json::from_str(&checkpoints.get(&m.key)?.cursor).ok()?;
                Some((m.key.clone(), cursor))
            })
            .collect();
        let limits = self.index_limits(&known, gated_since).await?;
        let (known, limits) = (&known, &limits);
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for member in members {
                let (known, limit) = (known.get(&member.key).cloned(), limits.get(&member.key).copied());
                let step = match self
                    .company_index(pipeline, run_id, &member, known, limit, &mut noted)
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
        pipeline: &Pipeline,
        run_id: &str,
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
        let Some(mut page) = found(self.fetch_index(&route, run_id, &member.key).await, progress)? else {
            return Ok(None);
        };
        if let (Some(cursor), Some(n)) = (&known, limit)
            && page.entries.len() as i64 >= n
            && !page.entries.iter().any(|e| e.accession == cursor.accession)
        {
            tracing::info!(message = "Index page did not reach the last filing seen; reading the whole history.", company = %member.key);
            let Some(whole) = found(self.fetch_index(&path, run_id, &member.key).await, progress)? else {
                return Ok(None);
            };
            page = whole;
        }
        let newest = page
            .entries
            .iter()
            .max_by_key(|e| e.accepted_at)
            .map(|e| IndexCursor {
                accession: e.accession.clone(),
                accepted_at: e.accepted_at,
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
        route: &str,
        run_id: &str,
        company_key: &str,
    ) -> Result<crate::upstream::Fetched<IndexPage>, UpstreamError> {
        self.client
            .get(route, Access::Key, |body| {
                let page: EventsPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut rows = Rows::new(run_id, route, self.clock.now());
                let entries = page
                    .events
                    .iter()
                    .filter_map(|raw| feed::read(&mut rows, raw, Some(company_key), page.symbol.as_deref()))
                    .collect();
                Ok(IndexPage { rows, entries })
            })
            .await
    }

    /// For each company with a cursor, the `limit` of its index request: its
    /// stored events from the anchor on (the last filing seen, or an older one
    /// whose headline is still gated), plus a margin for arrivals. One query
    /// for the run: asked company by company, each query waited behind the
    /// commit in flight (BENCHMARKS.md, Cold start).
    async fn index_limits(
        &self,
        known: &HashMap<String, IndexCursor>,
        gated_since: DateTime<Utc>,
    ) -> Result<HashMap<String, i64>, SyncError> {
        if known.is_empty() {
            return Ok(HashMap::new());
        }
        let anchors: Vec<(String, String)> = known
            .iter()
            .map(|(company, c)| (company.clone(), c.accession.clone()))
            .collect();
        let counts = self
            .sink
            .call(move |s| s.events_since_anchors(&anchors, gated_since))
            .await??;
        Ok(counts
            .into_iter()
            .map(|(company, n)| (company, (n + INDEX_MARGIN).clamp(1, MAX_INDEX_LIMIT)))
            .collect())
    }

    /// Item texts missing for the configured companies' filings of the last
    /// `text_days`: coded items one by one, the uncoded item without `item`.
    pub(super) async fn run_event_texts(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let since = self.clock.now().date_naive() - Duration::days(i64::from(pipeline.params.text_days.unwrap_or(30)));
        let keys: Vec<String> = members.into_iter().map(|m| m.key).collect();
        let missing = self.sink.call(move |s| s.missing_item_texts(&keys, since)).await??;
        let fetches = missing.into_iter().map(|(company, accession, item)| {
            let path = pipeline
                .route
                .replace("{company}", &encode(&company))
                .replace("{accession}", &encode(&accession));
            async move {
                let mut listed = Vec::new();
                let mut rows = Rows::new(run_id, &path, self.clock.now());
                let mut problems = Vec::new();
                let mut queue = vec![item];
                while let Some(item) = queue.pop() {
                    let route = if item.is_empty() {
                        path.clone()
                    } else {
                        format!("{path}?item={}", encode(&item))
                    };
                    let fetched = self
                        .client
                        // A whole body that is not UTF-8 is the service's bad
                        // record, not a failed request: quarantined, not retried.
                        .get(&route, Access::Key, |body| {
                            Ok(String::from_utf8(body.to_vec())
                                .map_err(|e| (String::from_utf8_lossy(body).into_owned(), e.to_string())))
                        })
                        .await;
                    match fetched {
                        Ok(f) => {
                            rows.route = route;
                            match f.value {
                                Ok(text) => feed::read_item_text(&mut rows, &accession, &item, &company, &text),
                                Err((lossy, why)) => rows.quarantine(&lossy, format!("item text is not UTF-8: {why}")),
                            }
                        }
                        // The filing has coded items after all: the 400 lists them.
                        Err(UpstreamError::BadRequest { body, .. }) if item.is_empty() && body.items.is_some() => {
                            listed = body.items.unwrap_or_default();
                            match self.stored_items(&accession).await {
                                Ok(stored) => queue.extend(listed.iter().filter(|i| !stored.contains(*i)).cloned()),
                                Err(e) => return (rows, listed, problems, Err(e)),
                            }
                        }
                        Err(UpstreamError::NotFound { route, message }) => {
                            problems.push(format!("{route}: 404 {message}"));
                        }
                        Err(e) => return (rows, listed, problems, Err(upstream_error(e))),
                    }
                }
                (rows, listed, problems, Ok(()))
            }
        });
        // Collected first: see `run_per_company`.
        let mut results = futures::stream::iter(fetches.collect::<Vec<_>>()).buffered(self.config.upstream.concurrency);
        while let Some((rows, listed, problems, result)) = results.next().await {
            if !listed.is_empty() {
                tracing::info!(message = "Filing listed its coded items; fetched each.", items = ?listed);
            }
            progress.problems.extend(problems);
            self.commit(run_id, rows, None, progress).await?;
            result?;
        }
        Ok(())
    }
}

impl Syncer {
    /// The items of a filing whose texts are already stored.
    async fn stored_items(&self, accession: &str) -> Result<std::collections::HashSet<String>, SyncError> {
        let accession = accession.to_owned();
        Ok(self
            .sink
            .call(move |s| {
                s.rows(
                    ("event_item_texts", "listing stored items"),
                    "SELECT item FROM event_item_texts WHERE accession = ?",
                    &accession,
                    |r| r.get(0),
                )
            })
            .await??)
    }
}

struct IndexPage {
    rows: Rows,
    entries: Vec<EventEntry>,
}
