//! The commit side of a run: what the fetch side hands over is committed in
//! groups, with the checkpoints that cover it, while the next responses are
//! fetched; the groups follow the sink's [`CommitPolicy`].

use std::sync::Arc;

use super::packed::PackedPage;
use super::{Progress, SyncError, Syncer};
use crate::records::Rows;
use crate::sink::policy::CommitPolicy;
use crate::sink::{Checkpoint, Commit, CommitChain, CommitStats, QueuedCommit, SinkError, TableBatch, prepare_batches};

/// What a fetch side hands to [`Syncer::commit_as_fetched`]: one response's
/// rows and the checkpoints they complete, or the error that ends the run.
pub(super) type FetchedRows = Result<(Rows, Vec<Checkpoint>), SyncError>;

/// One response on its way to the commit side.
pub(super) enum Fetched {
    Rows(Rows),
    /// A tape page, mapped to rows only when its group is prepared.
    Packed(PackedPage),
}

impl Fetched {
    /// Rows it holds, or for a packed page, the items it will map to.
    fn row_count(&self) -> usize {
        match self {
            Fetched::Rows(rows) => rows.row_count(),
            Fetched::Packed(page) => page.items(),
        }
    }

    fn into_rows(self) -> Rows {
        match self {
            Fetched::Rows(rows) => rows,
            Fetched::Packed(page) => page.unpack(),
        }
    }
}

/// What goes down the channel: a response or the error that ends the run,
/// with the room it takes.
type Sent = (Result<(Fetched, Vec<Checkpoint>), SyncError>, u32);

/// The fetch side's end of [`Syncer::commit_as_fetched`].
#[derive(Clone)]
pub(super) struct FetchedTx {
    tx: tokio::sync::mpsc::Sender<Sent>,
    /// Room left, in KiB, for rows fetched and not yet committed.
    room: Arc<tokio::sync::Semaphore>,
    /// All the room there is: one fetch larger than it waits for all of it.
    room_kib: u32,
}

/// Hands `fetched` to the commit side; false when the fetching must stop
/// (it was an error, or the commit side stopped on one). Waits while the
/// rows fetched and not yet committed fill [`CommitPolicy::in_flight_kib`].
pub(super) async fn send_fetched(done: &FetchedTx, fetched: FetchedRows) -> bool {
    let bytes = fetched.as_ref().map_or(0, |(rows, _)| rows.value_bytes());
    send(
        done,
        fetched.map(|(rows, covered)| (Fetched::Rows(rows), covered)),
        bytes,
    )
    .await
}

/// Hands a packed tape page, and the checkpoint of the cursor after it, to
/// the commit side, as [`send_fetched`] does. It takes [`PACKED_ROOM_SHARE`]
/// times its packed bytes of the room.
pub(super) async fn send_packed(done: &FetchedTx, page: PackedPage, checkpoint: Checkpoint) -> bool {
    let bytes = page.packed_bytes().saturating_mul(PACKED_ROOM_SHARE);
    send(done, Ok((Fetched::Packed(page), vec![checkpoint])), bytes).await
}

async fn send(done: &FetchedTx, fetched: Result<(Fetched, Vec<Checkpoint>), SyncError>, bytes: usize) -> bool {
    let stop = fetched.is_err();
    let kib = u32::try_from(bytes / 1024).unwrap_or(u32::MAX).min(done.room_kib);
    let Ok(permit) = done.room.acquire_many(kib).await else {
        return false;
    };
    // Given back by the commit side once these rows are committed.
    permit.forget();
    done.tx.send((fetched, kib)).await.is_ok() && !stop
}

/// A blocking task's result: its panic goes on in the caller; `None` when
/// it was cancelled, which only a runtime shutting down does.
pub(super) fn unless_cancelled<T>(joined: Result<T, tokio::task::JoinError>) -> Option<T> {
    match joined {
        Ok(value) => Some(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// Whether the fetching goes on after one step of it (a company, a tape, a
/// country) that returned whether to; an error is handed to the commit side,
/// which ends the run.
pub(super) async fn goes_on(done: &FetchedTx, step: Result<bool, SyncError>) -> bool {
    match step {
        Ok(go_on) => go_on,
        Err(e) => {
            send_fetched(done, Err(e)).await;
            false
        }
    }
}

impl Syncer {
    /// How this warehouse wants its commits grouped.
    pub(super) fn policy(&self) -> CommitPolicy {
        CommitPolicy::for_memory_limit_mb(self.config.warehouse.memory_limit_mb)
    }

    /// Commits mapped rows, the request log so far and the checkpoint in one transaction.
    pub(super) async fn commit(
        &self,
        run_id: &str,
        rows: Rows,
        checkpoint: Option<Checkpoint>,
        progress: &mut Progress,
    ) -> Result<(), SinkError> {
        self.commit_pages(run_id, vec![rows], checkpoint.into_iter().collect(), progress, false)
            .await
    }

    /// Commits several pages' rows, the request log so far and the checkpoints
    /// that cover them in one transaction, each table merged once; with
    /// `hold`, a transaction the sink may keep open for the next pages.
    pub(super) async fn commit_pages(
        &self,
        run_id: &str,
        pages: Vec<Rows>,
        checkpoints: Vec<Checkpoint>,
        progress: &mut Progress,
        hold: bool,
    ) -> Result<(), SinkError> {
        let commit = self.prepare_commit(run_id, pages, checkpoints, progress).await?;
        let stats = if hold {
            self.sink.commit_held(commit).await?
        } else {
            self.sink.commit(commit).await?
        };
        progress.rows_written += stats.rows_written;
        Ok(())
    }

    /// Several pages' rows as one commit: one batch per table, the request
    /// log so far, and the checkpoints that cover them.
    async fn prepare_commit(
        &self,
        run_id: &str,
        pages: Vec<Rows>,
        checkpoints: Vec<Checkpoint>,
        progress: &mut Progress,
    ) -> Result<Commit, SinkError> {
        let several = pages.len() > 1;
        let mut batches = Vec::new();
        for mut rows in pages {
            progress.quarantined += rows.quarantined.len() as u64;
            // A few routes are enough to say where to look.
            for q in rows.quarantined.iter().take(4) {
                if progress.quarantined_from.len() < 4 {
                    progress.quarantined_from.insert(q.route.clone());
                }
            }
            progress.problems.extend(rows.withheld_replacements());
            for (what, about, shared) in std::mem::take(&mut rows.reported) {
                progress.reported.entry((what, shared)).or_default().push(about);
            }
            batches.extend(rows.into_batches()?);
        }
        // One batch per table, as one page's rows already are. Several
        // pages' are copied together on a blocking thread: on this one it
        // held up the fetching of the next news page (forty pages' rows a
        // group), on the writer's it slowed a price backfill's bottleneck.
        // Whether their keys are distinct is found there too, for the same reason.
        if several {
            let coalesced = tokio::task::spawn_blocking(move || {
                let mut batches = TableBatch::coalesce(batches)?;
                prepare_batches(&mut batches)?;
                Ok::<_, SinkError>(batches)
            })
            .await;
            batches = unless_cancelled(coalesced).ok_or(SinkError::Closed)??;
        }
        batches.extend(self.bookkeeping(run_id)?);
        Ok(Commit { batches, checkpoints })
    }

    /// Runs `fetch`, which sends what it fetched in order, while committing
    /// what it sent: the warehouse commits while the next responses are
    /// requested, and the ones that arrived meanwhile commit together in one
    /// transaction (at most `group` responses) with their checkpoints. A crash
    /// loses at most the group in flight, read again on resume. The fetch side
    /// returns what it noted (404s), added to `progress`.
    pub(super) async fn commit_as_fetched<F: std::future::Future<Output = Progress>>(
        &self,
        run_id: &str,
        progress: &mut Progress,
        group: usize,
        fetch: impl FnOnce(FetchedTx) -> F,
    ) -> Result<(), SyncError> {
        let ahead = group * self.policy().groups_ahead;
        self.commit_as_sent(run_id, progress, group, ahead, fetch).await
    }

    /// How many of a tape's packed pages may wait for the commit side:
    /// [`PACKED_ROOM_SHARE`] times the count of other responses, so that they
    /// fill the room. Other responses keep the smaller count: their rows hold
    /// more than the room counts (builders' spare capacity), so the larger
    /// count would raise a no-change run's peak.
    pub(super) fn packed_pages_ahead(&self, group: usize) -> usize {
        group * self.policy().groups_ahead * PACKED_ROOM_SHARE
    }

    /// [`Syncer::commit_as_fetched`] with at most `ahead` responses sent and
    /// not yet taken by the commit side.
    pub(super) async fn commit_as_sent<F: std::future::Future<Output = Progress>>(
        &self,
        run_id: &str,
        progress: &mut Progress,
        group: usize,
        ahead: usize,
        fetch: impl FnOnce(FetchedTx) -> F,
    ) -> Result<(), SyncError> {
        let policy = self.policy();
        let (tx, done_rx) = tokio::sync::mpsc::channel(ahead);
        let room_kib = policy.in_flight_kib;
        let room = Arc::new(tokio::sync::Semaphore::new(room_kib as usize));
        let fetch = fetch(FetchedTx {
            tx,
            room: room.clone(),
            room_kib,
        });
        let commit = async {
            let committed = self.commit_fetched(run_id, progress, done_rx, group, &room).await;
            // Ends a fetch side waiting for room that a failed commit will never give back.
            room.close();
            committed
        };
        let (noted, committed) = tokio::join!(fetch, commit);
        progress.absorb(noted);
        // Whatever stopped the fetching (a quota wall, a refused key), each
        // commit held so far is whole: it lands. After a failed commit
        // nothing is held, and this does nothing.
        let landed = self.sink.commit_held_now().await.map_err(SyncError::from);
        committed.and(landed)
    }

    /// The commit side of [`Syncer::commit_as_fetched`]. Owns the receiver: a
    /// failed commit drops it, which stops the fetching (borrowed, it would
    /// outlive the failure and leave the fetch side waiting for room in a full
    /// channel forever).
    ///
    /// While the writer loads one group, the next is gathered, prepared and
    /// queued behind it, so the writer goes from one to the next without
    /// waiting for either.
    pub(super) async fn commit_fetched(
        &self,
        run_id: &str,
        progress: &mut Progress,
        mut done_rx: tokio::sync::mpsc::Receiver<Sent>,
        group: usize,
        room: &tokio::sync::Semaphore,
    ) -> Result<(), SyncError> {
        let policy = self.policy();
        let chain = CommitChain::default();
        // The group on the writer, with the room its rows take until it lands.
        let mut writing: Option<(QueuedCommit, u32)> = None;
        loop {
            let first = tokio::select! {
                received = done_rx.recv() => received,
                landed = landing(&mut writing) => {
                    landed_in(landed, room, progress)?;
                    continue;
                }
            };
            let Some(first) = first else {
                break;
            };
            let mut pages = Vec::new();
            let mut covered = Vec::new();
            let mut failure = None;
            let mut kib = 0;
            let mut group_rows = 0;
            let mut all_bulk = true;
            let mut next = Some(first);
            while let Some((fetched, size)) = next.take() {
                kib += size;
                match fetched {
                    Ok((fetched, checkpoints)) => {
                        let rows = fetched.row_count();
                        group_rows += rows;
                        all_bulk &= rows >= policy.bulk_response_rows;
                        pages.push(fetched);
                        covered.extend(checkpoints);
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
                if pages.len() >= group {
                    break;
                }
                next = done_rx.try_recv().ok();
                // A group of small bulk responses waits briefly for those on
                // their way: its rows are not visible before its held
                // transaction lands anyway, and each load has a fixed cost of
                // a few statements, so loads of a few pages each would keep
                // the writer busy and take the core it shares from the
                // fetching. Two price histories are enough: the
                // writer is what they wait for, and it must not idle. The
                // group on the writer gives its room back as it lands, which
                // the fetch side may be waiting for.
                if next.is_none() && all_bulk && group_rows < policy.bulk_group_rows {
                    let waited = tokio::time::sleep(policy.bulk_group_wait);
                    tokio::pin!(waited);
                    next = loop {
                        tokio::select! {
                            received = done_rx.recv() => break received,
                            () = &mut waited => break None,
                            landed = landing(&mut writing) => landed_in(landed, room, progress)?,
                        }
                    };
                }
            }
            if pages.is_empty() {
                room.add_permits(kib as usize);
            } else {
                let pages = unpack(pages).await?;
                let commit = self.prepare_commit(run_id, pages, covered, progress).await?;
                let queued = self.sink.queue_commit(commit, all_bulk, &chain)?;
                if let Some(previous) = writing.replace((queued, kib)) {
                    land(previous, room, progress).await?;
                }
            }
            if let Some(e) = failure {
                if let Some(last) = writing.take() {
                    land(last, room, progress).await?;
                }
                return Err(e);
            }
        }
        if let Some(last) = writing.take() {
            land(last, room, progress).await?;
        }
        Ok(())
    }
}

/// How many times its packed bytes a packed tape page takes of the room.
/// Packed, a news page is about a tenth of its rows' bytes, and its rows,
/// once mapped on the commit side, are not counted: at four, packed pages
/// fill at most a quarter of the room: more would raise the peak for little
/// of the wall.
const PACKED_ROOM_SHARE: usize = 4;

/// A group's responses as rows: its packed pages mapped in order, on a
/// blocking thread, while the writer loads the group before it.
async fn unpack(pages: Vec<Fetched>) -> Result<Vec<Rows>, SyncError> {
    if !pages.iter().any(|p| matches!(p, Fetched::Packed(_))) {
        return Ok(pages.into_iter().map(Fetched::into_rows).collect());
    }
    let unpacked = tokio::task::spawn_blocking(move || pages.into_iter().map(Fetched::into_rows).collect()).await;
    unless_cancelled(unpacked).ok_or_else(|| SyncError::Other("mapping tape pages: cancelled".into()))
}

/// The group on the writer once it lands, with the room it took; never,
/// when no group is there.
async fn landing(writing: &mut Option<(QueuedCommit, u32)>) -> (Result<CommitStats, SinkError>, u32) {
    match writing {
        Some((queued, _)) => {
            let landed = queued.await;
            let kib = writing.take().map_or(0, |(_, kib)| kib);
            (landed, kib)
        }
        None => std::future::pending().await,
    }
}

/// Waits for a group on the writer to land, then counts it as [`landed_in`] does.
async fn land(
    (queued, kib): (QueuedCommit, u32),
    room: &tokio::sync::Semaphore,
    progress: &mut Progress,
) -> Result<(), SyncError> {
    landed_in((queued.await, kib), room, progress)
}

/// Counts a landed group's rows and gives its room back to the fetch side.
fn landed_in(
    (landed, kib): (Result<CommitStats, SinkError>, u32),
    room: &tokio::sync::Semaphore,
    progress: &mut Progress,
) -> Result<(), SyncError> {
    progress.rows_written += landed?.rows_written;
    room.add_permits(kib as usize);
    Ok(())
}
