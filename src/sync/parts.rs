//! The documents-and-parts engine ([`Fetch::DocumentsAndSections`](crate::feeds::Fetch::DocumentsAndSections)):
//! each company's document list (one request), then the parts not yet
//! stored of documents dated in the last `text_days`. Documents never change
//! once served, so a stored part is never asked for again.

use std::collections::{HashMap, HashSet};

use chrono::{Duration, NaiveDate};
use futures::StreamExt;

use super::{FetchedTx, Member, Progress, SyncError, Syncer, found, goes_on, send_fetched};
use crate::feeds::DocumentParts;
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, encode};

/// Stored parts by company: (document, part key).
type StoredParts = HashMap<String, HashSet<(String, String)>>;

/// Which parts a run asks for, and where.
struct Wanted<'a> {
    part_route: &'a str,
    /// Documents dated before this are not read for their parts.
    since: NaiveDate,
    stored: &'a StoredParts,
}

impl Syncer {
    pub(super) async fn run_document_parts(
        &self,
        pipeline: &Pipeline,
        feed: &DocumentParts,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let part_route = pipeline.params.section_route.clone().expect("validated when loaded");
        let since = self.clock.now().date_naive() - Duration::days(i64::from(pipeline.params.text_days.unwrap_or(730)));
        let stored = self.stored_parts(feed, &members, since).await?;
        let wanted = Wanted {
            part_route: &part_route,
            since,
            stored: &stored,
        };
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for member in members {
                let step = self.company_documents(pipeline, feed, run_id, &member, &wanted, &mut noted, &done);
                if !goes_on(&done, step.await).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// One company's document list, then its missing parts, each handed to
    /// the commit side as it arrives; false when the fetching must stop.
    #[allow(clippy::too_many_arguments)]
    async fn company_documents(
        &self,
        pipeline: &Pipeline,
        feed: &DocumentParts,
        run_id: &str,
        member: &Member,
        wanted: &Wanted<'_>,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let route = pipeline.route.replace("{company}", &encode(&member.key));
        let (list, read_part) = (feed.list, feed.read_part);
        let fetched = self
            .client
            .get(&route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let documents = list(&mut rows, body, &member.key)?;
                Ok((rows, documents))
            })
            .await;
        let Some((rows, documents)) = found(fetched, progress)? else {
            return Ok(true);
        };
        let newest = documents.first().map(|d| d.id.clone());
        let checkpoint = newest.map(|id| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: member.key.clone(),
            cursor: id,
        });
        if !send_fetched(done, Ok((rows, checkpoint.into_iter().collect()))).await {
            return Ok(false);
        }
        let stored = wanted.stored.get(&member.key);
        let is_stored = |id: &str, part: &str| stored.is_some_and(|s| s.contains(&(id.to_owned(), part.to_owned())));
        let since = wanted.since;
        let wanted_parts = documents
            .into_iter()
            .filter(|d| d.dated.is_none_or(|d| d >= since))
            .flat_map(|d| {
                let id = d.id;
                d.parts.into_iter().map(move |p| (id.clone(), p)).collect::<Vec<_>>()
            })
            .filter(|(id, p)| !is_stored(id, &p.key));
        let fetches = wanted_parts.map(|(id, part)| {
            let route = wanted
                .part_route
                .replace("{company}", &encode(&member.key))
                .replace("{accession}", &encode(&id))
                .replace("{section}", &encode(&part.key));
            let company = member.key.clone();
            async move {
                self.client
                    .get(&route, Access::Key, |body| {
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        read_part(&mut rows, body, &company, &id, &part)?;
                        Ok(rows)
                    })
                    .await
            }
        });
        // Collected first: see `run_per_company`.
        let mut results = futures::stream::iter(fetches.collect::<Vec<_>>()).buffered(self.config.upstream.concurrency);
        while let Some(fetched) = results.next().await {
            if let Some(rows) = found(fetched, progress)?
                && !send_fetched(done, Ok((rows, Vec::new()))).await
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The parts already stored of the companies' documents dated since
    /// `since` (or undated), by company. One query for the run: asked
    /// company by company, each query waited behind the commit in flight
    /// (BENCHMARKS.md, Cold start).
    async fn stored_parts(
        &self,
        feed: &DocumentParts,
        members: &[Member],
        since: NaiveDate,
    ) -> Result<StoredParts, SyncError> {
        if members.is_empty() {
            return Ok(StoredParts::new());
        }
        let keys: Vec<String> = members.iter().map(|m| m.key.clone()).collect();
        let (documents, parts) = (feed.documents, feed.parts);
        let rows = self
            .sink
            .call(move |s| s.stored_parts(documents, parts, &keys, since))
            .await??;
        let mut stored = StoredParts::new();
        for (company, id, part) in rows {
            stored.entry(company).or_default().insert((id, part));
        }
        Ok(stored)
    }
}
