//! The layers engine ([`Fetch::Layers`](crate::feeds::Fetch::Layers)): the
//! layer list, then counts for the configured layers it knows (all of them
//! when none are configured). An unknown configured layer is reported rather
//! than sent, since the service would refuse the whole request.

use super::{Progress, SyncError, Syncer, upstream_error};
use crate::feeds::Layers;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, encode};

impl Syncer {
    pub(super) async fn run_layers(
        &self,
        pipeline: &Pipeline,
        feed: &Layers,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let layers_route = pipeline.params.layers_route.clone().expect("validated when loaded");
        let day = self.clock.now().date_naive();
        let (list, read) = (feed.list, feed.read);
        let (layer_rows, known) = self
            .client
            .get(&layers_route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, &layers_route, self.clock.now());
                let known = list(&mut rows, body, day)?;
                Ok((rows, known))
            })
            .await
            .map_err(upstream_error)?
            .value;
        let configured = (feed.configured)(&self.config);
        let layers: Vec<String> = if configured.is_empty() {
            known.clone()
        } else {
            for layer in configured.iter().filter(|l| !known.contains(l)) {
                progress.problems.push(format!(
                    "{}: {layer:?} is not a layer the service lists (known: {}); fix or remove it",
                    feed.configured_key,
                    known.join(", ")
                ));
            }
            configured.iter().filter(|l| known.contains(l)).cloned().collect()
        };
        if layers.is_empty() {
            self.commit(run_id, layer_rows, None, progress).await?;
            return Ok(());
        }
        let joined: Vec<String> = layers.iter().map(|l| encode(l)).collect();
        let route = pipeline.route.replace("{layers}", &joined.join(","));
        // Only an answer for every layer holds the day's whole set of counts.
        let whole = layers.len() == known.len();
        let rows = self
            .client
            .get(&route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                if whole {
                    rows.replace_partition(feed.counts, &day.to_string());
                }
                read(&mut rows, body, day)?;
                Ok(rows)
            })
            .await
            .map_err(upstream_error)?
            .value;
        let checkpoint = Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: String::new(),
            cursor: day.to_string(),
        };
        self.commit_pages(run_id, vec![layer_rows, rows], vec![checkpoint], progress, false)
            .await?;
        Ok(())
    }
}
