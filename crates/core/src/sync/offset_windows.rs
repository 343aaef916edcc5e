//! The offset-windows engine ([`Fetch::OffsetWindows`](crate::feeds::Fetch::OffsetWindows)):
//! a market-wide list filtered by date, read in windows as wide as the
//! service's order allows, so a sparse stretch of years costs a page and a
//! busy day is paged. Each run reads what is fresh first (oldest first, from
//! the last day read to today), then backfills newest first toward the
//! horizon (none by default: everything the service serves).
//!
//! Pages overlap by one record: the first record of a page must be the last
//! of the one before, or the list moved under the reader (a filing landed
//! inside the window) and the window starts again from the last day known
//! complete. Arrivals at the head of an oldest-first read only lengthen it.
//!
//! A list that counts a day's records by kind (the wire's `counts=1`) is
//! asked that tally once for each day after it closed, and the day's stored
//! records are held against it ([`tally`]).

mod tally;

use chrono::{Duration, NaiveDate};

use super::{Progress, Shortfall, SyncError, Syncer, Turn, upstream_error};
use crate::bookkeeping::{BACKFILL_COMPLETE, BACKFILL_PARTITION, Backfill, DATES_PARTITION, PENDING_PARTITION};
use crate::feeds::Windows;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::Access;

/// How far back a stored record still pending (a gated headline) pulls the
/// next window: the service fills it in within hours.
pub const PENDING_LOOKBACK_DAYS: i64 = 7;
/// Hours between those re-reads: a gated headline costs at most four
/// re-reads of its days a day, not one at every run.
const PENDING_RECHECK_HOURS: i64 = 6;
/// Times one read may start again because the list moved under it.
const MOST_RESTARTS: u32 = 8;

/// Which way a read goes, and which checkpoint it moves.
#[derive(Clone, Copy, PartialEq)]
enum Direction {
    /// Oldest first up to today; the checkpoint is the last day read whole.
    Fresh,
    /// Newest first down to the horizon; the checkpoint is the oldest day
    /// from which everything later is stored.
    Backfill,
}

/// A page mapped to rows.
struct WindowRows {
    rows: Rows,
    records: Vec<(String, Option<NaiveDate>)>,
    total: Option<u64>,
    limit: Option<u64>,
    /// The body's hash: a page that repeats the one before it ignored the offset.
    digest: u64,
}

/// One read of [`Syncer::read_window`]: its direction, whether it is the
/// pipeline's first, the days it covers (`from` open: back to the start of
/// what the service serves) and where an earlier read of them stopped.
struct WindowRead {
    direction: Direction,
    first_run: bool,
    from: Option<NaiveDate>,
    to: NaiveDate,
    start: Option<LastRead>,
}

impl Syncer {
    pub(super) async fn run_windows(
        &self,
        pipeline: &Pipeline,
        feed: &Windows,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        self.read_windows(pipeline, feed, run_id, progress).await?;
        match feed.tally {
            // A paused backfill leaves the quota to fresh reads; so does the tally.
            Some(tally) if !progress.backfill_paused => {
                self.tally_closed_days(Turn { pipeline, run_id }, feed, tally, progress)
                    .await
            }
            _ => Ok(()),
        }
    }

    /// The fresh read, then the backfill.
    async fn read_windows(
        &self,
        pipeline: &Pipeline,
        feed: &Windows,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let today = self.clock.now().date_naive();
        // Checked once, before any read when something is stored already,
        // else after the first: a service whose `from`/`to` leave out the
        // edge days would lose a day at every window's edge unseen.
        let dates_checked = checkpoints.contains_key(DATES_PARTITION);
        let dates_checked = dates_checked || self.dates_are_inclusive(pipeline, feed, run_id, progress).await?;
        let horizon = pipeline.params.horizon(self.clock.now()).map(|h| h.date_naive());
        let fresh = checkpoints
            .get("")
            .map(|c| (ReadPosition::parse(&c.cursor, today), c.cursor.contains('@')));
        let read_through = fresh.as_ref().map(|(p, _)| p.from);
        let backfilled = checkpoints.get(BACKFILL_PARTITION).map(|c| c.cursor.clone());
        if let Some((position, exact)) = fresh {
            // Where the last read stopped; from the oldest day still
            // pending instead, so its record is read again.
            let lookback = today - Duration::days(PENDING_LOOKBACK_DAYS);
            let (stored, pending) = (feed.stored, feed.pending);
            let now = self.clock.now();
            let rechecked = checkpoints
                .get(PENDING_PARTITION)
                .and_then(|c| c.cursor.parse::<chrono::DateTime<chrono::Utc>>().ok());
            let pending = if rechecked.is_none_or(|at| now - at >= Duration::hours(PENDING_RECHECK_HOURS)) {
                self.sink
                    .call(move |s| s.earliest_pending(stored, pending, lookback))
                    .await??
            } else {
                None
            };
            let (from, start) = match (pending, position.last) {
                // Everything dated before the last record read was read:
                // from its day, or the pending one if older.
                (Some(day), Some(last)) => (day.min(last.date), None),
                (Some(day), None) => (day.min(position.from), None),
                (None, Some(last)) => (position.from, Some(last)),
                (None, None) if exact => (position.from, None),
                // A bare day was read through: from the day before it.
                (None, None) => (position.from - Duration::days(1), None),
            };
            let read = WindowRead {
                direction: Direction::Fresh,
                first_run: false,
                from: Some(from),
                to: today,
                start,
            };
            self.read_window(Turn { pipeline, run_id }, feed, read, progress)
                .await?;
            if pending.is_some() {
                let checkpoint = Checkpoint {
                    pipeline: pipeline.name.clone(),
                    partition: PENDING_PARTITION.into(),
                    cursor: now.to_rfc3339(),
                };
                self.commit_pages(run_id, Vec::new(), vec![checkpoint], progress, false)
                    .await?;
            }
        }
        // A first run backfills from today; a warehouse from before the
        // backfill checkpoint existed, from the day it had read through.
        let oldest = match (backfilled.as_deref(), read_through) {
            (Some(BACKFILL_COMPLETE), _) => return Ok(()),
            (Some(cursor), _) => Backfill::parse(cursor).map(|b| b.reached),
            (None, Some(done)) => Some(done),
            (None, None) => today.succ_opt(),
        };
        let Some(to) = oldest.and_then(|d| d.pred_opt()) else {
            return Ok(());
        };
        if horizon.is_some_and(|h| to < h) {
            return Ok(());
        }
        let first_run = read_through.is_none();
        let read = WindowRead {
            direction: Direction::Backfill,
            first_run,
            from: horizon,
            to,
            start: None,
        };
        self.read_window(Turn { pipeline, run_id }, feed, read, progress)
            .await?;
        if !dates_checked {
            self.dates_are_inclusive(pipeline, feed, run_id, progress).await?;
        }
        Ok(())
    }

    /// Whether the list's `from` and `to` are inclusive, as the wire
    /// contract defines them: a window of one day the warehouse holds
    /// records of must hold some. `Ok(false)` when nothing is stored to ask
    /// about yet; the answer is remembered in a checkpoint.
    ///
    /// # Errors
    /// The service's windows leave out their edge days (or the request failed).
    async fn dates_are_inclusive(
        &self,
        pipeline: &Pipeline,
        feed: &Windows,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<bool, SyncError> {
        let (stored, today) = (feed.stored, self.clock.now().date_naive());
        let Some(day) = self.sink.call(move |s| s.newest_dated(stored, today)).await?? else {
            return Ok(false);
        };
        let route = format!("{}?{}", pipeline.route, (feed.query)(Some(day), day, true, 1, 0));
        // A check, not a read: the day may lie past the pipeline's horizon
        // (a record another pipeline stored), so its record is not stored.
        let page = self.window_page(feed, run_id, &route).await?;
        if page.records.is_empty() && page.total.is_none_or(|t| t == 0) {
            return Err(SyncError::Other(format!(
                "{route}: a window of one day ({day}) holds nothing, though the service served records of that day: its \
                 from/to leave out the edge days, which the wire contract includes, so every window would miss its \
                 first or last day; stopped before reading"
            )));
        }
        let checkpoint = Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: DATES_PARTITION.into(),
            cursor: "inclusive".into(),
        };
        // Its record is not stored; what its envelope said is, as for any answer.
        let mut noted = Rows::new(run_id, &route, page.rows.fetched_at);
        noted.unknown_fields = page.rows.unknown_fields;
        noted.envelope = page.rows.envelope;
        self.commit(run_id, noted, Some(checkpoint), progress).await?;
        Ok(true)
    }

    /// One page of a window read: its rows, records, the service's count and
    /// limit, and a digest of the body that tells a page sent twice.
    async fn window_page(&self, feed: &Windows, run_id: &str, route: &str) -> Result<WindowRows, SyncError> {
        let read = feed.read;
        let fetched = self
            .client
            .get(route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, route, self.clock.now());
                let page = read(&mut rows, body)?;
                Ok(WindowRows {
                    rows,
                    records: page.records,
                    total: page.total,
                    limit: page.limit,
                    digest: {
                        use std::hash::{Hash, Hasher};
                        let mut hasher = std::collections::hash_map::DefaultHasher::new();
                        body.hash(&mut hasher);
                        hasher.finish()
                    },
                })
            })
            .await
            .map_err(upstream_error)?;
        Ok(fetched.value)
    }

    /// Reads every record dated `from` to `to`, a page at a time, each page
    /// committed with how far the read is known complete.
    async fn read_window(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &Windows,
        read: WindowRead,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let direction = read.direction;
        let mut limit = pipeline.params.page_limit.unwrap_or(200);
        let newest_first = direction == Direction::Backfill;
        let mut marks_fresh = read.first_run.then_some(read.to);
        let mut state = ReadState::new(read);
        loop {
            if direction == Direction::Backfill && !self.client.may_backfill() {
                progress.backfill_paused = true;
                return Ok(());
            }
            let asked = state.asked();
            let (from, to) = state.window;
            let route = format!(
                "{}?{}",
                pipeline.route,
                (feed.query)(from, to, newest_first, limit, asked)
            );
            let page = self.window_page(feed, run_id, &route).await?;
            if !page.records.is_empty() && state.previous_digest.replace(page.digest) == Some(page.digest) {
                return Err(SyncError::Other(format!(
                    "{route}: the service sent the same page for two offsets; stopped rather than page through it again"
                )));
            }
            if let Some(window) = state.moved(&page, direction, &route)? {
                tracing::info!(message = "The list moved while it was read; reading on from the last whole day.", %route);
                self.commit(run_id, page.rows, None, progress).await?;
                state.again(window);
                continue;
            }
            let count = page.records.len() as u64;
            // The page's first record is the last one read again, by design.
            let fresh_records = count - u64::from(state.last.is_some() && count > 0);
            if let Some(window) = state.capped(&page, fresh_records, asked, direction, &route)? {
                tracing::info!(message = "An empty page after a full one without a total; reading on from the last day read.", %route);
                self.commit(run_id, page.rows, None, progress).await?;
                state.again(window);
                continue;
            }
            state.take(&page, asked, newest_first, &mut limit);
            // Only the service says where a window ends: an empty page (past
            // the overlap) or the offset at its total. A short page is not the end.
            let done = fresh_records == 0 || page.total.is_some_and(|t| state.offset >= t);
            let mut rows = Some(page.rows);
            let shortfall = match (done, page.total) {
                (true, Some(total)) => {
                    let first = marks_fresh.take().map(|day| fresh_from(pipeline, day));
                    self.commit_pages(
                        run_id,
                        rows.take().into_iter().collect(),
                        first.into_iter().collect(),
                        progress,
                        false,
                    )
                    .await?;
                    self.window_shortfall(pipeline, feed, &state, total).await?
                }
                _ => None,
            };
            let cursor = PageEnd {
                direction,
                done,
                short: shortfall.is_some(),
                in_date_order: state.in_date_order,
                newest_seen: state.newest_seen,
                window: state.window,
                offset: state.offset,
                total: page.total,
                page_last: page.records.last(),
                read_last: state.last.as_ref(),
            }
            .cursor();
            let checkpoint = cursor.map(|cursor| Checkpoint {
                pipeline: pipeline.name.clone(),
                partition: match direction {
                    Direction::Fresh => String::new(),
                    Direction::Backfill => BACKFILL_PARTITION.into(),
                },
                cursor,
            });
            let mut checkpoints: Vec<Checkpoint> = checkpoint.into_iter().collect();
            // A first run's first page is the fresh read too: later runs
            // read forward from the day it began.
            if let Some(day) = marks_fresh.take() {
                checkpoints.push(fresh_from(pipeline, day));
            }
            self.commit_pages(run_id, rows.into_iter().collect(), checkpoints, progress, false)
                .await?;
            if done {
                if let Some(shortfall) = shortfall {
                    tracing::warn!(message = "The window read holds fewer records than the service counts.", %shortfall);
                    progress.shortfalls.push(shortfall);
                }
                return Ok(());
            }
            state.last = page.records.last().cloned();
        }
    }

    /// The window read whole, its last page committed, checked against what
    /// the service counts in it: short, nothing is marked complete and the
    /// next run reads the window again.
    async fn window_shortfall(
        &self,
        pipeline: &Pipeline,
        feed: &Windows,
        state: &ReadState,
        total: u64,
    ) -> Result<Option<Shortfall>, SyncError> {
        let (stored, window) = (feed.stored, state.window);
        let held = self.sink.call(move |s| s.stored_in_window(stored, window)).await??;
        let accounted = held.saturating_add(state.unplaced);
        let (from, to) = window;
        Ok((accounted < total).then(|| Shortfall {
            what: format!(
                "records dated {} to {to} ({})",
                from.map_or_else(|| "the start".to_owned(), |d| d.to_string()),
                pipeline.route
            ),
            expected: total,
            stored: accounted,
        }))
    }
}

/// Where a window read is between pages.
struct ReadState {
    /// The days being read; narrowed when the read starts again.
    window: (Option<NaiveDate>, NaiveDate),
    /// The days asked for first, read whole again when dates cannot say
    /// where to start.
    first_window: (Option<NaiveDate>, NaiveDate),
    /// The offset past the last record read.
    offset: u64,
    /// That record: the next page starts with it.
    last: Option<(String, Option<NaiveDate>)>,
    /// Whether every record so far was dated and in date order: only then
    /// does a page tell which days it completes.
    in_date_order: bool,
    previous_digest: Option<u64>,
    restarts: u32,
    /// Records the warehouse cannot count by date (quarantined or undated):
    /// the window's count against the service's total adds them.
    unplaced: u64,
    /// The newest day any record carried: where a fresh read that was not
    /// in date order goes on from.
    newest_seen: Option<NaiveDate>,
    /// Whether the last page held as many records as asked: an empty page
    /// after it, with no total, may be a cap on offset paging.
    last_page_full: bool,
}

impl ReadState {
    fn new(read: WindowRead) -> ReadState {
        ReadState {
            window: (read.from, read.to),
            first_window: (read.from, read.to),
            offset: read.start.as_ref().map_or(0, |s| s.offset),
            last: read.start.map(|s| (s.key, Some(s.date))),
            in_date_order: true,
            previous_digest: None,
            restarts: 0,
            unplaced: 0,
            newest_seen: None,
            last_page_full: false,
        }
    }

    /// The offset to ask: one back, so the page starts with the last record read.
    fn asked(&self) -> u64 {
        if self.last.is_some() {
            self.offset - 1
        } else {
            self.offset
        }
    }

    /// Reads `window` again from its first record.
    fn again(&mut self, window: (Option<NaiveDate>, NaiveDate)) {
        self.window = window;
        (
            self.offset,
            self.last,
            self.previous_digest,
            self.unplaced,
            self.last_page_full,
        ) = (0, None, None, 0, false);
    }

    /// The window to read again when the list moved under the read (the
    /// page does not start with the last record read): from the last day
    /// known complete, or the whole window when dates cannot tell.
    fn moved(
        &mut self,
        page: &WindowRows,
        direction: Direction,
        route: &str,
    ) -> Result<Option<(Option<NaiveDate>, NaiveDate)>, SyncError> {
        let Some((key, date)) = &self.last else {
            return Ok(None);
        };
        // An empty page ends the window whatever came before it; the count
        // says whether the window is whole.
        if page.records.first().is_none_or(|(first, _)| first == key) {
            return Ok(None);
        }
        self.restarts += 1;
        if self.restarts > MOST_RESTARTS {
            return Err(SyncError::Other(format!(
                "{route}: the list kept moving while it was read ({MOST_RESTARTS} restarts); the next run goes on"
            )));
        }
        let (from, to) = self.window;
        Ok(Some(match (*date, self.in_date_order, direction) {
            (Some(day), true, Direction::Fresh) => (Some(day), to),
            (Some(day), true, Direction::Backfill) => (from, day),
            _ => self.first_window,
        }))
    }

    /// The window to read on in when an empty page comes right after a full
    /// one and the service gives no total: the end of the list, or its cap
    /// on offset paging. Narrowed to the last day read, the read moves past
    /// the cap; the list ends where a read ends on a short page.
    fn capped(
        &self,
        page: &WindowRows,
        fresh_records: u64,
        asked: u64,
        direction: Direction,
        route: &str,
    ) -> Result<Option<(Option<NaiveDate>, NaiveDate)>, SyncError> {
        let Some((_, last_date)) = &self.last else {
            return Ok(None);
        };
        if fresh_records > 0 || asked == 0 || page.total.is_some() || !self.last_page_full {
            return Ok(None);
        }
        narrowed(*last_date, self.in_date_order, direction, self.window)
            .map(Some)
            .ok_or_else(|| {
                SyncError::Other(format!(
                    "{route}: an empty page at offset {asked} right after a full one, and no total: the service may stop \
                     paging by offset there, and the records read cannot narrow the window past it (all of one day, \
                     or not in date order); nothing is marked complete"
                ))
            })
    }

    /// Takes in a page read on from `asked`: the offset past it, its
    /// undated records, the page size the service holds to, and the order.
    fn take(&mut self, page: &WindowRows, asked: u64, newest_first: bool, limit: &mut u32) {
        let count = page.records.len() as u64;
        if count > 0 {
            self.offset = asked + count;
        }
        self.unplaced += page
            .records
            .iter()
            .skip(usize::from(self.last.is_some()))
            .filter(|(_, date)| date.is_none())
            .count() as u64;
        // A service whose pages hold fewer than asked says so in `limit`:
        // the rest of the read asks for that many.
        if let Some(served) = page.limit.filter(|&l| l >= 1 && l < u64::from(*limit)) {
            *limit = served as u32;
        }
        self.last_page_full = count >= u64::from(*limit);
        self.newest_seen = page
            .records
            .iter()
            .filter_map(|(_, d)| *d)
            .chain(self.newest_seen)
            .max();
        self.in_date_order &= in_date_order_after(&page.records, self.last.as_ref().and_then(|l| l.1), newest_first);
    }
}

/// Where a window read stands after a page: what its checkpoint says.
struct PageEnd<'a> {
    direction: Direction,
    /// The service said the window ends here.
    done: bool,
    /// The window read whole holds fewer records than the service counts.
    short: bool,
    in_date_order: bool,
    newest_seen: Option<NaiveDate>,
    window: (Option<NaiveDate>, NaiveDate),
    /// The offset past the page's last record.
    offset: u64,
    total: Option<u64>,
    page_last: Option<&'a (String, Option<NaiveDate>)>,
    /// The last record read before this page.
    read_last: Option<&'a (String, Option<NaiveDate>)>,
}

impl PageEnd<'_> {
    /// The cursor the page commits with; `None` leaves the checkpoint as it is.
    fn cursor(&self) -> Option<String> {
        let (from, to) = self.window;
        match (self.done, self.direction) {
            // Read again from the window's first day, next run.
            (true, Direction::Fresh) if self.short => from.map(|from| format!("{from}@")),
            // The backfill stays where its last page left it.
            (true, Direction::Backfill) if self.short => None,
            // Read whole but not in date order (a service that ignores
            // `sort`): the last record is not the newest, so the next
            // read starts at the newest day seen, from offset 0.
            (true, Direction::Fresh) if !self.in_date_order => self.newest_seen.or(from).map(|day| format!("{day}@")),
            // Where the next run goes on: this window, past this record.
            (_, Direction::Fresh) => match (self.page_last.or(self.read_last), from) {
                (Some((key, Some(date))), Some(from)) => Some(
                    ReadPosition {
                        from,
                        last: Some(LastRead {
                            offset: self.offset,
                            key: key.clone(),
                            date: *date,
                        }),
                    }
                    .to_string(),
                ),
                _ if self.done => Some(to.to_string()),
                _ => None,
            },
            (true, Direction::Backfill) => Some(from.map_or(BACKFILL_COMPLETE.to_owned(), |d| d.to_string())),
            // Days past the last record's are read whole, when in order.
            (false, Direction::Backfill) if self.in_date_order => self
                .page_last
                .and_then(|r| r.1)
                .and_then(|d| d.succ_opt())
                .map(|reached| {
                    Backfill {
                        reached,
                        left: self.total.map(|t| t.saturating_sub(self.offset)),
                    }
                    .to_string()
                }),
            (false, Direction::Backfill) => None,
        }
    }
}

/// Whether `records` keep to date order (newest first or oldest first),
/// each against the one before it, from the `previous` page's last date.
fn in_date_order_after(
    records: &[(String, Option<NaiveDate>)],
    mut previous: Option<NaiveDate>,
    newest_first: bool,
) -> bool {
    let mut in_order = true;
    for (_, date) in records {
        in_order &= match (*date, previous) {
            (None, _) => false,
            (Some(d), Some(p)) => {
                if newest_first {
                    d <= p
                } else {
                    d >= p
                }
            }
            (Some(_), None) => true,
        };
        previous = *date;
    }
    in_order
}

/// The window narrowed to the last day read, which moves an offset read past
/// a cap on offset paging; `None` when that day cannot narrow it (records not
/// in date order, or all of the window's edge day).
fn narrowed(
    last_date: Option<NaiveDate>,
    in_date_order: bool,
    direction: Direction,
    (from, to): (Option<NaiveDate>, NaiveDate),
) -> Option<(Option<NaiveDate>, NaiveDate)> {
    match (last_date, in_date_order, direction) {
        (Some(day), true, Direction::Backfill) if day < to => Some((from, day)),
        (Some(day), true, Direction::Fresh) if from.is_none_or(|f| day > f) => Some((Some(day), to)),
        _ => None,
    }
}

/// The fresh read's checkpoint that reads from `day` next.
fn fresh_from(pipeline: &Pipeline, day: NaiveDate) -> Checkpoint {
    Checkpoint {
        pipeline: pipeline.name.clone(),
        partition: String::new(),
        cursor: format!("{day}@"),
    }
}

/// The record a fresh read stopped after, and its offset past it in the
/// window it was read in.
#[derive(Debug, Clone, PartialEq)]
struct LastRead {
    offset: u64,
    key: String,
    date: NaiveDate,
}

/// The fresh read's checkpoint: `2026-11-20@437@2026-11-25@0000320193-26-000123`
/// (the window's first day, the offset past the last record, its date and
/// key), `2026-11-25@` (read from that day next), or a bare day read
/// through (warehouses from before).
#[derive(Debug, Clone, PartialEq)]
struct ReadPosition {
    from: NaiveDate,
    last: Option<LastRead>,
}

impl ReadPosition {
    /// A cursor that does not parse reads on from `today`.
    fn parse(cursor: &str, today: NaiveDate) -> ReadPosition {
        let mut parts = cursor.splitn(4, '@');
        let day = |s: Option<&str>| s.and_then(|s| s.parse::<NaiveDate>().ok());
        let from = day(parts.next()).unwrap_or(today);
        let last = match (
            parts.next().and_then(|o| o.parse().ok()),
            day(parts.next()),
            parts.next(),
        ) {
            (Some(offset), Some(date), Some(key)) if offset > 0 => Some(LastRead {
                offset,
                key: key.to_owned(),
                date,
            }),
            _ => None,
        };
        ReadPosition { from, last }
    }
}

impl std::fmt::Display for ReadPosition {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match &self.last {
            Some(l) => write!(f, "{}@{}@{}@{}", self.from, l.offset, l.date, l.key),
            None => write!(f, "{}", self.from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_position_reads_back_as_written() {
        let day = |s: &str| s.parse::<NaiveDate>().unwrap();
        let position = ReadPosition {
            from: day("2026-11-20"),
            last: Some(LastRead {
                offset: 437,
                key: "0000320193-26-000123".into(),
                date: day("2026-11-25"),
            }),
        };
        assert_eq!(ReadPosition::parse(&position.to_string(), day("2026-11-28")), position);
        let bare = ReadPosition::parse("2026-11-24", day("2026-11-28"));
        assert_eq!((bare.from, bare.last), (day("2026-11-24"), None));
    }
}
