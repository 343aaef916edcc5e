//! The cursor engines ([`Fetch::Cursor`](crate::feeds::Fetch::Cursor),
//! [`Fetch::CompanyCursor`](crate::feeds::Fetch::CompanyCursor) and
//! [`Fetch::SearchCursor`](crate::feeds::Fetch::SearchCursor)): a tape, or each company's or saved
//! search's, read with the wire contract's cursors. A first sync reads the head and pages back with `before` to a
//! horizon; every sync then polls forward with `after` and `changedSince`, so new items and
//! rewritten headlines both arrive. Each page commits with the cursor that follows it, so a crash
//! or a quota wall resumes at that page.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use futures::StreamExt;

use super::commit::send_packed;
use super::packed::{Mapping, PackedPage};
use super::{FetchedTx, Member, Progress, Shortfall, SyncError, Syncer, goes_on, unless_cancelled, upstream_error};
use crate::bookkeeping::{NOT_SERVED, NOT_SERVED_404, TapeCursor};
use crate::feeds::{Tape as Feed, TapeHead};
use crate::pipeline::Pipeline;
use crate::records::{Rows, SeenKeys};
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};

/// The longest cursor taken from the service (the contract's are a few dozen bytes).
const MAX_CURSOR_BYTES: usize = 1024;

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

    /// The stream's own position: the backfill is the poll's business.
    pub(super) fn stream_only(&mut self) {
        (self.before, self.reached, self.complete) = (None, None, false);
    }

    /// Whether the backfill goes on: not at the start of the tape, and not
    /// past `horizon`.
    fn backfill_due(&self, horizon: Option<DateTime<Utc>>) -> bool {
        !self.complete && self.reached.is_none_or(|r| horizon.is_none_or(|h| r >= h))
    }

    /// Moves the backfill past a page read going back (or the head). The
    /// start of the tape is where the service gives no further cursor and
    /// does not say more remains.
    fn went_back(&mut self, page: &TapeHead) {
        if let Some(oldest) = page.oldest {
            self.reached = Some(self.reached.map_or(oldest, |r| r.min(oldest)));
        }
        self.before = page.next_cursor.clone().filter(|_| page.items > 0);
        self.complete = self.before.is_none() && !(page.has_more && page.items > 0);
    }

    pub(super) fn checkpoint(&self, pipeline: &str, partition: &str) -> Checkpoint {
        Checkpoint {
            pipeline: pipeline.to_owned(),
            partition: partition.to_owned(),
            cursor: serde_json::to_string(self).expect("a cursor serializes"),
        }
    }
}

/// One tape to sync: the whole feed, or one company's or saved search's.
struct Tape<'a> {
    pipeline: &'a Pipeline,
    feed: &'a Feed,
    route: String,
    /// The filters (each `&name=value`) every request of the tape carries.
    filters: String,
    partition: String,
    owner: Owner,
    /// Shared by the tape's pages ([`Rows::share_seen`]).
    seen: SeenKeys,
    /// The service answered 404: a company it does not know, not asked again this run.
    unknown: AtomicBool,
}

impl<'a> Tape<'a> {
    /// A tape not read yet this run; its checkpoint's partition is its owner's key.
    fn new(pipeline: &'a Pipeline, feed: &'a Feed, route: String, filters: String, owner: Owner) -> Tape<'a> {
        Tape {
            pipeline,
            feed,
            route,
            filters,
            partition: owner.key().unwrap_or_default().to_owned(),
            owner,
            seen: SeenKeys::default(),
            unknown: AtomicBool::new(false),
        }
    }
}

/// Whose tape it is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Owner {
    Feed,
    Company(String),
    Search(String),
}

impl Owner {
    /// What the tape's reader is given: the company, or the search's text.
    fn key(&self) -> Option<&str> {
        match self {
            Owner::Feed => None,
            Owner::Company(key) | Owner::Search(key) => Some(key),
        }
    }
}

/// One pass over a tape: what each of its requests and commits needs, and
/// the page read last, held until the next one is on its way.
struct Reading<'a, 'b> {
    tape: &'a Tape<'b>,
    run_id: &'a str,
    done: &'a FetchedTx,
    /// `limit=` and the filters every request ends with.
    tail: String,
    pending: Option<PendingPage>,
}

/// The two reads of a tape: what is new, then further back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Forward,
    Back,
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
        let tape = Tape::new(
            pipeline,
            feed,
            pipeline.route.clone(),
            (feed.filters)(&self.config),
            Owner::Feed,
        );
        // The poll keeps its own forward position even while the live stream
        // runs ahead: skipping to the stream's would save no request (one
        // page answers either way) and could skip what arrived before the
        // stream first connected.
        let mut cursor = TapeCursor::read(checkpoints.get(""), "");
        let group = self.policy().page_group;
        let ahead = self.packed_pages_ahead(group);
        self.commit_as_sent(run_id, progress, group, ahead, |done| async move {
            let mut noted = Progress::default();
            for pass in [Pass::Forward, Pass::Back] {
                let read = self
                    .sync_tape(&tape, run_id, &mut cursor, pass, &mut noted, &done)
                    .await;
                if !goes_on(&done, read).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// Each company's tape ([`Syncer::run_tapes`]).
    pub(super) async fn run_company_tapes(
        &self,
        pipeline: &Pipeline,
        feed: &Feed,
        run_id: &str,
        members: Vec<Member>,
        checkpoints: &HashMap<String, StoredCheckpoint>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let filters = (feed.filters)(&self.config);
        let tapes = members
            .into_iter()
            .map(|m| {
                let route = pipeline.route.replace("{company}", &encode(&m.key));
                Tape::new(pipeline, feed, route, filters.clone(), Owner::Company(m.key))
            })
            .collect();
        self.run_tapes(pipeline, tapes, checkpoints, run_id, progress).await
    }

    /// Each saved search's tape ([`Syncer::run_tapes`]): the filters with
    /// the search's text as `q`; its checkpoint's partition is the text.
    pub(super) async fn run_search_tapes(
        &self,
        pipeline: &Pipeline,
        feed: &Feed,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let searches = &self.config.news.searches;
        self.retire_tapes(
            pipeline,
            &checkpoints,
            |p| searches.iter().any(|s| s == p),
            run_id,
            progress,
        )
        .await?;
        let tapes = self
            .config
            .news
            .searches
            .iter()
            .map(|search| {
                let filters = self.config.news.search_query(search);
                Tape::new(
                    pipeline,
                    feed,
                    pipeline.route.clone(),
                    filters,
                    Owner::Search(search.clone()),
                )
            })
            .collect();
        self.run_tapes(pipeline, tapes, &checkpoints, run_id, progress).await
    }

    /// Marks each tape not `configured` (a search no longer saved, a company
    /// no longer in the universe) as retired, once: its rows stay, and its
    /// unfinished backfill no longer keeps the pipeline due or counts in its
    /// status. Read again, it goes on from where it stood. Checkpoints that
    /// are not tapes (a refusal remembered) are left alone.
    pub(super) async fn retire_tapes(
        &self,
        pipeline: &Pipeline,
        checkpoints: &HashMap<String, StoredCheckpoint>,
        configured: impl Fn(&str) -> bool,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        for (partition, stored) in checkpoints {
            if partition.starts_with(NOT_SERVED) || partition.starts_with(NOT_SERVED_404) || configured(partition) {
                continue;
            }
            let Ok(mut cursor) = serde_json::from_str::<TapeCursor>(&stored.cursor) else {
                continue;
            };
            if cursor.retired {
                continue;
            }
            cursor.retired = true;
            let checkpoint = cursor.checkpoint(&pipeline.name, partition);
            let rows = Rows::new(run_id, &pipeline.route, self.clock.now());
            self.commit(run_id, rows, Some(checkpoint), progress).await?;
        }
        Ok(())
    }

    /// Every tape's new items first, then the backfills, the least
    /// advanced first: what the quota leaves after the fresh poll goes back.
    async fn run_tapes(
        &self,
        pipeline: &Pipeline,
        tapes: Vec<Tape<'_>>,
        checkpoints: &HashMap<String, StoredCheckpoint>,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let concurrency = self.config.upstream.concurrency;
        // Each company's pages go in order; companies share the rate budget,
        // and the pages of several companies that arrive while a commit runs
        // commit together.
        let group = self.policy().page_group;
        let ahead = self.packed_pages_ahead(group);
        self.commit_as_sent(run_id, progress, group, ahead, |done| async move {
            let mut noted = Progress::default();
            let done = &done;
            let mut tapes: Vec<(Tape, TapeCursor)> = tapes
                .into_iter()
                .map(|tape| {
                    let mut cursor = TapeCursor::read(checkpoints.get(&tape.partition), &tape.partition);
                    // Read again, a retired search's tape is a tape like any other.
                    cursor.retired = false;
                    (tape, cursor)
                })
                .collect();
            let horizon = self.horizon(pipeline);
            for pass in [Pass::Forward, Pass::Back] {
                if pass == Pass::Back {
                    tapes
                        .retain(|(tape, cursor)| !tape.unknown.load(Ordering::Relaxed) && cursor.backfill_due(horizon));
                    // Never read back first: the newest reached first.
                    tapes.sort_by_key(|(_, cursor)| {
                        std::cmp::Reverse(cursor.reached.unwrap_or(DateTime::<Utc>::MAX_UTC))
                    });
                }
                // Each tape's read is made when its turn comes, as in
                // `run_per_company`; by hand, as a lazy adapter over these
                // borrowed tapes could not be proven Send (rust-lang/rust#102211).
                let mut waiting = tapes.into_iter();
                let mut reading = futures::stream::FuturesUnordered::new();
                let mut read = Vec::new();
                let mut stop = false;
                loop {
                    while reading.len() < concurrency.max(1)
                        && let Some((tape, mut cursor)) = waiting.next()
                    {
                        reading.push(async move {
                            let mut own = Progress::default();
                            let result = self.sync_tape(&tape, run_id, &mut cursor, pass, &mut own, done).await;
                            (tape, cursor, own, result)
                        });
                    }
                    let Some((tape, cursor, own, result)) = reading.next().await else {
                        break;
                    };
                    noted.absorb(own);
                    if !goes_on(done, result).await {
                        stop = true;
                        break;
                    }
                    read.push((tape, cursor));
                }
                if stop {
                    break;
                }
                tapes = read;
            }
            noted
        })
        .await
    }

    /// Where a backfill stops: `backfill_days` back from now, or nowhere.
    fn horizon(&self, pipeline: &Pipeline) -> Option<DateTime<Utc>> {
        pipeline.params.horizon(self.clock.now())
    }

    /// Reads one pass of a tape, handing each page with the cursor that
    /// follows it to the commit side; false when the fetching must stop.
    async fn sync_tape(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        cursor: &mut TapeCursor,
        pass: Pass,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let limit = tape.pipeline.params.page_limit.unwrap_or(200);
        let mut reading = Reading {
            tape,
            run_id,
            done,
            tail: format!("limit={limit}{}", tape.filters),
            pending: None,
        };
        let read = match pass {
            Pass::Forward => self.read_forward(&mut reading, cursor, progress).await,
            Pass::Back => self.read_back(&mut reading, cursor, progress).await,
        };
        // The last page read goes to the commit side whatever ended the
        // reading, and before an error, so a quota wall still commits it.
        let sent = match reading.pending {
            Some(page) => send_pending(page, done).await,
            None => true,
        };
        read.map(|go_on| go_on && sent)
    }

    /// The head first when nothing was read yet, then `after` and
    /// `changedSince` until the service says nothing more remains. Each
    /// page is packed off the fetch chain while the next page is requested,
    /// and its items mapped on the commit side: the next cursor needs only
    /// the page's own fields and its oldest `firstSeenAt`.
    async fn read_forward(
        &self,
        r: &mut Reading<'_, '_>,
        cursor: &mut TapeCursor,
        progress: &mut Progress,
    ) -> Result<bool, SyncError> {
        let (route, tail) = (&r.tape.route, &r.tail);
        loop {
            let route = match (&cursor.after, &cursor.changed_since) {
                (Some(after), Some(since)) => {
                    format!("{route}?after={}&changedSince={}&{tail}", encode(after), encode(since))
                }
                (Some(after), None) => format!("{route}?after={}&{tail}", encode(after)),
                (None, _) => format!("{route}?{tail}"),
            };
            let head = cursor.after.is_none();
            let Some(page) = self.tape_page(r.tape, r.run_id, &route, progress, !head).await? else {
                return Ok(true);
            };
            // An empty tape under a filter of several values sent as a comma
            // list may be a service that takes the list for one value: said,
            // and not taken for "no news": nothing moves, the backfill is
            // not marked complete.
            if head
                && page.head.items == 0
                && r.tape.owner == Owner::Feed
                && !r.tail.is_empty()
                && self.config.news.sends_comma_lists()
            {
                progress.problems.push(format!(
                    "{route}: the filtered tape is empty; if the service reads a filter's several values from \
                     repeated parameters (tickers=A&tickers=B), set [news] list_form = \"repeated\""
                ));
                return Ok(false);
            }
            if head && cursor.before.is_none() && !cursor.complete {
                cursor.went_back(&page.head);
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
            if let Some(after) = &cursor.after
                && let Err(why) = follows_on(after, &page.head)
            {
                return Err(SyncError::Other(format!(
                    "{route}: the page does not follow on from after={after}: {why}; items between could be lost, so nothing of it is stored and the cursor stays (the wire contract: after= pages are the oldest items newer than the cursor, oldest first)"
                )));
            }
            cursor.after = page.head.latest_id.clone().or(cursor.after.take());
            cursor.changed_since = page.head.server_time.clone().or(cursor.changed_since.take());
            if !hand_on(&mut r.pending, r.tape, page.packing, cursor, r.done).await {
                return Ok(false);
            }
            // After the head, what arrives next is the next run's forward poll.
            if !more {
                return Ok(true);
            }
        }
    }

    /// `before` pages back from where the backfill stopped, to the horizon
    /// or the start of the tape. A crash loses at most the pages of the
    /// group in flight, read again on resume.
    async fn read_back(
        &self,
        r: &mut Reading<'_, '_>,
        cursor: &mut TapeCursor,
        progress: &mut Progress,
    ) -> Result<bool, SyncError> {
        let horizon = self.horizon(r.tape.pipeline);
        let (route, tail) = (&r.tape.route, &r.tail);
        while cursor.backfill_due(horizon) {
            if !self.client.may_backfill() {
                progress.backfill_paused = true;
                return Ok(true);
            }
            let route = match &cursor.before {
                Some(from) => format!("{route}?before={}&{tail}", encode(from)),
                // A tape whose backfill stopped without keeping where: from the head, once.
                None => format!("{route}?{tail}"),
            };
            let Some(page) = self.tape_page(r.tape, r.run_id, &route, progress, false).await? else {
                return Ok(true);
            };
            let from = cursor.before.take();
            cursor.went_back(&page.head);
            if from.is_some() && cursor.before == from {
                return Err(stuck(&route, "nextCursor", from.as_deref()));
            }
            let dead_end = cursor.before.is_none() && !cursor.complete;
            if !hand_on(&mut r.pending, r.tape, page.packing, cursor, r.done).await {
                return Ok(false);
            }
            // The service says more is older but names no cursor to it: the
            // backfill stops there, not complete, and the next run asks again.
            if dead_end {
                progress.shortfalls.push(Shortfall {
                    what: format!(
                        "further page(s) of older items at the end of the backfill ({route} said hasMore with no nextCursor)"
                    ),
                    expected: 1,
                    stored: 0,
                });
                return Ok(true);
            }
        }
        Ok(true)
    }

    /// Fetches one page and starts packing it on a blocking thread; `None`
    /// when the company is unknown (404, noted).
    async fn tape_page(
        &self,
        tape: &Tape<'_>,
        run_id: &str,
        route: &str,
        progress: &mut Progress,
        forward: bool,
    ) -> Result<Option<FetchedPage>, SyncError> {
        let read_head = tape.feed.head;
        let fetched = self
            .client
            // Only the page's own fields are read on the fetch chain: reading
            // every item there took a quarter of its time. A forward page's
            // ids too, to show it follows on from the last.
            .get(route, Access::Key, |body| Ok((read_head(body, forward)?, body.clone())))
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
                let mapping = Mapping {
                    rows,
                    read: tape.feed.read,
                    key: tape.owner.key().map(str::to_owned),
                    items: head.items,
                };
                let packing = tokio::task::spawn_blocking(move || PackedPage::pack(&body, mapping));
                Ok(Some(FetchedPage { head, packing }))
            }
            Err(e) if e.is_refusal() => {
                let refusal = e.into_refusal().expect("a refusal");
                tape.unknown.store(true, Ordering::Relaxed);
                match &tape.owner {
                    // A company the route does not serve: remembered, not a failure.
                    Owner::Company(company) => super::unserved::not_served(progress, company, refusal),
                    Owner::Feed | Owner::Search(_) => progress.problems.push(refusal.to_string()),
                }
                Ok(None)
            }
            // One company's or search's answer that could not be read:
            // quarantined, that tape stops, the others go on.
            Err(e @ UpstreamError::Unreadable { .. }) if tape.owner != Owner::Feed => {
                tape.unknown.store(true, Ordering::Relaxed);
                if let SyncError::Unreadable(q) = upstream_error(e) {
                    progress.unreadable.push(*q);
                }
                Ok(None)
            }
            Err(e) => Err(upstream_error(e)),
        }
    }
}

/// Whether a forward page follows on from `after`: its new items each newer
/// than the one before (the first newer than `after`), and its `latestId`
/// the newest of them. Ids sort in arrival order (the wire contract); a
/// longer id is the later one, for a service whose ids are not fixed-width.
pub(super) fn follows_on(after: &str, head: &TapeHead) -> Result<(), String> {
    let later = |a: &str, b: &str| a.len().cmp(&b.len()).then_with(|| a.cmp(b)) == std::cmp::Ordering::Greater;
    let mut previous = after;
    for id in &head.new_ids {
        if !later(id, previous) {
            return Err(if previous == after {
                format!("its item {id} is not newer than the cursor")
            } else {
                format!("its items are not oldest first ({id} after {previous})")
            });
        }
        previous = id;
    }
    match (head.new_ids.last(), &head.latest_id) {
        (Some(newest), Some(latest)) if latest != newest => {
            Err(format!("its latestId {latest} is not its newest item {newest}"))
        }
        _ => Ok(()),
    }
}

/// A page being packed, with its cursors.
struct FetchedPage {
    head: TapeHead,
    packing: tokio::task::JoinHandle<PackedPage>,
}

/// A page on its way to the commit side, once packed, with the checkpoint
/// of the cursor after it.
type PendingPage = (tokio::task::JoinHandle<PackedPage>, Checkpoint);

/// Hands the page read before this one to the commit side, and keeps this
/// one, with the cursor after it, until the next is on its way.
async fn hand_on(
    pending: &mut Option<PendingPage>,
    tape: &Tape<'_>,
    packing: tokio::task::JoinHandle<PackedPage>,
    cursor: &TapeCursor,
    done: &FetchedTx,
) -> bool {
    let checkpoint = cursor.checkpoint(&tape.pipeline.name, &tape.partition);
    match pending.replace((packing, checkpoint)) {
        Some(previous) => send_pending(previous, done).await,
        None => true,
    }
}

/// Hands a page to the commit side once it is packed.
async fn send_pending((packing, checkpoint): PendingPage, done: &FetchedTx) -> bool {
    match unless_cancelled(packing.await) {
        Some(page) => send_packed(done, page, checkpoint).await,
        None => {
            let cancelled = SyncError::Other("packing a tape page: cancelled".into());
            goes_on(done, Err(cancelled)).await
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feeds::Fetch;

    fn news_reader() -> crate::feeds::ReadTape {
        match &crate::feeds::feed("news").expect("the news feed").fetch {
            Fetch::Cursor(tape) => tape.read,
            _ => unreachable!("the news feed pages a cursor"),
        }
    }

    fn packed(body: &str) -> PackedPage {
        let fetched_at = DateTime::parse_from_rfc3339("2026-11-25T23:00:00Z").unwrap().to_utc();
        let mapping = Mapping {
            rows: Rows::new("run", "/api/v1/news/feed?limit=200", fetched_at),
            read: news_reader(),
            key: None,
            items: 2,
        };
        PackedPage::pack(body.as_bytes(), mapping)
    }

    #[test]
    fn a_packed_page_maps_to_the_rows_of_the_page_itself() {
        let item = |id: &str| {
            format!(
                r#"{{"id":"{id}","publishedAt":"2026-11-25T22:59:22Z","firstSeenAt":"2026-11-25T22:59:43.607Z","headline":"h {id}","url":"https://example.invalid/{id}","source":{{"id":"wire","name":"Wire"}},"tickers":["MSFT"]}}"#
            )
        };
        let body = format!(
            r#"{{"items":[{},{}],"nextCursor":"n_2","hasMore":true,"latestId":"n_1","serverTime":"2026-11-25T23:00:00Z"}}"#,
            item("n_1"),
            item("n_2")
        );
        let page = packed(&body);
        assert!(page.packed_bytes() < body.len());
        assert_eq!(page.packed.capacity(), page.packed_bytes());
        assert_eq!(page.items(), 2);
        let unpacked = page.unpack();

        let mut direct = Rows::new("run", "/api/v1/news/feed?limit=200", unpacked.fetched_at);
        news_reader()(&mut direct, body.as_bytes(), None).unwrap();
        assert_eq!(unpacked.row_count(), direct.row_count());
        assert!(unpacked.row_count() >= 2, "{} rows", unpacked.row_count());
        let batches = |rows: Rows| {
            rows.into_batches()
                .unwrap()
                .into_iter()
                .map(|b| (b.table.name, b.batch))
                .collect::<Vec<_>>()
        };
        assert_eq!(batches(unpacked), batches(direct));
    }

    #[test]
    fn a_packed_page_that_does_not_map_is_quarantined_whole() {
        let body = r#"{"items":{"not":"a list"}}"#;
        let rows = packed(body).unpack();
        assert_eq!(rows.row_count(), 0);
        assert_eq!(rows.quarantined.len(), 1);
        assert_eq!(rows.quarantined[0].record, body);
        assert!(
            rows.quarantined[0].error.starts_with("tape page:"),
            "{}",
            rows.quarantined[0].error
        );
    }
}
