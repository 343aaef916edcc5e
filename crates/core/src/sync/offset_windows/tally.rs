//! The tally step of the offset-windows engine: a list that counts a day's
//! records by kind (the wire's `counts=1`) is asked that count once for each
//! day after it closed, and the day's stored records are held against it.

use chrono::{Duration, NaiveDate};

use super::super::{Progress, Shortfall, SyncError, Syncer, Turn, upstream_error};
use crate::bookkeeping::{BACKFILL_COMPLETE, BACKFILL_PARTITION, Backfill, TALLY_PARTITION, TALLY_UNSERVED};
use crate::feeds::{DEFAULT_TALLY_DAYS, Tally, Windows};
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::Access;

/// Days after a UTC day begins that it counts as closed: by then it is over
/// in every time zone the service may date filings in.
const CLOSED_AFTER_DAYS: i64 = 2;

impl Syncer {
    /// Asks the tally of each closed day not asked before (`tally_days`
    /// back, within the horizon and the days the list holds read whole),
    /// keeps it with the checkpoint past it, and holds the day's stored
    /// records against it. Days the backfill reaches only after they left
    /// `tally_days` are not asked: the tally is a check of recent days.
    pub(super) async fn tally_closed_days(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &Windows,
        tally: &'static Tally,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let back = pipeline.params.tally_days.unwrap_or(DEFAULT_TALLY_DAYS);
        if back == 0 {
            return Ok(());
        }
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let asked_through = match checkpoints.get(TALLY_PARTITION).map(|c| c.cursor.as_str()) {
            Some(TALLY_UNSERVED) => return Ok(()),
            Some(cursor) => cursor.parse::<NaiveDate>().ok(),
            None => None,
        };
        // The list holds every day from the backfill's reach on.
        let read_from = match checkpoints.get(BACKFILL_PARTITION).map(|c| c.cursor.as_str()) {
            Some(BACKFILL_COMPLETE) => None,
            Some(cursor) => match Backfill::parse(cursor) {
                Some(b) => Some(b.reached),
                None => return Ok(()),
            },
            None => return Ok(()),
        };
        let now = self.clock.now();
        let newest = now.date_naive() - Duration::days(CLOSED_AFTER_DAYS);
        let oldest = [
            Some(newest - Duration::days(i64::from(back) - 1)),
            pipeline.params.horizon(now).map(|h| h.date_naive()),
            asked_through.and_then(|d| d.succ_opt()),
            read_from,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(newest);
        let stored = feed.stored;
        for day in oldest.iter_days().take_while(|d| *d <= newest) {
            if !self.client.may_backfill() {
                return Ok(());
            }
            let before = self.sink.call(move |s| s.tallied_kinds(stored, tally, day)).await??;
            let route = format!("{}?{}", pipeline.route, (tally.query)(day));
            let read = tally.read;
            let fetched = self
                .client
                .get(&route, Access::Key, |body| {
                    let mut rows = Rows::new(run_id, &route, self.clock.now());
                    let counted = read(&mut rows, body, day, &before)?;
                    Ok((rows, counted))
                })
                .await
                .map_err(upstream_error)?;
            let (rows, counted) = fetched.value;
            let Some(counted) = counted else {
                let why = format!(
                    "{route}: the answer holds no tally (counts) though the specification adds one with counts=1; \
                     not asked again (reset the pipeline to ask)"
                );
                tracing::warn!(message = "The list gave no tally; not asked again.", %route);
                progress.problems.push(why);
                let checkpoint = Checkpoint {
                    pipeline: pipeline.name.clone(),
                    partition: TALLY_PARTITION.into(),
                    cursor: TALLY_UNSERVED.into(),
                };
                self.commit(run_id, rows, Some(checkpoint), progress).await?;
                return Ok(());
            };
            let checkpoint = Checkpoint {
                pipeline: pipeline.name.clone(),
                partition: TALLY_PARTITION.into(),
                cursor: day.to_string(),
            };
            self.commit(run_id, rows, Some(checkpoint), progress).await?;
            let held = self.sink.call(move |s| s.stored_by_kind(stored, tally, day)).await??;
            for (kind, expected) in counted {
                let stored = held.iter().find(|(k, _)| *k == kind).map_or(0, |(_, n)| *n);
                if stored < expected {
                    let shortfall = Shortfall {
                        what: format!("{kind} records dated {day} ({route})"),
                        expected,
                        stored,
                    };
                    tracing::warn!(message = "A day holds fewer records than the service's tally.", %shortfall);
                    progress.shortfalls.push(shortfall);
                }
            }
        }
        Ok(())
    }
}
