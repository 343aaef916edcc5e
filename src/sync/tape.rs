//! The cursor engines ([`Fetch::Cursor`](crate::feeds::Fetch::Cursor) and
//! [`Fetch::CompanyCursor`](crate::feeds::Fetch::CompanyCursor)): a tape, or
//! each company's, read with the wire contract's cursors. A first sync reads the head and pages back with `before` to a
//! horizon; every sync then polls forward with `after` and `changedSince`, so
//! new items and rewritten headlines both arrive. Each page commits with the
//! cursor that follows it, so a crash or a quota wall resumes at that page.

use chrono::{DateTime, Duration, Utc};
use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::{FetchedTx, Member, Progress, SyncError, Syncer, goes_on, send_fetched, unless_cancelled, upstream_error};
use crate::feeds::{Tape as Feed, TapeHead};
use crate::pipeline::Pipeline;
use crate::records::{Rows, SeenKeys};
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};

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

/// The longest cursor taken from the service (the contract's are a few dozen bytes).
const MAX_CURSOR_BYTES: usize = 1024;

/// The checkpoint partition of a tape that its live stream moves.
pub(super) const STREAM_PARTITION: &str = "stream";

impl TapeCursor {
    /// A stored cursor; an unreadable one starts the tape again, with a warning.
    pub(super) fn read(stored: Option<&StoredCheckpoint>, partition: &str) -> TapeCursor {
        let Some(stored) = stored else {
            return TapeCursor::default();
        };
        serde_json::from_str(&stored.cursor).unwrap_or_else(|e| {
            tracing::warn!(
                message = "Unreadable tape checkpoint; starting the tape again.",
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
    feed: &'a Feed,
    route: String,
    partition: String,
    /// For a company's tape: the company.
    company_key: Option<String>,
    /// Shared by the tape's pages ([`Rows::share_seen`]).
    seen: SeenKeys,
}

impl Syncer {
    pub(super) async fn run_tape(
        &self,
        pipeline: &Pipeline,
        feed: &Feed,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let tape = Tape {
            pipeline,
            feed,
            route: pipeline.route.clone(),
            partition: String::new(),
            company_key: None,
            seen: SeenKeys::default(),
        };
        // The poll keeps its own forward position even while the live stream
        // runs ahead: skipping to the stream's would save no request (one
        // page answers either way) and could skip what arrived before the
        // stream first connected.
        let cursor = TapeCursor::read(checkpoints.get(""), "");
        self.commit_as_fetched(run_id, progress, self.policy().page_group, |done| async move {
            let mut noted = Progress::default();
            let read = self.sync_tape(&tape, run_id, cursor, &mut noted, &done).await;
            goes_on(&done, read).await;
            noted
        })
        .await
    }

    pub(super) async fn run_company_tapes(
        &self,
        pipeline: &Pipeline,
        feed: &Feed,
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
        self.commit_as_fetched(run_id, progress, self.policy().page_group, |done| async move {
            let mut noted = Progress::default();
            let done = &done;
            let tapes = members.into_iter().map(|m| {
                let tape = Tape {
                    pipeline,
                    feed,
                    route: pipeline.route.replace("{company}", &encode(&m.key)),
                    partition: m.key.clone(),
                    company_key: Some(m.key),
                    seen: SeenKeys::default(),
                };
                let cursor = TapeCursor::read(checkpoints.get(&tape.partition), &tape.partition);
                async move {
                    let mut own = Progress::default();
                    let result = self.sync_tape(&tape, run_id, cursor, &mut own, done).await;
                    (own, result)
                }
            });
            // Collected first: see `run_per_company`.
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
        cursor: TapeCursor,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let mut mapping = None;
        let read = self.read_tape(tape, run_id, cursor, progress, done, &mut mapping).await;
        // The last page read goes to the commit side whatever ended the
        // reading, and before an error, so a quota wall still commits it.
        let sent = match mapping {
            Some(page) => send_mapped(page, done).await,
            None => true,
        };
        read.map(|go_on| go_on && sent)
    }

    /// [`Syncer::sync_tape`]'s reading. Each page's items are mapped off the
    /// fetch chain while the next page is requested: the next cursor needs
    /// only the page's own fields and its oldest `firstSeenAt`. `mapping` holds
    /// the page read last until the next one is on its way.
    async fn read_tape(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        mut cursor: TapeCursor,
        progress: &mut Progress,
        done: &FetchedTx,
        mapping: &mut Option<PendingPage>,
    ) -> Result<bool, SyncError> {
        let limit = tape.pipeline.params.page_limit.unwrap_or(200);
        let filters = (tape.feed.filters)(&self.config);
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
            let Some(page) = self.tape_page(tape, run_id, &route, progress).await? else {
                return Ok(true);
            };
            if head && cursor.horizon.is_none() {
                let days = i64::from(tape.pipeline.params.backfill_days.unwrap_or(7));
                let horizon = self.clock.now() - Duration::days(days);
                cursor.horizon = Some(horizon);
                cursor.before = backfill_continues(&page.head, horizon);
            }
            let more = !head && page.head.has_more;
            if more
                && page
                    .head
                    .latest_id
                    .as_ref()
                    .is_none_or(|id| Some(id) == cursor.after.as_ref())
            {
                return Err(stuck(&route, "latestId", cursor.after.as_deref()));
            }
            cursor.after = page.head.latest_id.clone().or(cursor.after.take());
            cursor.changed_since = page.head.server_time.clone().or(cursor.changed_since.take());
            if !hand_on(mapping, tape, page.rows, &cursor, done).await {
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
            let Some(page) = self.tape_page(tape, run_id, &route, progress).await? else {
                return Ok(true);
            };
            cursor.before = backfill_continues(&page.head, horizon);
            if cursor.before.as_ref() == Some(&from) {
                return Err(stuck(&route, "nextCursor", Some(&from)));
            }
            if !hand_on(mapping, tape, page.rows, &cursor, done).await {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Fetches one page and starts mapping its items on a blocking thread;
    /// `None` when the company is unknown (404, noted).
    async fn tape_page(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        route: &str,
        progress: &mut Progress,
    ) -> Result<Option<FetchedPage>, SyncError> {
        let read_head = tape.feed.head;
        let fetched = self
            .client
            // Only the page's own fields are read on the fetch chain: reading
            // every item there took a quarter of its time.
            .get(route, Access::Key, |body| Ok((read_head(body)?, body.clone())))
            .await;
        if let Ok(f) = &fetched {
            let head = &f.value.0;
            for (field, value) in [
                ("latestId", &head.latest_id),
                ("nextCursor", &head.next_cursor),
                ("serverTime", &head.server_time),
            ] {
                if let Some(v) = value.as_ref().filter(|v| v.len() > MAX_CURSOR_BYTES) {
                    return Err(SyncError::Other(format!(
                        "{route}: the service sent a {field} of {} bytes; a cursor goes into every later request, the checkpoint and the logs, so fdsync takes none longer than {MAX_CURSOR_BYTES}",
                        v.len()
                    )));
                }
            }
        }
        match fetched {
            Ok(f) => {
                let (head, body) = f.value;
                let mut rows = Rows::new(run_id, route, self.clock.now());
                rows.share_seen(tape.seen.clone());
                let rows = map_page(tape.feed.read, body, rows, tape.company_key.clone());
                Ok(Some(FetchedPage { head, rows }))
            }
            Err(UpstreamError::NotFound { route, message }) => {
                progress.problems.push(format!("{route}: 404 {message}"));
                Ok(None)
            }
            Err(e) => Err(upstream_error(e)),
        }
    }
}

/// A page whose items are being mapped to rows, with its cursors.
struct FetchedPage {
    head: TapeHead,
    rows: tokio::task::JoinHandle<Rows>,
}

/// A page on its way to the commit side: its rows, once mapped, and the
/// checkpoint of the cursor after it.
type PendingPage = (tokio::task::JoinHandle<Rows>, Checkpoint);

/// Maps a page's items into `rows` on a blocking thread.
fn map_page(
    read: crate::feeds::ReadTape,
    body: bytes::Bytes,
    mut rows: Rows,
    company_key: Option<String>,
) -> tokio::task::JoinHandle<Rows> {
    tokio::task::spawn_blocking(move || {
        // Read once already; kept rather than lost should it ever fail.
        if let Err(e) = read(&mut rows, &body, company_key.as_deref()) {
            rows.quarantine(&String::from_utf8_lossy(&body), format!("tape page: {e}"));
        }
        rows
    })
}

/// Hands the page read before this one to the commit side, and keeps this
/// one, with the cursor after it, until the next is on its way.
async fn hand_on(
    mapping: &mut Option<PendingPage>,
    tape: &Tape<'_>,
    rows: tokio::task::JoinHandle<Rows>,
    cursor: &TapeCursor,
    done: &FetchedTx,
) -> bool {
    let checkpoint = cursor.checkpoint(&tape.pipeline.name, &tape.partition);
    match mapping.replace((rows, checkpoint)) {
        Some(previous) => send_mapped(previous, done).await,
        None => true,
    }
}

/// Hands a page to the commit side once its rows are mapped.
async fn send_mapped((rows, checkpoint): PendingPage, done: &FetchedTx) -> bool {
    let fetched = match unless_cancelled(rows.await) {
        Some(rows) => Ok((rows, vec![checkpoint])),
        None => Err(SyncError::Other("mapping a tape page: cancelled".into())),
    };
    send_fetched(done, fetched).await
}

/// A page that says more follows but names no further position: asking
/// again would repeat it until the quota is gone. What was read before it
/// is committed; the pipeline fails and the others go on.
fn stuck(route: &str, field: &str, at: Option<&str>) -> SyncError {
    SyncError::Other(format!(
        "{route}: the service said more follows, but its {field} did not move (still {}); stopped rather than ask for the same page again",
        at.unwrap_or("absent")
    ))
}

/// The next `before`, unless this page reached the horizon or the start of the tape.
fn backfill_continues(page: &TapeHead, horizon: DateTime<Utc>) -> Option<String> {
    if page.items == 0 || page.oldest.is_some_and(|t| t < horizon) {
        return None;
    }
    page.next_cursor.clone()
}
