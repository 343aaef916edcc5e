//! The macro pipeline: each configured country's series list, then each
//! series' full point-in-time history. The service may stop serving old
//! vintages or restate a value under the same vintage; the sink's history rule
//! keeps everything ever seen, so this side only has to read every point.

use futures::StreamExt;
use serde_json::value::RawValue;

use super::{Progress, SyncError, Syncer, found, upstream_error};
use crate::pipeline::Pipeline;
use crate::planner;
use crate::records::{self, Rows};
use crate::sink::Checkpoint;
use crate::upstream::{Access, UpstreamError, encode};
use crate::wire;

/// One series of one country, as the country route listed it.
struct SeriesEntry {
    entry: wire::SeriesRef,
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
        let checkpoints = {
            let name = pipeline.name.clone();
            self.sink.call(move |s| s.checkpoints(&name)).await??
        };
        for country in &self.config.universe.countries {
            let route = pipeline.route.replace("{country}", &encode(country));
            let listed = self
                .client
                .get(&route, Access::Key, |body| {
                    let page: wire::CountryPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                    let mut entries = Vec::new();
                    let mut bad = Vec::new();
                    for raw in page.macro_series {
                        match serde_json::from_str::<wire::SeriesRef>(raw.get()) {
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
                    continue;
                }
                Err(e) => return Err(upstream_error(e)),
            };
            if !bad.is_empty() {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                for (record, error) in bad {
                    rows.quarantine(&record, error);
                }
                self.commit(run_id, rows, None, progress).await?;
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
                            let page: wire::SeriesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                            let mut rows = Rows::new(run_id, &route, self.clock.now());
                            records::macro_series(&mut rows, country, &raw, &entry, &page);
                            let newest_vintage = records::macro_observations(&mut rows, country, &entry.key, &page);
                            Ok((rows, newest_vintage))
                        })
                        .await;
                    (entry.key, fetched)
                }
            });
            // Collected first: see `run_fan_out`.
            let mut results =
                futures::stream::iter(fetches.collect::<Vec<_>>()).buffered(self.config.upstream.concurrency);
            while let Some((key, fetched)) = results.next().await {
                let Some((rows, newest_vintage)) = found(fetched, progress)? else {
                    continue;
                };
                let checkpoint = Checkpoint {
                    pipeline: pipeline.name.clone(),
                    partition: partition(&key),
                    cursor: newest_vintage.map(|d| d.to_string()).unwrap_or_default(),
                };
                self.commit(run_id, rows, Some(checkpoint), progress).await?;
            }
        }
        Ok(())
    }
}

/// The wire contract's series key alphabet; anything else would be a 400.
fn is_series_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}
