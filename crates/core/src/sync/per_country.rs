//! The per-country engine ([`Fetch::PerCountry`](crate::feeds::Fetch::PerCountry)):
//! each configured country's list, then each listed entity's full history
//! (no route says which changed). The sink's load rule decides what a
//! repeated point means (the macro history keeps everything ever seen), so
//! this side only has to read every point.

use std::collections::HashMap;

use futures::{FutureExt, StreamExt};

use super::{FetchedTx, Progress, SyncError, Syncer, Turn, found, goes_on, send_fetched, upstream_error};
use crate::feeds::{Listed, PerCountry};
use crate::pipeline::Pipeline;
use crate::planner;
use crate::records::Rows;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};

impl Syncer {
    pub(super) async fn run_per_country(
        &self,
        pipeline: &Pipeline,
        feed: &PerCountry,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let checkpoints = &checkpoints;
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for country in &self.config.universe.countries {
                let step = self.country(Turn { pipeline, run_id }, feed, country, checkpoints, &mut noted, &done);
                if !goes_on(&done, step.await).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// One country's list, then each entity's history, handed to the commit
    /// side as it arrives (what arrives while a commit runs commits
    /// together); false when the fetching must stop.
    async fn country(
        &self,
        Turn { pipeline, run_id }: Turn<'_>,
        feed: &PerCountry,
        country: &str,
        checkpoints: &HashMap<String, StoredCheckpoint>,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let series_route = pipeline
            .params
            .series_route
            .as_deref()
            .expect("validated when the pipeline was loaded");
        let route = pipeline.route.replace("{country}", &encode(country));
        let (list, read) = (feed.list, feed.read);
        let listed = self
            .client
            .get(&route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let entries = list(&mut rows, body)?;
                Ok((rows, entries))
            })
            .await;
        let (list_rows, entries) = match listed {
            Ok(f) => f.value,
            Err(UpstreamError::NotFound { route, message }) => {
                progress.problems.push(format!(
                    "universe.countries: {country:?} is unknown to the service ({route}: 404 {message})"
                ));
                return Ok(true);
            }
            // Any other refusal of one country leaves the other countries to go on.
            Err(e) if e.is_refusal() => {
                if let Ok(refusal) = e.into_refusal() {
                    progress
                        .problems
                        .push(format!("universe.countries: {country:?}: {refusal}"));
                }
                return Ok(true);
            }
            Err(e) => return Err(upstream_error(e)),
        };
        if !list_rows.is_empty() && !send_fetched(done, Ok((list_rows, Vec::new()))).await {
            return Ok(false);
        }
        let partition = |key: &str| format!("{country}:{key}");
        let entries = planner::stalest_first(entries, |e| checkpoints.get(&partition(&e.key)).map(|c| c.updated_at));
        let fetch = |listed: Listed| {
            let route = series_route
                .replace("{country}", &encode(country))
                .replace("{series}", &encode(&listed.key));
            async move {
                let fetched = self
                    .client
                    .get(&route, Access::Key, |body| {
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        let cursor = read(&mut rows, body, country, &listed)?;
                        Ok((rows, cursor))
                    })
                    .await;
                (listed.key, fetched)
            }
            .boxed()
        };
        // Each made when its turn comes: see `run_per_company`.
        let mut results = futures::stream::iter(entries)
            .map(fetch)
            .buffered(self.config.upstream.concurrency);
        while let Some((key, fetched)) = results.next().await {
            let Some((rows, cursor)) = found(fetched, progress)? else {
                continue;
            };
            let checkpoint = Checkpoint {
                pipeline: pipeline.name.clone(),
                partition: partition(&key),
                cursor,
            };
            if !send_fetched(done, Ok((rows, vec![checkpoint]))).await {
                return Ok(false);
            }
        }
        Ok(true)
    }
}
