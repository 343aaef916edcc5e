//! Feeds: one module per upstream route family. Each declares its wire
//! shapes, its tables (with [`crate::tables::table!`], a row struct per
//! table), how a response becomes rows, and which generic fetch engine of
//! [`crate::sync`] reads it ([`Fetch`]). [`FEEDS`] is the registry: a pipeline
//! file names a feed, and the warehouse catalogue ([`catalogue`]) is every
//! feed's tables.
//!
//! Adding a feed is a module here, its line in [`FEEDS`], a pipeline file and
//! the emulator's route; a table added to a feed's response is a
//! [`table!`](crate::tables::table) and its rows in that feed's module.

pub mod companies;
pub mod coverage;
pub mod dividends;
pub mod events;
pub mod filings;
pub mod geo;
pub mod indices;
pub mod macro_series;
pub mod monthly_revenue;
pub mod news;
pub mod prices;
pub mod regulation;

use chrono::NaiveDate;
use serde::Deserialize;

use crate::bookkeeping::BOOKKEEPING;
use crate::records::Rows;
use crate::tables::TableDef;

/// One upstream route family: what the pipeline files name with `feed`.
pub struct Feed {
    pub name: &'static str,
    /// The request path (under the base URL) a pipeline file may override;
    /// `{company}`, `{country}`, `{accession}` and `{layers}` are filled in
    /// by the engine.
    pub route: &'static str,
    /// Whether the route needs the API key (public routes such as coverage do not).
    pub auth: bool,
    /// Tables written, in the order the catalogue lists them.
    pub tables: &'static [&'static TableDef],
    pub fetch: Fetch,
    /// The `[params]` a pipeline file may set for it; any other is refused.
    pub params: &'static [&'static str],
    /// The feed's own checks of a pipeline's route and params, beyond those
    /// of its engine ([`Fetch::holes`]) and [`Feed::params`].
    pub check: fn(route: &str, params: &Params) -> Result<(), String>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("name", &self.name).finish_non_exhaustive()
    }
}

/// A feed's reader of a whole single-request response: rows, and the
/// checkpoint cursor to save with them.
pub type ReadSingle = fn(&mut Rows, body: &[u8]) -> Result<String, String>;

/// A feed's reader of one company's response: the newest date it holds, if any.
pub type ReadCompany = fn(&mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, String>;

/// The generic engines that fetch feeds (each in [`crate::sync`]).
pub enum Fetch {
    /// One request per run.
    Single(ReadSingle),
    /// One request per company of the universe, committed with the
    /// company's checkpoint (the newest date read).
    PerCompany(PerCompany),
    /// Resolves the universe's identifiers to company keys.
    Universe,
    /// Per configured country: the series list, then each series' history.
    PerCountry,
    /// A cursor-paged tape: forward with `after`, back with `before`.
    Cursor,
    /// Each company's cursor-paged tape.
    CompanyCursor,
    /// Each company's index: whole history once, then only what is new.
    CompanyIndex,
    /// A market-wide list by date windows, each paged by offset.
    OffsetWindows,
    /// Texts of the parent table's rows still missing them.
    ParentTexts { parent: &'static TableDef },
    /// Each company's document list, then the sections not yet stored.
    DocumentsAndSections,
    /// A list of layers, then counts for the configured ones.
    Layers,
}

/// How [`Fetch::PerCompany`] asks for one company and reads the answer.
pub struct PerCompany {
    /// The query string (without `?`) a company's request adds, from the
    /// date its checkpoint holds; `None` asks for the route as it is.
    pub query: Option<fn(last: Option<NaiveDate>, today: NaiveDate, params: &Params) -> String>,
    pub read: ReadCompany,
    /// A 404 says the company has none of this data (no mandate): noted in
    /// its checkpoint and asked again after `params.recheck_days`.
    pub absent_on_404: bool,
}

impl PerCompany {
    /// A route asked as it is, whose 404 is a failure like any other.
    pub const fn plain(read: ReadCompany) -> PerCompany {
        PerCompany {
            query: None,
            read,
            absent_on_404: false,
        }
    }
}

impl Fetch {
    /// The placeholders a route for this engine must hold.
    pub fn holes(&self) -> &'static [&'static str] {
        match self {
            Fetch::PerCompany(_)
            | Fetch::Universe
            | Fetch::CompanyCursor
            | Fetch::CompanyIndex
            | Fetch::DocumentsAndSections => &["{company}"],
            Fetch::ParentTexts { .. } => &["{company}", "{accession}"],
            Fetch::PerCountry => &["{country}"],
            Fetch::Layers => &["{layers}"],
            Fetch::Single(_) | Fetch::Cursor | Fetch::OffsetWindows => &[],
        }
    }

    /// Whether the engine sends a request per company of the universe each
    /// run (item texts go by the parent table's rows instead).
    pub fn per_company(&self) -> bool {
        matches!(
            self,
            Fetch::PerCompany(_)
                | Fetch::Universe
                | Fetch::CompanyCursor
                | Fetch::CompanyIndex
                | Fetch::DocumentsAndSections
        )
    }
}

/// Settings a pipeline file passes to its feed (`[params]`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// prices: lookback of the first sync of a company (default `ALL`).
    pub first_range: Option<String>,
    /// prices: trailing days refetched every run because the service may restate them (default 7).
    pub restate_days: Option<u32>,
    /// macro: the history route of one series, with `{country}` and `{series}`.
    pub series_route: Option<String>,
    /// news, company_news, events_wire: how far back the first sync reaches, in days.
    pub backfill_days: Option<u32>,
    /// Page size of paged routes (news: 1-200, wire: 1-200).
    pub page_limit: Option<u32>,
    /// event_texts, filings: only filings this recent get their texts fetched, in days.
    pub text_days: Option<u32>,
    /// filings: the section text route, with `{company}`, `{accession}` and `{section}`.
    pub section_route: Option<String>,
    /// geo: the layer list route.
    pub layers_route: Option<String>,
    /// monthly_revenue: days before a company without a mandate (404) is asked again.
    pub recheck_days: Option<u32>,
    /// news: the live stream (SSE) that `fdsync stream` and the daemon keep connected.
    pub stream_route: Option<String>,
}

impl Params {
    /// The names of the params set.
    pub fn set(&self) -> Vec<&'static str> {
        let Params {
            first_range,
            restate_days,
            series_route,
            backfill_days,
            page_limit,
            text_days,
            section_route,
            layers_route,
            recheck_days,
            stream_route,
        } = self;
        [
            ("first_range", first_range.is_some()),
            ("restate_days", restate_days.is_some()),
            ("series_route", series_route.is_some()),
            ("backfill_days", backfill_days.is_some()),
            ("page_limit", page_limit.is_some()),
            ("text_days", text_days.is_some()),
            ("section_route", section_route.is_some()),
            ("layers_route", layers_route.is_some()),
            ("recheck_days", recheck_days.is_some()),
            ("stream_route", stream_route.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

/// Every feed fdsync reads.
pub static FEEDS: &[&Feed] = &[
    &companies::FEED,
    &prices::FEED,
    &dividends::FEED,
    &indices::FEED,
    &coverage::FEED,
    &macro_series::FEED,
    &events::FEED,
    &events::WIRE,
    &events::LATEST,
    &events::TEXTS,
    &news::FEED,
    &news::COMPANY,
    &news::SOURCES,
    &news::TOPICS,
    &regulation::FEED,
    &monthly_revenue::FEED,
    &filings::FEED,
    &geo::FEED,
];

/// Looks a feed up by name.
pub fn feed(name: &str) -> Option<&'static Feed> {
    FEEDS.iter().copied().find(|f| f.name == name)
}

/// Every warehouse table: the feeds' (each once, in registry order), then
/// the bookkeeping tables.
pub fn catalogue() -> impl Iterator<Item = &'static TableDef> {
    let mut seen = Vec::new();
    FEEDS
        .iter()
        .flat_map(|f| f.tables.iter().copied())
        .filter(move |t| {
            let new = !seen.contains(&t.name);
            seen.push(t.name);
            new
        })
        .chain(BOOKKEEPING.iter().copied())
}

/// Looks a warehouse table up by name.
pub fn table(name: &str) -> Option<&'static TableDef> {
    catalogue().find(|t| t.name == name)
}

/// The check of a feed that needs nothing beyond its engine and params list.
fn nothing_more(_route: &str, _params: &Params) -> Result<(), String> {
    Ok(())
}

/// A param that must be a route under `/api/` with the given placeholders.
fn route_param(value: Option<&str>, name: &str, holes: &[&str]) -> Result<(), String> {
    let route = value.unwrap_or_default();
    if !route.starts_with("/api/") || holes.iter().any(|h| !route.contains(h)) {
        let with = if holes.is_empty() {
            String::new()
        } else {
            format!(" with {}", holes.join(", "))
        };
        return Err(format!("needs params.{name}, a route starting /api/{with}"));
    }
    Ok(())
}

/// A page size the paged routes accept.
fn page_limit(params: &Params) -> Result<(), String> {
    match params.page_limit {
        Some(limit) if !(1..=200).contains(&limit) => Err(format!("params.page_limit = {limit}: use 1 to 200")),
        _ => Ok(()),
    }
}

/// Parses a whole response body as `T`, naming what failed.
fn parse_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_is_declared_once_with_keys_that_name_its_columns() {
        let names: Vec<&str> = catalogue().map(|t| t.name).collect();
        let mut distinct = names.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(names.len(), distinct.len(), "{names:?}");
        for t in catalogue() {
            for k in t.key {
                assert!(t.columns.iter().any(|c| c.name == *k), "{}: key {k}", t.name);
            }
            assert!(
                !t.key.is_empty() || t.load == crate::tables::LoadRule::Append,
                "{}",
                t.name
            );
            for c in t.keep_stored.iter().chain(t.newer_by.iter()) {
                assert!(
                    t.columns.iter().any(|k| k.name == *c && !t.key.contains(c)),
                    "{}: {c}",
                    t.name
                );
            }
            if let Some(p) = t.lake_partition {
                assert!(t.columns.iter().any(|c| c.name == p.source()), "{}", t.name);
            }
        }
    }

    #[test]
    fn feed_names_are_distinct_and_routes_fit_their_engines() {
        for (i, f) in FEEDS.iter().enumerate() {
            assert!(FEEDS[..i].iter().all(|g| g.name != f.name), "{}", f.name);
            for hole in f.fetch.holes() {
                assert!(f.route.contains(hole), "{}: {hole}", f.name);
            }
        }
    }
}
