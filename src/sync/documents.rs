//! Per-company documents that need more than one request: filing notes with
//! their section texts, and the geo layers with their country counts.

use std::collections::{HashMap, HashSet};

use chrono::{Duration, NaiveDate};
use futures::StreamExt;
use serde_json::value::RawValue;

use super::{FetchedTx, Member, Progress, SyncError, Syncer, found, goes_on, send_fetched, upstream_error};
use crate::feeds::filings::{self, FilingNotesPage};
use crate::feeds::geo::{self, GeoCountriesPage, GeoLayersPage};
use crate::pipeline::Pipeline;
use crate::records::Rows;
use crate::sink::Checkpoint;
use crate::upstream::{Access, encode};

/// Stored section texts by company: (accession, section key).
type StoredSections = HashMap<String, HashSet<(String, String)>>;

/// Which section texts a filings run asks for, and where.
struct Wanted<'a> {
    section_route: &'a str,
    /// Filings filed before this are not read for their sections.
    since: NaiveDate,
    stored: &'a StoredSections,
}

impl Syncer {
    /// Each company's filing list (one request: new filings inserted once),
    /// then the section texts not yet stored of filings filed in the last
    /// `text_days`. Filings never change once served, so a stored section is
    /// never asked for again.
    pub(super) async fn run_filings(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        members: Vec<Member>,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let section_route = pipeline.params.section_route.clone().expect("validated when loaded");
        let since = self.clock.now().date_naive() - Duration::days(i64::from(pipeline.params.text_days.unwrap_or(730)));
        let stored = self.stored_sections(&members, since).await?;
        let wanted = Wanted {
            section_route: &section_route,
            since,
            stored: &stored,
        };
        self.commit_as_fetched(run_id, progress, self.policy().group, |done| async move {
            let mut noted = Progress::default();
            for member in members {
                let step = self.company_filings(pipeline, run_id, &member, &wanted, &mut noted, &done);
                if !goes_on(&done, step.await).await {
                    break;
                }
            }
            noted
        })
        .await
    }

    /// One company's filing list, then its missing section texts, each handed
    /// to the commit side as it arrives; false when the fetching must stop.
    async fn company_filings(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        member: &Member,
        wanted: &Wanted<'_>,
        progress: &mut Progress,
        done: &FetchedTx,
    ) -> Result<bool, SyncError> {
        let route = pipeline.route.replace("{company}", &encode(&member.key));
        let fetched = self
            .client
            .get(&route, Access::Key, |body| {
                let page: FilingNotesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                let filings = filings::read(&mut rows, &page, &member.key);
                Ok((rows, filings))
            })
            .await;
        let Some((rows, filings)) = found(fetched, progress)? else {
            return Ok(true);
        };
        let newest = filings.first().map(|f| f.accession.clone());
        let checkpoint = newest.map(|accession| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: member.key.clone(),
            cursor: accession,
        });
        if !send_fetched(done, Ok((rows, checkpoint.into_iter().collect()))).await {
            return Ok(false);
        }
        let stored = wanted.stored.get(&member.key);
        let is_stored = |accession: &str, section: &str| {
            stored.is_some_and(|s| s.contains(&(accession.to_owned(), section.to_owned())))
        };
        let since = wanted.since;
        let wanted_sections = filings
            .into_iter()
            .filter(|f| f.filed_at.is_none_or(|d| d >= since))
            .flat_map(|f| {
                let accession = f.accession;
                f.sections
                    .into_iter()
                    .map(move |s| (accession.clone(), s))
                    .collect::<Vec<_>>()
            })
            .filter(|(accession, s)| !is_stored(accession, &s.key));
        let fetches = wanted_sections.map(|(accession, section)| {
            let route = wanted
                .section_route
                .replace("{company}", &encode(&member.key))
                .replace("{accession}", &encode(&accession))
                .replace("{section}", &encode(&section.key));
            let company = member.key.clone();
            async move {
                self.client
                    .get(&route, Access::Key, |body| {
                        let raw: &RawValue = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                        let mut rows = Rows::new(run_id, &route, self.clock.now());
                        filings::read_section(&mut rows, raw, &company, &accession, &section);
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

    /// The section texts already stored of the companies' filings filed
    /// since `since` (or undated), by company. One query for the run: asked
    /// company by company, each query waited behind the commit in flight
    /// (BENCHMARKS.md, Cold start).
    async fn stored_sections(&self, members: &[Member], since: NaiveDate) -> Result<StoredSections, SyncError> {
        if members.is_empty() {
            return Ok(StoredSections::new());
        }
        let keys: Vec<String> = members.iter().map(|m| m.key.clone()).collect();
        let rows = self.sink.call(move |s| s.stored_sections(&keys, since)).await??;
        let mut stored = StoredSections::new();
        for (company, accession, section) in rows {
            stored.entry(company).or_default().insert((accession, section));
        }
        Ok(stored)
    }

    /// The layer list, then counts for the configured layers it knows (all of
    /// them when none are configured); an unknown configured layer is reported
    /// rather than sent, since the service would refuse the whole request.
    pub(super) async fn run_geo(
        &self,
        pipeline: &Pipeline,
        run_id: &str,
        progress: &mut Progress,
    ) -> Result<(), SyncError> {
        let layers_route = pipeline.params.layers_route.clone().expect("validated when loaded");
        let day = self.clock.now().date_naive();
        let (layer_rows, known) = self
            .client
            .get(&layers_route, Access::Key, |body| {
                let page: GeoLayersPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut rows = Rows::new(run_id, &layers_route, self.clock.now());
                let known = geo::read_layers(&mut rows, &page, day);
                Ok((rows, known))
            })
            .await
            .map_err(upstream_error)?
            .value;
        let configured = &self.config.universe.geo_layers;
        let layers: Vec<String> = if configured.is_empty() {
            known.clone()
        } else {
            for layer in configured.iter().filter(|l| !known.contains(l)) {
                progress.problems.push(format!(
                    "universe.geo_layers: {layer:?} is not a layer the service lists (known: {}); fix or remove it",
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
        let rows = self
            .client
            .get(&route, Access::Key, |body| {
                let page: GeoCountriesPage = serde_json::from_slice(body).map_err(|e| e.to_string())?;
                let mut rows = Rows::new(run_id, &route, self.clock.now());
                geo::read_counts(&mut rows, &page, day);
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
