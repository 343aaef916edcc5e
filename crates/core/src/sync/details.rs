//! The details engine ([`Fetch::Details`](crate::feeds::Fetch::Details)):
//! rows of a table that lack what a per-record route serves (a full-text
//! news item stored without its body), each asked by its key, the most
//! important first, within `daily_requests` a UTC day. A record asked and
//! not served waits a week before it is asked again; a wait that is over is
//! forgotten, so the marks are at most a week of asking.

use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::{Progress, SyncError, Syncer, upstream_error};
use crate::feeds::{DEFAULT_DAILY_REQUESTS, Details};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, UpstreamError, encode};

/// How long a record asked and not served waits before it is asked again.
const ASK_AGAIN_AFTER_DAYS: i64 = 7;

/// The checkpoint partition of the day's request count (`2026-12-05 17`).
const DAY_PARTITION: &str = "day";

/// The checkpoint partition of a record asked and not served.
fn asked_partition(id: &str) -> String {
    format!("asked:{id}")
}

/// The requests spent on `today` by the count a checkpoint holds.
fn spent_on(cursor: Option<&str>, today: NaiveDate) -> u64 {
    cursor
        .and_then(|c| c.split_once(' '))
        .filter(|(day, _)| day.parse::<NaiveDate>().ok() == Some(today))
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or(0)
}

impl Syncer {
    pub(super) async fn run_details(
        &self,
        pipeline: &Pipeline,
        details: &Details,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let now = self.clock.now();
        let today = now.date_naive();
        let per_day = u64::from(pipeline.params.daily_requests.unwrap_or(DEFAULT_DAILY_REQUESTS));
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let mut spent = spent_on(checkpoints.get(DAY_PARTITION).map(|c| c.cursor.as_str()), today);
        let (mut waiting, mut over) = (Vec::new(), Vec::new());
        for (partition, c) in &checkpoints {
            let Some(id) = partition.strip_prefix("asked:") else {
                continue;
            };
            match c.cursor.parse::<DateTime<Utc>>() {
                Ok(at) if now - at < Duration::days(ASK_AGAIN_AFTER_DAYS) => waiting.push(id.to_owned()),
                _ => over.push(partition.clone()),
            }
        }
        let name = pipeline.name.clone();
        self.sink.call(move |s| s.forget_checkpoints(&name, &over)).await??;
        let left = per_day.saturating_sub(spent);
        if left == 0 {
            tracing::info!(message = "Today's requests for details are spent.", pipeline = %pipeline.name, per_day);
            return Ok(());
        }
        let (table, lacking, first) = (details.table, details.lacking, details.first);
        let ids = self
            .sink
            .call(move |s| s.lacking_rows(table, (lacking, first), &waiting, left))
            .await??;
        let (mut asked, mut served) = (0u64, 0u64);
        for id in ids {
            if !self.client.may_backfill() {
                progress.backfill_paused = true;
                break;
            }
            let route = pipeline.route.replace("{id}", &encode(&id));
            let sent_before = self.client.requests_sent();
            let fetched = self.client.get(&route, Access::Key, |body| Ok(body.clone())).await;
            spent += self.client.requests_sent() - sent_before;
            asked += 1;
            let mut rows = Rows::new(run_id, &route, self.clock.now());
            let got = match fetched {
                Ok(f) => match (details.read)(&mut rows, &f.value, &id) {
                    Ok(got) => got,
                    Err(e) => {
                        rows.quarantine(&String::from_utf8_lossy(&f.value), e.to_string());
                        false
                    }
                },
                // A record the service does not have (withdrawn) waits like
                // one served without; a route refused to the key (402, 403)
                // fails the pipeline, naming it, rather than spend the budget.
                Err(e @ UpstreamError::NotFound { .. }) => {
                    progress.problems.push(e.to_string());
                    false
                }
                Err(e) => return Err(upstream_error(e)),
            };
            served += u64::from(got);
            let mut marks = vec![Checkpoint {
                pipeline: pipeline.name.clone(),
                partition: DAY_PARTITION.to_owned(),
                cursor: format!("{today} {spent}"),
            }];
            if !got {
                marks.push(Checkpoint {
                    pipeline: pipeline.name.clone(),
                    partition: asked_partition(&id),
                    cursor: self.clock.now().to_rfc3339(),
                });
            }
            self.commit_pages(run_id, vec![rows], marks, progress, false).await?;
            if spent >= per_day {
                break;
            }
        }
        tracing::info!(
            message = "Details asked.",
            pipeline = %pipeline.name,
            asked,
            served,
            spent_today = spent,
            per_day
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_count_is_today_s_only() {
        let today: NaiveDate = "2026-12-05".parse().unwrap();
        assert_eq!(spent_on(Some("2026-12-05 17"), today), 17);
        assert_eq!(spent_on(Some("2026-12-04 17"), today), 0);
        assert_eq!(spent_on(Some("garbage"), today), 0);
        assert_eq!(spent_on(None, today), 0);
    }
}
