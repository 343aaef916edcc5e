//! News: the tape and each company's own feed, read with the wire contract's
//! cursors. A first sync reads the head and pages back with `before` to a
//! horizon; every sync then polls forward with `after` and `changedSince`, so
//! new items and rewritten headlines both arrive. Each page commits with the
//! cursor that follows it, so a crash or a quota wall resumes at that page.

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{FetchedTx, Member, Progress, SyncError, Syncer, goes_on, send_fetched, upstream_error};
use crate::pipeline::Pipeline;
use crate::records::{self, Rows};
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};
use crate::wire;

/// Where one tape stands, saved as the checkpoint's cursor (JSON).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct TapeCursor {
    /// The last `latestId`: the next `after`.
    pub(super) after: Option<String>,
    /// The last `serverTime`: the next `changedSince`.
    pub(super) changed_since: Option<String>,
    /// The next `before` of the backfill; `None` once it reached the horizon.
    pub(super) before: Option<String>,
    /// Where the backfill stops, fixed at the first sync.
    pub(super) horizon: Option<DateTime<Utc>>,
}

/// The news pipeline's checkpoint partition that the live stream moves.
pub(super) const STREAM_PARTITION: &str = "stream";

impl TapeCursor {
    /// A stored cursor; an unreadable one starts the tape again, with a warning.
    pub(super) fn read(stored: Option<&StoredCheckpoint>, partition: &str) -> TapeCursor {
        let Some(stored) = stored else {
            return TapeCursor::default();
        };
        serde_json::from_str(&stored.cursor).unwrap_or_else(|e| {
            tracing::warn!(
                message = "Unreadable news checkpoint; starting the tape again.",
                %partition,
                error = %e
            );
            TapeCursor::default()
        })
    }

    pub(super) fn checkpoint(&self, pipeline: &str, partition: &str) -> Checkpoint {
        Checkpoint {
            pipeline: pipeline.to_owned(),
            partition: partition.to_owned(),
            cursor: serde_json::to_string(self).expect("a cursor serializes"),
        }
    }
}

/// One tape to sync: the whole feed, or one company's.
struct Tape<'a> {
    pipeline: &'a Pipeline,
    route: String,
    partition: String,
    /// For a company's feed: the company, for `news_company_items`.
    company_key: Option<String>,
}

impl Syncer {
    pub(super) async fn run_news(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let tape = Tape {
            pipeline,
            route: pipeline.route.clone(),
            partition: String::new(),
            company_key: None,
        };
        // The poll keeps its own forward position even while the live stream
        // runs ahead: skipping to the stream's would save no request (one
        // page answers either way) and could skip what arrived before the
        // stream first connected.
        let cursor = TapeCursor::read(checkpoints.get(""), "");
        self.commit_as_fetched(run_id, progress, self.page_group(), |done| async move {
            let mut noted = Progress::default();
            let read = self.sync_tape(&tape, run_id, cursor, &mut noted, &done).await;
            goes_on(&done, read).await;
            noted
        })
        .await
    }

    pub(super) async fn run_company_news(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let checkpoints = &checkpoints;
        let concurrency = self.config.upstream.concurrency;
        // Each company's pages go in order; companies share the rate budget,
        // and the pages of several companies that arrive while a commit runs
        // commit together.
        self.commit_as_fetched(run_id, progress, self.page_group(), |done| async move {
            let mut noted = Progress::default();
            let done = &done;
            let tapes = members.into_iter().map(|m| {
                let tape = Tape {
                    pipeline,
                    route: pipeline.route.replace("{company}", &encode(&m.key)),
                    partition: m.key.clone(),
                    company_key: Some(m.key),
                };
                let cursor = TapeCursor::read(checkpoints.get(&tape.partition), &tape.partition);
                async move {
                    let mut own = Progress::default();
                    let result = self.sync_tape(&tape, run_id, cursor, &mut own, done).await;
                    (own, result)
                }
            });
            // Collected first: see `run_fan_out`.
            let mut results = futures::stream::iter(tapes.collect::<Vec<_>>()).buffer_unordered(concurrency);
            while let Some((own, result)) = results.next().await {
                noted.absorb(own);
                if !goes_on(done, result).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// Reads one tape forward, then back to its horizon, handing each page with
    /// the cursor that follows it to the commit side; false when the fetching
    /// must stop.
    async fn sync_tape(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        mut cursor: TapeCursor,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let limit = tape.pipeline.params.page_limit.unwrap_or(200);
        let filters = self.config.news.query();
        // Forward: the head first when nothing was read yet, then after/changedSince
        // until the service says nothing more remains.
        loop {
            let route = match (&cursor.after, &cursor.changed_since) {
                (Some(after), Some(since)) => format!(
                    "{}?after={}&changedSince={}&limit={limit}{filters}",
                    tape.route,
                    encode(after),
                    encode(since)
                ),
                (Some(after), None) => format!("{}?after={}&limit={limit}{filters}", tape.route, encode(after)),
                (None, _) => format!("{}?limit={limit}{filters}", tape.route),
            };
            let head = cursor.after.is_none();
            let (page, oldest) = self.news_page(tape, run_id, &route, progress).await?;
            let Some(page) = page else { return Ok(true) };
            if head && cursor.horizon.is_none() {
                let days = i64::from(tape.pipeline.params.backfill_days.unwrap_or(7));
                let horizon = self.clock.now() - Duration::days(days);
                cursor.horizon = Some(horizon);
                cursor.before = backfill_continues(&page, oldest, horizon);
            }
            let more = !head && page.has_more;
            cursor.after = page.latest_id.clone().or(cursor.after.take());
            cursor.changed_since = page.server_time.clone().or(cursor.changed_since.take());
            if !self.send_page(tape, page.rows, &cursor, done).await {
                return Ok(false);
            }
            // After the head, what arrives next is the next run's forward poll.
            if !more {
                break;
            }
        }
        // Back: `before` pages down to the horizon fixed at the first sync. A
        // crash loses at most the pages of the group in flight, read again on resume.
        let horizon = cursor.horizon.unwrap_or(DateTime::<Utc>::MIN_UTC);
        while let Some(from) = cursor.before.take() {
            let route = format!("{}?before={}&limit={limit}{filters}", tape.route, encode(&from));
            let (Some(page), oldest) = self.news_page(tape, run_id, &route, progress).await? else {
                return Ok(true);
            };
            cursor.before = backfill_continues(&page, oldest, horizon);
            if !self.send_page(tape, page.rows, &cursor, done).await {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Hands one page's rows to the commit side with the tape's cursor after it.
    async fn send_page(&self, tape: &Tape<'_>, rows: Rows, cursor: &TapeCursor, done: &FetchedTx) -> bool {
        let checkpoint = cursor.checkpoint(&tape.pipeline.name, &tape.partition);
        send_fetched(done, Ok((rows, vec![checkpoint]))).await
    }

    /// Fetches and maps one feed page; `None` when the company is unknown (404, noted).
    async fn news_page(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        route: &str,
        progress: &mut Progress,
    ) -> Result<(Option<MappedPage>, Option<DateTime<Utc>>), SyncError> {
        let company_key = tape.company_key.clone();
        let fetched = self
            .client
            .get(route, Access::Key, |body| {
                let page: wire::NewsPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut rows = Rows::new(run_id, route, self.clock.now());
                let mut oldest: Option<DateTime<Utc>> = None;
                for raw in &page.items {
                    let Some(seen) = records::news_item(&mut rows, raw) else {
                        continue;
                    };
                    oldest = match (oldest, seen.first_seen_at) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    if let Some(company) = &company_key {
                        rows.table("news_company_items")
                            .row()
                            .text(Some(company))
                            .text(Some(&seen.id))
                            .timestamp(seen.first_seen_at)
                            .end_bare();
                    }
                }
                let mapped = MappedPage {
                    rows,
                    latest_id: page.latest_id,
                    next_cursor: page.next_cursor,
                    has_more: page.has_more,
                    server_time: page.server_time,
                    items: page.items.len(),
                };
                Ok((mapped, oldest))
            })
            .await;
        match fetched {
            Ok(f) => {
                let (page, oldest) = f.value;
                Ok((Some(page), oldest))
            }
            Err(UpstreamError::NotFound { route, message }) => {
                progress.problems.push(format!("{route}: 404 {message}"));
                Ok((None, None))
            }
            Err(e) => Err(upstream_error(e)),
        }
    }
}

/// A feed page mapped to rows, with its cursors.
struct MappedPage {
    rows: Rows,
    latest_id: Option<String>,
    next_cursor: Option<String>,
    has_more: bool,
    server_time: Option<String>,
    items: usize,
}

/// The next `before`, unless this page reached the horizon or the start of the tape.
fn backfill_continues(page: &MappedPage, oldest: Option<DateTime<Utc>>, horizon: DateTime<Utc>) -> Option<String> {
    if page.items == 0 || oldest.is_some_and(|t| t < horizon) {
        return None;
    }
    page.next_cursor.clone()
}
