//! The macro pipeline: each configured country's series list, then each
//! series' full point-in-time history. The service may stop serving old
//! vintages or restate a value under the same vintage; the sink's history rule
//! keeps everything ever seen, so this side only has to read every point.

use std::collections::HashMap;

use futures::StreamExt;
use serde_json::value::RawValue;

use super::{FetchedTx, Progress, SyncError, Syncer, found, goes_on, send_fetched, upstream_error};
use crate::feeds::macro_series::{self as feed, CountryPage, SeriesPage, SeriesRef};
use crate::pipeline::Pipeline;
use crate::planner;
use crate::records::Rows;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Access, UpstreamError, encode};

/// One series of one country, as the country route listed it.
struct SeriesEntry {
    entry: SeriesRef,
    raw: Box<RawValue>,
}

impl Syncer {
    pub(super) async fn run_macro(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let series_route = pipeline
            .params
            .series_route
            .clone()
            .expect("validated when the pipeline was loaded");
        let checkpoints = self.checkpoints_of(pipeline).await?;
        let (series_route, checkpoints) = (&series_route, &checkpoints);
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for country in &self.config.universe.countries {
                let step = self.country_series(pipeline, run_id, country, series_route, checkpoints, &mut noted, &done);
                if !goes_on(&done, step.await).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// One country's series list, then each series' history, handed to the
    /// commit side as it arrives (the series that arrive while a commit runs
    /// commit together); false when the fetching must stop.
    #[allow(clippy::too_many_arguments)]
    async fn country_series(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        country: &str,
        series_route: &str,
        checkpoints: &HashMap<String, StoredCheckpoint>,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let route = pipeline.route.replace("{country}", &encode(country));
        let listed = self
            .client
            .get(&route, Access::Key, |body| {
                let page: CountryPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut entries = Vec::new();
                let mut bad = Vec::new();
                for raw in page.macro_series {
                    match serde_json::from_str::<SeriesRef>(raw.get()) {
                        Ok(entry) if is_series_key(&entry.key) => entries.push(SeriesEntry {
                            entry,
                            raw: raw.to_owned(),
                        }),
                        Ok(entry) => bad.push((
                            raw.get().to_owned(),
                            format!("series key {:?} is not [A-Z0-9_]+", entry.key),
                        )),
                        Err(e) => bad.push((raw.get().to_owned(), format!("series list entry: {e}"))),
                    }
                }
                Ok((entries, bad))
            })
            .await;
        let (entries, bad) = match listed {
            Ok(f) => f.value,
            Err(UpstreamError::NotFound { route, message }) => {
                progress.problems.push(format!(
                    "universe.countries: {country:?} is unknown to the service ({route}: 404 {message})"
                ));
                return Ok(true);
            }
            Err(e) => return Err(upstream_error(e)),
        };
        if !bad.is_empty() {
            let mut rows = Rows::new(run_id, &route, self.clock.now());
            for (record, error) in bad {
                rows.quarantine(&record, error);
            }
            if !send_fetched(done, Ok((rows, Vec::new()))).await {
                return Ok(false);
            }
        }
        let partition = |key: &str| format!("{country}:{key}");
        let entries = planner::stalest_first(entries, |e| {
            checkpoints.get(&partition(&e.entry.key)).map(|c| c.updated_at)
        });
        let fetches = entries.into_iter().map(|SeriesEntry { entry, raw }| {
            let route = series_route
                .replace("{country}", &encode(country))
                .replace("{series}", &encode(&entry.key));
            async move {
                let fetched = self
                    .client
                    .get(&route, Access::Key, |body| {
                        let page: SeriesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        feed::read_series(&mut rows, country, &raw, &entry, &page);
                        let newest_vintage = feed::read_observations(&mut rows, country, &entry.key, &page);
                        Ok((rows, newest_vintage))
                    })
                    .await;
                (entry.key, fetched)
            }
        });
        // Collected first: see `run_per_company`.
        let mut results = futures::stream::iter(fetches.collect::<Vec<_>>()).buffered(self.config.upstream.concurrency);
        while let Some((key, fetched)) = results.next().await {
            let Some((rows, newest_vintage)) = found(fetched, progress)? else {
                continue;
            };
            let checkpoint = Checkpoint {
                pipeline: pipeline.name.clone(),
                partition: partition(&key),
                cursor: newest_vintage.map(|d| d.to_string()).unwrap_or_default(),
            };
            if !send_fetched(done, Ok((rows, vec![checkpoint]))).await {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// The wire contract's series key alphabet; anything else would be a 400.
fn is_series_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}
