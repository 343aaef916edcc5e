//! The `PerCompany` engine: one request per company of the universe, run
//! `concurrency` at a time, each company's rows committed with its
//! checkpoint (the newest date read, or "no mandate" for a company the
//! service says has none of this data, asked again after `recheck_days`).

use std::collections::HashMap;

use chrono::NaiveDate;
use futures::{FutureExt, StreamExt};

use super::commit::send_fetched;
use super::unserved::found_for;
use super::{Member, NO_MANDATE, Progress, Syncer, Turn};
use crate::error::SyncError;
use crate::feeds::PerCompany;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::tables::TableDef;
use crate::upstream::{Access, UpstreamError, encode};

/// One company's request: its route, the checkpoint it starts from, and
/// for a history read again whole, the oldest day stored.
pub(super) struct Ask {
    pub(super) key: String,
    pub(super) route: String,
    pub(super) partial: Option<NaiveDate>,
    pub(super) stored_from: Option<NaiveDate>,
}

impl Syncer {
    /// One request per company, its rows committed with the company's checkpoint.
    pub(super) async fn run_per_company(
        &self,
        pipeline: &Pipeline,
        feed: &PerCompany,
        run_id: &str,
        members: Vec<Member>,
        checkpoints: HashMap<String, StoredCheckpoint>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let today = self.clock.now().date_naive();
        let recheck = chrono::Duration::days(i64::from(pipeline.params.recheck_days.unwrap_or(30)));
        // A company the service said has none of this data is not asked again until the recheck is
        // due.
        let members: Vec<Member> = members
            .into_iter()
            .filter(|m| {
                let since = checkpoints
                    .get(&m.key)
                    .and_then(|c| c.cursor.strip_prefix(NO_MANDATE))
                    .and_then(|d| d.parse::<NaiveDate>().ok());
                since.is_none_or(|d| today - d >= recheck)
            })
            .collect();
        // Requests run `concurrency` at a time, sharing one rate budget; their
        // results are committed one by one in member order.
        let requests: Vec<Ask> = members
            .iter()
            .map(|member| {
                let path = pipeline.route.replace("{company}", &encode(&member.key));
                let (route, partial) = match feed.query {
                    Some(query) => {
                        let last = checkpoints
                            .get(&member.key)
                            .and_then(|c| c.cursor.parse::<NaiveDate>().ok());
                        (format!("{path}?{}", query(last, today, &pipeline.params)), last)
                    }
                    None => (path, None),
                };
                Ask {
                    key: member.key.clone(),
                    route,
                    partial,
                    stored_from: None,
                }
            })
            .collect();
        self.fetch_companies(Turn { pipeline, run_id }, feed, requests, None, progress)
            .await?;
        let Some(restates) = &feed.restates else {
            return Ok(());
        };
        // Rows older than the correction window that this run's refetches
        // changed: each such company's history is read again whole.
        let before = today - chrono::Duration::days(i64::from(pipeline.params.restate_days.unwrap_or(7)));
        let (table, date, value, run) = (restates.table, restates.date, restates.value, run_id.to_owned());
        let restated = self
            .sink
            .call(move |s| s.restated(table, &run, date, value, before))
            .await??;
        if restated.is_empty() {
            return Ok(());
        }
        // A whole answer that starts after the oldest stored day replaces nothing.
        let parts: Vec<String> = restated.iter().map(|r| r.partition.clone()).collect();
        let held = self
            .sink
            .call(move |s| s.partition_holdings(table, Some(date), &parts))
            .await??;
        let mut again = Vec::new();
        for r in restated {
            let path = pipeline.route.replace("{company}", &encode(&r.partition));
            let route = format!("{path}?{}", restates.whole);
            let factor = r.factor.map(|f| format!(" (factor {f:.4})")).unwrap_or_default();
            let said = format!(
                "{} {}: {} row(s) before {before} changed{factor}; the whole history read again",
                table.name, r.partition, r.rows
            );
            tracing::warn!(message = "The service restated a history.", pipeline = %pipeline.name, %said);
            progress.restated.push(said);
            again.push(Ask {
                stored_from: held.get(&r.partition).and_then(|h| h.earliest),
                key: r.partition,
                route,
                partial: None,
            });
        }
        self.fetch_companies(Turn { pipeline, run_id }, feed, again, Some(table), progress)
            .await
    }

    /// Fetches each company's route, `concurrency` at a time, and commits its
    /// rows with its checkpoint in order. With `whole`, each response holds
    /// the company's whole set of that table: rows it no longer holds are
    /// withdrawn (when it was read whole).
    pub(super) async fn fetch_companies(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &PerCompany,
        requests: Vec<Ask>,
        whole: Option<&'static TableDef>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let today = self.clock.now().date_naive();
        let read = feed.read;
        // Each request's future is made when its turn comes: made up front,
        // every company's future would be held until the last was committed.
        // Boxed, the run future is proven Send over the lazy adapter
        // (rust-lang/rust#102211).
        let fetch = move |Ask {
                              key,
                              route,
                              partial,
                              stored_from,
                          }: Ask| {
            async move {
                let fetched = self
                    .client
                    .get(&route, Access::Key, |body| {
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        if let Some(table) = whole {
                            rows.replace_partition(table, &key);
                        }
                        let newest = read(&mut rows, body, &key)?;
                        if let (Some(stored), Some(served)) = (stored_from, rows.served_from)
                            && served > stored
                        {
                            rows.not_whole(format!(
                                "it served from {served}, and the warehouse holds {key}'s rows from {stored}"
                            ));
                        }
                        Ok((rows, newest))
                    })
                    .await;
                (key, partial, fetched)
            }
            .boxed()
        };
        let concurrency = self.config.upstream.concurrency;
        let absent_on_404 = feed.absent_on_404;
        self.commit_as_fetched(run_id, progress, self.policy().company_group, |done| async move {
            let mut noted = Progress::default();
            let mut results = futures::stream::iter(requests).map(fetch).buffered(concurrency);
            while let Some((key, partial, fetched)) = results.next().await {
                let ready = if absent_on_404 && let Err(UpstreamError::NotFound { .. }) = &fetched {
                    let checkpoint = Checkpoint {
                        pipeline: pipeline.name.clone(),
                        partition: key,
                        cursor: format!("{NO_MANDATE}{today}"),
                    };
                    Ok((Rows::new(run_id, &pipeline.route, self.clock.now()), vec![checkpoint]))
                } else {
                    match found_for(fetched, &mut noted, &key) {
                        Ok(Some((rows, newest))) => {
                            noted.answered.push(key.clone());
                            let checkpoint = Checkpoint {
                                pipeline: pipeline.name.clone(),
                                partition: key,
                                cursor: newest.max(partial).map(|d| d.to_string()).unwrap_or_default(),
                            };
                            Ok((rows, vec![checkpoint]))
                        }
                        Ok(None) => continue,
                        Err(e) => Err(e),
                    }
                };
                if !send_fetched(&done, ready).await {
                    break;
                }
            }
            noted
        })
        .await
    }
}
