//! The parent-texts engine ([`Fetch::ParentTexts`](crate::feeds::Fetch::ParentTexts)):
//! the text of each part of the parent table's recent documents of the
//! configured companies that is not stored yet, each asked once.

use chrono::Duration;
use futures::{FutureExt, StreamExt};

use super::{Member, Progress, SyncError, Syncer, upstream_error};
use crate::feeds::ParentTexts;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::upstream::{Access, UpstreamError, encode};

impl Syncer {
    /// Parts of documents of the last `text_days` (all without), newest
    /// first, so a quota wall leaves a gap only at the old end: coded parts
    /// one by one, the uncoded part ('') without the part query.
    pub(super) async fn run_parent_texts(
        &self,
        pipeline: &Pipeline,
        feed: &ParentTexts,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let since = pipeline
            .params
            .text_days
            .map(|days| self.clock.now().date_naive() - Duration::days(i64::from(days)));
        let keys: Vec<String> = members.into_iter().map(|m| m.key).collect();
        let (parent, parts, texts) = (feed.parent, feed.parts, feed.texts);
        let missing = self
            .sink
            .call(move |s| s.missing_parts(parent, parts, texts, &keys, since))
            .await??;
        let read = feed.read;
        let fetch = |(company, id, part): (String, String, String)| {
            let path = pipeline
                .route
                .replace("{company}", &encode(&company))
                .replace("{accession}", &encode(&id));
            async move {
                let mut listed = Vec::new();
                let mut rows = Rows::new(run_id, &path, self.clock.now());
                let mut problems = Vec::new();
                let mut queue = vec![part];
                while let Some(part) = queue.pop() {
                    if !self.client.may_backfill() {
                        return (rows, listed, problems, Ok(true));
                    }
                    let route = if part.is_empty() {
                        path.clone()
                    } else {
                        format!("{path}?{}={}", feed.part_query, encode(&part))
                    };
                    let fetched = self
                        .client
                        // A whole body that is not UTF-8 is the service's bad
                        // record, not a failed request: quarantined, not retried.
                        .get(&route, Access::Key, |body| {
                            Ok(String::from_utf8(body.to_vec())
                                .map_err(|e| (String::from_utf8_lossy(body).into_owned(), e.to_string())))
                        })
                        .await;
                    match fetched {
                        Ok(f) => {
                            rows.route = route;
                            match f.value {
                                Ok(text) => read(&mut rows, &text, &company, &id, &part),
                                Err((lossy, why)) => rows.quarantine(&lossy, format!("text is not UTF-8: {why}")),
                            }
                        }
                        // The document has coded parts after all: the 400 lists them.
                        Err(UpstreamError::BadRequest { body, .. }) if part.is_empty() && body.items.is_some() => {
                            listed = body.items.unwrap_or_default();
                            match self.stored_parts_of(feed, &id).await {
                                Ok(stored) => queue
                                    .extend(listed.iter().filter(|p| !p.is_empty() && !stored.contains(*p)).cloned()),
                                Err(e) => return (rows, listed, problems, Err(e)),
                            }
                        }
                        Err(UpstreamError::NotFound { route, message }) => {
                            problems.push(format!("{route}: 404 {message}"));
                        }
                        Err(e) => return (rows, listed, problems, Err(upstream_error(e))),
                    }
                }
                (rows, listed, problems, Ok(false))
            }
            .boxed()
        };
        // Each made when its turn comes: see `run_per_company`.
        let mut results = futures::stream::iter(missing)
            .map(fetch)
            .buffered(self.config.upstream.concurrency);
        while let Some((rows, listed, problems, result)) = results.next().await {
            if !listed.is_empty() {
                tracing::info!(message = "Document listed its coded parts; fetched each.", parts = ?listed);
            }
            progress.problems.extend(problems);
            self.commit(run_id, rows, None, progress).await?;
            progress.backfill_paused |= result?;
        }
        Ok(())
    }

    /// The parts of document `id` whose texts are already stored.
    async fn stored_parts_of(
        &self,
        feed: &ParentTexts,
        id: &str,
    ) -> Result<std::collections::HashSet<String>, SyncError> {
        let (texts, id) = (feed.texts, id.to_owned());
        Ok(self.sink.call(move |s| s.stored_parts_of(texts, &id)).await??)
    }
}
