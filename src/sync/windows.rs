//! The offset-windows engine ([`Fetch::OffsetWindows`](crate::feeds::Fetch::OffsetWindows)):
//! a market-wide list read one day at a time, oldest first, each day paged
//! by offset.

use chrono::{Duration, NaiveDate};

use super::{Progress, SyncError, Syncer, upstream_error};
use crate::feeds::Windows;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::Access;

/// How far back a stored record still pending (a gated headline) pulls the
/// next window: the service fills it in within hours.
pub(super) const PENDING_LOOKBACK_DAYS: i64 = 7;
/// Reads of one day whose total keeps moving before it is taken as read.
const DAY_ATTEMPTS: u32 = 3;

/// A page mapped to rows.
struct WindowRows {
    rows: Rows,
    total: Option<u64>,
    count: usize,
    /// The body's hash: a page that repeats the one before it ignored the offset.
    digest: u64,
}

impl Syncer {
    /// A day whose `total` moved while it was read is read again: arrivals
    /// can land anywhere in an offset order, and a repeat is harmless (rows
    /// are keyed).
    pub(super) async fn run_windows(
        &self,
        pipeline: &Pipeline,
        feed: &Windows,
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
        let lookback = today - Duration::days(PENDING_LOOKBACK_DAYS);
        let (stored, pending) = (feed.stored, feed.pending);
        let pending = self
            .sink
            .call(move |s| s.earliest_pending(stored, pending, lookback))
            .await??;
        if let Some(day) = pending {
            start = start.min(day);
        }
        let read = feed.read;
        let mut day = start;
        while day <= today {
            let mut attempt = 0;
            loop {
                attempt += 1;
                let mut offset = 0u64;
                let mut first_total = None;
                let mut previous = None;
                let settled = loop {
                    let route = format!("{}?{}", pipeline.route, (feed.query)(day, limit, offset));
                    let fetched = self
                        .client
                        .get(&route, Access::Key, |body| {
                            let mut rows = Rows::new(run_id, &route, self.clock.now());
                            let page = read(&mut rows, body)?;
                            Ok(WindowRows {
                                rows,
                                total: page.total,
                                count: page.count,
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
                    let page = fetched.value;
                    if page.count > 0 && previous.replace(page.digest) == Some(page.digest) {
                        return Err(SyncError::Other(format!(
                            "{route}: the service sent the same page for offsets {} and {offset}; stopped rather than page through it again",
                            offset.saturating_sub(page.count as u64)
                        )));
                    }
                    first_total.get_or_insert(page.total);
                    offset += page.count as u64;
                    let done = page.count == 0 || page.total.is_none_or(|t| offset >= t);
                    // The day is complete once its total held still while it was
                    // read (or after the last attempt): its last page carries it.
                    let settled = done && (first_total == Some(page.total) || attempt == DAY_ATTEMPTS);
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
                tracing::info!(message = "Day changed while read; reading it again.", %day);
            }
            day += Duration::days(1);
        }
        Ok(())
    }
}
