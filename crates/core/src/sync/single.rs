//! The `Single` engine: one request a run, its rows committed with the
//! cursor the feed read from it.

use super::{Progress, Syncer, upstream_error};
use crate::error::SyncError;
use crate::feeds::ReadSingle;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::Access;

impl Syncer {
    /// One request, its rows committed with the cursor the feed read from it.
    pub(super) async fn run_single(
        &self,
        pipeline: &Pipeline,
        read: ReadSingle,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let route = pipeline.route.clone();
        let access = if pipeline.auth() { Access::Key } else { Access::Public };
        let fetched = self
            .client
            .get(&route, access, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let cursor = read(&mut rows, body)?;
                Ok((rows, cursor))
            })
            .await
            .map_err(upstream_error)?;
        let (rows, cursor) = fetched.value;
        let checkpoint = Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: String::new(),
            cursor,
        };
        self.commit(run_id, rows, Some(checkpoint), progress).await?;
        Ok(())
    }
}
