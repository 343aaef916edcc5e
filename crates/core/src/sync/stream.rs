//! A tape's live stream: Server-Sent Events whose `items` frames each carry
//! a page of the tape ([`Fetch::Cursor`]). Each frame commits with the cursor
//! after it (the pipeline's `stream` partition), and every connection starts
//! from the last committed cursor with `after` and `changedSince`, so a
//! server close, a dropped link or a crash loses nothing and repeats nothing.

use std::time::{Duration, Instant};

use backon::{BackoffBuilder, ExponentialBuilder};
use eventsource_stream::Eventsource;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::{PipelineOutcome, Progress, RunStatus, SyncError, Syncer, upstream_error};
use crate::bookkeeping::{STREAM_PARTITION, TapeCursor};
use crate::feeds::{Fetch, Tape};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::upstream::{UpstreamError, encode};

/// Frames read ahead while a commit runs, at most (each holds up to 200 items).
const MAX_FRAMES_PER_COMMIT: usize = 50;

/// A clean close sooner than this, with no frame, is treated as a failure
/// (backoff), so a server that closes at once is not hammered.
const SHORT_CONNECTION: Duration = Duration::from_secs(1);

/// The first wait after the service refused the stream (a 4xx), doubling
/// with each refusal up to [`REFUSED_LONGEST_WAIT`]: each try is a request
/// of the quota, and the scheduled poll keeps the tape meanwhile.
const REFUSED_FIRST_WAIT: Duration = Duration::from_secs(15 * 60);
const REFUSED_LONGEST_WAIT: Duration = Duration::from_secs(24 * 3600);

/// What a stream session did, for its run row, tests and the lag benchmark.
#[derive(Debug, Default, Clone)]
pub struct StreamReport {
    pub connections: u64,
    pub frames: u64,
    /// Transactions the frames took: fewer than frames when they came in bursts.
    pub commits: u64,
    /// Items delivered as arrivals.
    pub new_items: u64,
    /// Items delivered again (flagged `rewritten`) for a rewritten headline.
    pub rewrites: u64,
    /// Connections cut mid-stream (not closed by the server).
    pub dropped: u64,
    /// Per first delivery, seconds from the service's first sighting to the
    /// commit; kept only when asked for (a daemon runs for months).
    pub lags: Option<Vec<f64>>,
}

/// What every step of a stream session is handed: the pipeline and its
/// tape, the run, and the token that stops it.
#[derive(Clone, Copy)]
struct Listener<'a> {
    pipeline: &'a Pipeline,
    tape: &'a Tape,
    run_id: &'a str,
    shutdown: &'a CancellationToken,
}

/// How one connection ended.
enum Ended {
    Shutdown,
    /// The server ended the response (it does so after about 280 s).
    Closed,
    Dropped(String),
}

impl Syncer {
    /// Keeps `pipeline`'s stream connected until `shutdown`, committing every
    /// frame with its cursor. A server close reconnects at once; a failure
    /// backs off (jittered, up to a minute). A frame in flight at shutdown is
    /// abandoned, never half committed.
    ///
    /// # Errors
    /// A refused key, an unusable stream route, or a warehouse that cannot
    /// be written; network trouble and exhausted quota are waited out.
    pub async fn run_stream(
        &self,
        pipeline: &Pipeline,
        shutdown: &CancellationToken,
        keep_lags: bool,
    ) -> Result<StreamReport, SyncError> {
        let (Fetch::Cursor(tape), Some(stream_route)) = (&pipeline.feed.fetch, pipeline.params.stream_route.clone())
        else {
            return Err(SyncError::Other(format!(
                "pipeline {} has no params.stream_route: nothing to stream",
                pipeline.name
            )));
        };
        let run_id = self.new_run_id();
        let started_at = self.clock.now();
        let sent_before = self.client.requests_sent();
        let mut progress = Progress::default();
        let mut report = StreamReport {
            lags: keep_lags.then(Vec::new),
            ..StreamReport::default()
        };
        let result = self
            .stream_until(
                Listener {
                    pipeline,
                    tape,
                    run_id: &run_id,
                    shutdown,
                },
                &stream_route,
                &mut progress,
                &mut report,
            )
            .await;
        let outcome = PipelineOutcome {
            pipeline: format!("{}:{STREAM_PARTITION}", pipeline.name),
            status: match &result {
                Ok(()) if progress.quarantined == 0 && progress.problems.is_empty() => RunStatus::Ok,
                Ok(()) => RunStatus::Partial,
                Err(_) => RunStatus::Failed,
            },
            requests: self.client.requests_sent() - sent_before,
            rows_written: progress.rows_written,
            quarantined: progress.quarantined,
            shortfall: 0,
            unreadable: 0,
            not_served: Vec::new(),
            restated: Vec::new(),
            error: result.as_ref().err().map(ToString::to_string),
            resumes: false,
        };
        self.record_run(&run_id, &outcome, started_at).await?;
        result.map(|()| report)
    }

    async fn stream_until(
        &self,
        listener: Listener<'_>,
        stream_route: &str,
        progress: &mut Progress,
        report: &mut StreamReport,
    ) -> Result<(), SyncError> {
        let Listener {
            pipeline,
            tape,
            shutdown,
            ..
        } = listener;
        let checkpoints = self.checkpoints_of(pipeline).await?;
        // Its own position; the first time, the poll's, so that the stream
        // continues the tape without a gap; with neither, from now on.
        let own = checkpoints.get(STREAM_PARTITION).or_else(|| checkpoints.get(""));
        let mut cursor = TapeCursor::read(own, STREAM_PARTITION);
        // The backfill is the poll's business.
        cursor.stream_only();
        let filters = (tape.filters)(&self.config);
        let new_backoff = || {
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(60))
                .with_jitter()
                .without_max_times()
                .build()
        };
        let mut backoff = new_backoff();
        let new_refused_backoff = || {
            ExponentialBuilder::default()
                .with_min_delay(REFUSED_FIRST_WAIT)
                .with_max_delay(REFUSED_LONGEST_WAIT)
                .without_max_times()
                .build()
        };
        let mut refused = new_refused_backoff();
        while !shutdown.is_cancelled() {
            let route = match (&cursor.after, &cursor.changed_since) {
                (Some(after), Some(since)) => format!(
                    "{stream_route}?after={}&changedSince={}{filters}",
                    encode(after),
                    encode(since)
                ),
                (Some(after), None) => format!("{stream_route}?after={}{filters}", encode(after)),
                // Nothing read yet: from now on; the poll's backfill covers the past.
                (None, _) if filters.is_empty() => stream_route.to_owned(),
                (None, _) => format!("{stream_route}?{}", filters.trim_start_matches('&')),
            };
            let opened = tokio::select! {
                opened = self.client.open_stream(&route) => opened,
                () = shutdown.cancelled() => break,
            };
            let wait = match opened {
                Ok(response) => {
                    report.connections += 1;
                    if report.connections == 1 {
                        tracing::info!(message = "Live stream connected.", %route);
                    } else {
                        tracing::debug!(message = "Live stream reconnected.", %route);
                    }
                    let connected = Instant::now();
                    let after_before = cursor.after.clone();
                    let ended = self
                        .read_frames(listener, response, &route, &mut cursor, progress, report)
                        .await?;
                    // Only frames that moved the cursor count: a server that
                    // repeats a frame and closes must not be asked again at once.
                    let delivered = cursor.after != after_before;
                    if delivered {
                        backoff = new_backoff();
                    }
                    refused = new_refused_backoff();
                    match ended {
                        Ended::Shutdown => break,
                        Ended::Closed if delivered || connected.elapsed() >= SHORT_CONNECTION => {
                            crate::metrics::stream_connection("closed");
                            tracing::debug!(message = "Stream closed by the server; reconnecting.");
                            None
                        }
                        Ended::Closed => {
                            crate::metrics::stream_connection("closed_early");
                            backoff.next()
                        }
                        Ended::Dropped(why) => {
                            crate::metrics::stream_connection("dropped");
                            tracing::warn!(message = "Stream connection dropped; reconnecting from the last commit.", error = %why);
                            if delivered { None } else { backoff.next() }
                        }
                    }
                }
                Err(UpstreamError::QuotaExhausted { reset_at, window, .. }) => {
                    crate::metrics::stream_connection("quota_exhausted");
                    tracing::warn!(message = "Quota spent; the stream resumes when it resets.", %window, %reset_at);
                    (reset_at - self.clock.now()).to_std().ok()
                }
                Err(e @ UpstreamError::Transient { .. }) => {
                    crate::metrics::stream_connection("refused");
                    tracing::warn!(message = "Cannot connect the stream; retrying.", error = %e);
                    backoff.next()
                }
                // A refusal (400, 402, 403, 404, ...) will not change in a
                // minute: asked again later and later, up to daily, while
                // the scheduled poll keeps the tape.
                Err(e) if e.is_refusal() => {
                    crate::metrics::stream_connection("refused");
                    let wait = refused.next();
                    tracing::warn!(
                        message = "The service refused the stream; the poll keeps the tape, the stream is asked again later.",
                        error = %e,
                        wait_secs = wait.map_or(0, |w| w.as_secs())
                    );
                    wait
                }
                Err(UpstreamError::Stopped) => break,
                Err(e) => return Err(upstream_error(e)),
            };
            if let Some(wait) = wait {
                tokio::select! {
                    () = self.clock.sleep(wait) => {}
                    () = shutdown.cancelled() => break,
                }
            }
        }
        Ok(())
    }

    /// Reads one connection's frames, committing each with its cursor. The
    /// frames that arrived while a commit ran go into the next commit
    /// together (a group commit), so a burst costs one transaction, not one
    /// per frame, and the lag stays near one commit's time.
    async fn read_frames(
        &self,
        listener: Listener<'_>,
        response: reqwest::Response,
        route: &str,
        cursor: &mut TapeCursor,
        progress: &mut Progress,
        report: &mut StreamReport,
    ) -> Result<Ended, SyncError> {
        let shutdown = listener.shutdown;
        let max_frame =
            usize::try_from(self.config.upstream.max_frame_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX);
        let mut events = frames_within(response.bytes_stream(), max_frame).eventsource();
        let mut buffered: Vec<String> = Vec::new();
        let mut ended: Option<Ended> = None;
        loop {
            // Checked here too: while frames keep coming the buffer is never
            // empty. What is buffered is not committed yet; the next
            // connection asks for it again.
            if shutdown.is_cancelled() {
                return Ok(Ended::Shutdown);
            }
            while buffered.is_empty() && ended.is_none() {
                let next = tokio::select! {
                    next = events.next() => next,
                    () = shutdown.cancelled() => return Ok(Ended::Shutdown),
                };
                take_event(next, &mut buffered, &mut ended);
            }
            if buffered.is_empty() {
                if let Some(Ended::Dropped(_)) = &ended {
                    report.dropped += 1;
                }
                return Ok(ended.take().unwrap_or(Ended::Closed));
            }
            let frames = std::mem::take(&mut buffered);
            // Keep reading while the commit runs: what arrives meanwhile is
            // the next commit's, however many frames it is.
            let committed = {
                let commit = self.commit_frames(listener, &frames, route, cursor, progress, report);
                tokio::pin!(commit);
                loop {
                    tokio::select! {
                        done = &mut commit => break done,
                        next = events.next(), if ended.is_none() && buffered.len() < MAX_FRAMES_PER_COMMIT => {
                            take_event(next, &mut buffered, &mut ended);
                        }
                    }
                }
            };
            if let Err(why) = committed? {
                return Ok(Ended::Dropped(why));
            }
        }
    }

    /// Commits `frames` in one transaction with the cursor after the last.
    /// A frame that does not parse is not committed, nor any after it: the
    /// next connection asks for them again (the error says why).
    async fn commit_frames(
        &self,
        Listener {
            pipeline, tape, run_id, ..
        }: Listener<'_>,
        frames: &[String],
        route: &str,
        cursor: &mut TapeCursor,
        progress: &mut Progress,
        report: &mut StreamReport,
    ) -> Result<Result<(), String>, SyncError> {
        let mut rows = Rows::new(run_id, route, self.clock.now());
        let mut first_seen = Vec::new();
        let mut taken = 0;
        let mut bad = None;
        for data in frames {
            let head = match (tape.head)(data.as_bytes(), true) {
                Ok(head) => head,
                Err(e) => {
                    bad = Some(format!("a frame did not parse: {e}"));
                    break;
                }
            };
            // As the poll holds a forward page: a frame that skips or
            // repeats items could lose those between, so it and what
            // follows are not stored, and the next connection asks again.
            // Every frame is a forward page, the first too: oldest first.
            let after = cursor.after.as_deref().unwrap_or_default();
            if let Err(why) = super::cursor::follows_on(after, &head) {
                let why = format!("{route}: a frame does not follow on from after={after}: {why}");
                if !progress.problems.contains(&why) {
                    progress.problems.push(why.clone());
                }
                bad = Some(why);
                break;
            }
            let arrivals = match (tape.read)(&mut rows, data.as_bytes(), None) {
                Ok(arrivals) => arrivals,
                Err(e) => {
                    bad = Some(format!("a frame did not parse: {e}"));
                    break;
                }
            };
            for arrival in arrivals {
                if arrival.rewritten {
                    report.rewrites += 1;
                } else {
                    first_seen.push(arrival.first_seen_at);
                }
            }
            cursor.after = head.latest_id.or(cursor.after.take());
            cursor.changed_since = head.server_time.or(cursor.changed_since.take());
            taken += 1;
        }
        if taken > 0 {
            let checkpoint = cursor.checkpoint(&pipeline.name, STREAM_PARTITION);
            self.commit(run_id, rows, Some(checkpoint), progress).await?;
            let committed_at = self.clock.now();
            report.frames += taken;
            report.commits += 1;
            report.new_items += first_seen.len() as u64;
            for seen in first_seen.into_iter().flatten() {
                let lag = (committed_at - seen).num_microseconds().unwrap_or(0) as f64 / 1e6;
                crate::metrics::stream_lag(lag);
                if let Some(lags) = &mut report.lags {
                    lags.push(lag);
                }
            }
        }
        Ok(bad.map_or(Ok(()), Err))
    }
}

/// The stream's bytes, cut with an error once one frame (the bytes since the
/// last blank line) passes `limit`: the SSE parser would hold a frame that
/// never ends in memory whole.
fn frames_within(
    bytes: impl futures::Stream<Item = Result<bytes::Bytes, reqwest::Error>>,
    limit: usize,
) -> impl futures::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    #[derive(Default)]
    struct Scan {
        frame: usize,
        line: usize,
        after_cr: bool,
        failed: bool,
    }
    bytes.scan(Scan::default(), move |scan, chunk| {
        let item = if scan.failed {
            None
        } else {
            match chunk {
                Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
                Ok(chunk) => {
                    for &b in chunk.iter() {
                        match b {
                            b'\n' if scan.after_cr => scan.after_cr = false,
                            b'\n' | b'\r' => {
                                if scan.line == 0 {
                                    scan.frame = 0;
                                }
                                scan.line = 0;
                                scan.after_cr = b == b'\r';
                            }
                            _ => {
                                scan.after_cr = false;
                                scan.line += 1;
                                scan.frame += 1;
                            }
                        }
                    }
                    if scan.frame > limit {
                        scan.failed = true;
                        Some(Err(std::io::Error::other(format!(
                            "a stream frame passed {} MiB (upstream.max_frame_mb)",
                            limit >> 20
                        ))))
                    } else {
                        Some(Ok(chunk))
                    }
                }
            }
        };
        std::future::ready(item)
    })
}

/// Files one stream event: a frame's data, or how the connection ended.
fn take_event(
    next: Option<Result<eventsource_stream::Event, impl std::fmt::Display>>,
    buffered: &mut Vec<String>,
    ended: &mut Option<Ended>,
) {
    match next {
        None => *ended = Some(Ended::Closed),
        Some(Err(e)) => *ended = Some(Ended::Dropped(e.to_string())),
        Some(Ok(event)) if event.event == "items" => buffered.push(event.data),
        // Other event names are not in the contract; a newer service may add some.
        Some(Ok(_)) => {}
    }
}
