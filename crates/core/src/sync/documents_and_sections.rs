//! The documents-and-parts engine
//! ([`Fetch::DocumentsAndSections`](crate::feeds::Fetch::DocumentsAndSections)): each company's
//! document list (one request), then the parts not yet stored of documents dated in the last
//! `text_days` (all without), newest first. Documents never change once served, so a stored part is
//! never asked for again.

use std::collections::{HashMap, HashSet};

use chrono::{Duration, NaiveDate};
use futures::{FutureExt, StreamExt};

use super::{FetchedTx, Member, Progress, Shortfall, SyncError, Syncer, found, found_for, goes_on, send_fetched};
use crate::feeds::{Document, DocumentParts, Part};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, encode};

/// Stored parts by company: (document, part key).
type StoredParts = HashMap<String, HashSet<(String, String)>>;

/// A part to ask for: (company, document, its date, the part).
type WantedPart = (String, String, Option<NaiveDate>, Part);

/// What a company's document list came to.
enum Listed {
    Documents(Vec<Document>),
    /// The service does not know the company (404, noted).
    Unknown,
    /// The fetching must stop.
    Stop,
}

impl Syncer {
    /// Every company's document list first, then the parts not stored yet
    /// of all of them, the newest documents first: the lists are what is
    /// new, the parts a backfill that a quota wall cuts only at its old end.
    pub(super) async fn run_document_parts(
        &self,
        pipeline: &Pipeline,
        feed: &DocumentParts,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let part_route = pipeline.params.section_route.clone().expect("validated when loaded");
        let since = pipeline
            .params
            .text_days
            .map(|days| self.clock.now().date_naive() - Duration::days(i64::from(days)));
        let stored = self.stored_parts(feed, &members, since).await?;
        let part_route = &part_route;
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            let mut wanted: Vec<WantedPart> = Vec::new();
            for member in members {
                let list = self
                    .document_list(pipeline, feed, run_id, &member, &mut noted, &done)
                    .await;
                let documents = match list {
                    Ok(Listed::Documents(documents)) => documents,
                    Ok(Listed::Unknown) => continue,
                    Ok(Listed::Stop) => return noted,
                    Err(e) => {
                        goes_on(&done, Err(e)).await;
                        return noted;
                    }
                };
                let stored = stored.get(&member.key);
                let is_stored =
                    |id: &str, part: &str| stored.is_some_and(|s| s.contains(&(id.to_owned(), part.to_owned())));
                for d in documents
                    .into_iter()
                    .filter(|d| d.dated.is_none_or(|d| since.is_none_or(|s| d >= s)))
                {
                    for part in d.parts {
                        if !is_stored(&d.id, &part.key) {
                            wanted.push((member.key.clone(), d.id.clone(), d.dated, part));
                        }
                    }
                }
            }
            wanted.sort_by_key(|w| std::cmp::Reverse(w.2));
            let step = self
                .document_parts(feed, run_id, part_route, wanted, &mut noted, &done)
                .await;
            goes_on(&done, step).await;
            noted
        })
        .await
    }

    /// One company's document list, handed to the commit side with the
    /// newest document as the company's checkpoint.
    async fn document_list(
        &self,
        pipeline: &Pipeline,
        feed: &DocumentParts,
        run_id: &str,
        member: &Member,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<Listed, SyncError> {
        let route = pipeline.route.replace("{company}", &encode(&member.key));
        let list = feed.list;
        let fetched = self
            .client
            .get(&route, Access::Key, |body| {
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let documents = list(&mut rows, body, &member.key)?;
                Ok((rows, documents))
            })
            .await;
        let Some((rows, documents)) = found_for(fetched, progress, &member.key)? else {
            return Ok(Listed::Unknown);
        };
        // The newest by date, not by place: the list's order is the service's.
        let newest = documents.iter().max_by_key(|d| d.dated).map(|d| d.id.clone());
        let checkpoint = newest.map(|id| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: member.key.clone(),
            cursor: id,
        });
        if !send_fetched(done, Ok((rows, checkpoint.into_iter().collect()))).await {
            return Ok(Listed::Stop);
        }
        Ok(Listed::Documents(documents))
    }

    /// The `wanted` parts, in order, each handed to the commit side as it
    /// arrives; false when the fetching must stop.
    async fn document_parts(
        &self,
        feed: &DocumentParts,
        run_id: &str,
        part_route: &str,
        wanted: Vec<WantedPart>,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let read_part = feed.read_part;
        let fetch = |(company, id, _, part): WantedPart| {
            let route = part_route
                .replace("{company}", &encode(&company))
                .replace("{accession}", &encode(&id))
                .replace("{section}", &encode(&part.key));
            async move {
                if !self.client.may_backfill() {
                    return None;
                }
                let fetched = self
                    .client
                    .get(&route, Access::Key, |body| {
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        read_part(&mut rows, body, &company, &id, &part)?;
                        Ok(rows)
                    })
                    .await;
                Some(fetched)
            }
            .boxed()
        };
        // Each made when its turn comes: see `run_per_company`.
        let mut results = futures::stream::iter(wanted)
            .map(fetch)
            .buffered(self.config.upstream.concurrency);
        let (mut asked, mut stored) = (0u64, 0u64);
        let mut go_on = true;
        while let Some(fetched) = results.next().await {
            let Some(fetched) = fetched else {
                progress.backfill_paused = true;
                continue;
            };
            asked += 1;
            let Some(rows) = found(fetched, progress)? else {
                continue;
            };
            stored += u64::from(rows.row_count() > 0 || !rows.quarantined.is_empty());
            if !send_fetched(done, Ok((rows, Vec::new()))).await {
                go_on = false;
                break;
            }
        }
        // Each part a document lists and that was asked for is held against
        // what came of it: a 404 or an unreadable answer leaves it missing.
        if stored < asked {
            progress.shortfalls.push(Shortfall {
                what: format!("parts the documents list and that were asked for ({part_route})"),
                expected: asked,
                stored,
            });
        }
        Ok(go_on)
    }

    /// The parts already stored of the companies' documents dated since
    /// `since` (or undated), by company. One query for the run: a query per
    /// company would wait behind the commit in flight each time.
    async fn stored_parts(
        &self,
        feed: &DocumentParts,
        members: &[Member],
        since: Option<NaiveDate>,
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
