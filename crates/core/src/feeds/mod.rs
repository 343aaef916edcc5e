//! Feeds: one module per upstream route family. Each declares its wire
//! shapes, its tables (with `table!` (`crate::batch`), a row struct per
//! table), how a response becomes rows, and which generic fetch engine of
//! [`crate::sync`] reads it ([`Fetch`]). [`FEEDS`] is the registry: a pipeline
//! file names a feed, and the warehouse catalogue ([`catalogue`]) is every
//! feed's tables.
//!
//! Adding a feed is a file here declaring its `pub static ...: Feed`, its
//! `mod` line and its place in [`FEEDS`] below, a pipeline file and the
//! emulator's route; a table added to a feed's response is a
//! `table!` and its rows in that feed's module.
//! `tests::every_feed_file_is_declared_and_registered` names a file left out.

mod fetch;

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

/// Every feed fdsync reads, in the order the catalogue and the docs list
/// their tables.
pub static FEEDS: &[&Feed] = &[
    &companies::FEED,
    &coverage::FEED,
    &dividends::FEED,
    &events::FEED,
    &events::WIRE,
    &events::LATEST,
    &events::TEXTS,
    &filings::FEED,
    &geo::FEED,
    &indices::FEED,
    &macro_series::FEED,
    &monthly_revenue::FEED,
    &news::FEED,
    &news::COMPANY,
    &news::SOURCES,
    &news::TOPICS,
    &news::BODIES,
    &news::TOP,
    &news::SEARCHES,
    &prices::FEED,
    &regulation::FEED,
];

use serde::Deserialize;

use crate::bookkeeping::BOOKKEEPING;
use crate::records::Rows;
use crate::tables::TableDef;
pub use crate::upstream::BodyError;

pub use self::fetch::*;

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
    /// The same as a date: the backfill stops at its start (UTC), whenever it runs.
    #[serde(default, deserialize_with = "date_or_text")]
    pub since: Option<chrono::NaiveDate>,
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
    /// news_bodies: the most requests a UTC day (default 25).
    pub daily_requests: Option<u32>,
    /// events_wire: closed days back whose tally by family is asked, once each (default 7; 0: none).
    pub tally_days: Option<u32>,
}

impl Params {
    /// Where a backfill stops, `backfill_days` back from `now`; `None`: at
    /// the start of what the service serves.
    pub fn horizon(&self, now: chrono::DateTime<chrono::Utc>) -> Option<chrono::DateTime<chrono::Utc>> {
        if let Some(day) = self.since {
            return Some(day.and_time(chrono::NaiveTime::MIN).and_utc());
        }
        self.backfill_days
            .map(|days| now - chrono::Duration::days(i64::from(days)))
    }

    /// The names of the params set.
    pub fn set(&self) -> Vec<&'static str> {
        let Params {
            first_range,
            restate_days,
            series_route,
            backfill_days,
            since,
            page_limit,
            text_days,
            section_route,
            layers_route,
            recheck_days,
            stream_route,
            daily_requests,
            tally_days,
        } = self;
        [
            ("first_range", first_range.is_some()),
            ("restate_days", restate_days.is_some()),
            ("series_route", series_route.is_some()),
            ("backfill_days", backfill_days.is_some()),
            ("since", since.is_some()),
            ("page_limit", page_limit.is_some()),
            ("text_days", text_days.is_some()),
            ("section_route", section_route.is_some()),
            ("layers_route", layers_route.is_some()),
            ("recheck_days", recheck_days.is_some()),
            ("stream_route", stream_route.is_some()),
            ("daily_requests", daily_requests.is_some()),
            ("tally_days", tally_days.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect()
    }
}

/// `since`: a TOML date (`2024-01-01`) or the same as text.
fn date_or_text<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<chrono::NaiveDate>, D::Error> {
    let value = toml::Value::deserialize(d)?;
    let text = match &value {
        toml::Value::String(s) => s.clone(),
        toml::Value::Datetime(dt) => dt.to_string(),
        other => other.to_string(),
    };
    chrono::NaiveDate::parse_from_str(&text, "%Y-%m-%d")
        .map(Some)
        .map_err(|_| serde::de::Error::custom(format!("since = {text}: expected a date such as 2024-01-01")))
}

/// Looks a feed up by name.
pub fn feed(name: &str) -> Option<&'static Feed> {
    FEEDS.iter().copied().find(|f| f.name == name)
}

/// Every warehouse table: the feeds' (each once, in registry order, a
/// table that keeps versions followed by its versions table), then the
/// bookkeeping tables.
pub fn catalogue() -> impl Iterator<Item = &'static TableDef> {
    static TABLES: std::sync::OnceLock<Vec<&'static TableDef>> = std::sync::OnceLock::new();
    let tables = TABLES.get_or_init(|| {
        let mut tables: Vec<&'static TableDef> = Vec::new();
        for table in FEEDS.iter().flat_map(|f| f.tables.iter().copied()) {
            if tables.iter().any(|t| t.name == table.name) {
                continue;
            }
            tables.push(table);
            if table.versions {
                tables.push(Box::leak(Box::new(table.versions_table())));
            }
        }
        tables.extend(BOOKKEEPING.iter().copied());
        tables
    });
    tables.iter().copied()
}

/// Looks a warehouse table up by name.
pub fn table(name: &str) -> Option<&'static TableDef> {
    catalogue().find(|t| t.name == name)
}

/// Reads `body` as every response of every feed, with each reader its
/// engine gives the feed: what the `pages` fuzz target and the seed test run.
/// A reader may refuse the body or quarantine its records; none may panic.
pub fn read_as_every_response(rows: &mut Rows, body: &[u8]) {
    const COMPANY: &str = "0000320193";
    const DOCUMENT: &str = "0000320193-26-000001";
    let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 25).expect("a date");
    for feed in FEEDS {
        match &feed.fetch {
            Fetch::Single(read) => {
                let _ = read(rows, body);
            }
            Fetch::Universe(read) => {
                let _ = read(rows, body);
            }
            Fetch::PerCompany(per_company) => {
                let _ = (per_company.read)(rows, body, COMPANY);
            }
            Fetch::PerCountry(per_country) => {
                let listed = (per_country.list)(rows, body).unwrap_or_default();
                let entry = serde_json::value::RawValue::from_string(r#"{"key":"GDP"}"#.into()).expect("JSON");
                let fallback = Listed {
                    key: "GDP".into(),
                    raw: entry,
                };
                for listed in listed.iter().take(3).chain([&fallback]) {
                    let _ = (per_country.read)(rows, body, "US", listed);
                }
            }
            Fetch::Cursor(tape) | Fetch::CompanyCursor(tape) | Fetch::SearchCursor(tape) => {
                let _ = (tape.head)(body, true);
                let _ = (tape.read)(rows, body, Some(COMPANY));
            }
            Fetch::CompanyIndex(index) => {
                let _ = (index.read)(rows, body, COMPANY);
            }
            Fetch::OffsetWindows(windows) => {
                let _ = (windows.read)(rows, body);
                if let Some(tally) = windows.tally {
                    let _ = (tally.read)(rows, body, day, &["earnings".to_owned()]);
                }
            }
            // Bodies that are not UTF-8 are quarantined before a text reader sees them.
            Fetch::ParentTexts(texts) => {
                if let Ok(text) = std::str::from_utf8(body) {
                    (texts.read)(rows, text, COMPANY, DOCUMENT, "2.02");
                }
            }
            Fetch::DocumentsAndSections(parts) => {
                let _ = (parts.list)(rows, body, COMPANY);
                let part = Part {
                    key: "mdna".into(),
                    title: None,
                };
                let _ = (parts.read_part)(rows, body, COMPANY, DOCUMENT, &part);
            }
            Fetch::Layers(layers) => {
                let _ = (layers.list)(rows, body, day);
                let _ = (layers.read)(rows, body, day);
            }
            Fetch::Details(details) => {
                let _ = (details.read)(rows, body, "n_0000000001");
            }
        }
    }
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

/// Reads a response's envelope; an error names the field that failed, from
/// a second read that tracks the path, which only a failure pays for. A body
/// that is not whole JSON is [`BodyError::Malformed`] (asked again); whole
/// JSON without what the envelope needs (its list absent, renamed or `null`)
/// is [`BodyError::Unreadable`], naming the top-level fields it did have.
/// [`parse_body`] for a reader that maps rows: an envelope field no reader
/// reads is noted ([`Rows::note_envelope`]). One pass: serde_ignored only
/// watches the envelope's own fields go by.
fn parse_envelope<'a, T: Deserialize<'a>>(rows: &mut Rows, body: &'a [u8]) -> Result<T, BodyError> {
    let mut ignored = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(body);
    match serde_ignored::deserialize(&mut de, |path| ignored.push(path.to_string())) {
        Ok(parsed) if de.end().is_ok() => {
            if !ignored.is_empty() {
                rows.note_envelope(&ignored, body);
            }
            Ok(parsed)
        }
        // The reasons as `parse_body` words them.
        _ => parse_body(body),
    }
}

fn parse_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, BodyError> {
    let first = match serde_json::from_slice(body) {
        Ok(parsed) => return Ok(parsed),
        Err(e) => e,
    };
    let message = match serde_path_to_error::deserialize::<_, T>(&mut serde_json::Deserializer::from_slice(body)) {
        Ok(parsed) => return Ok(parsed),
        Err(e) if e.path().iter().next().is_none() => e.into_inner().to_string(),
        Err(e) => {
            let path = e.path().to_string();
            format!("field `{path}`: {}", e.into_inner())
        }
    };
    if first.classify() != serde_json::error::Category::Data {
        return Err(BodyError::Malformed(message));
    }
    // Where in a long line a field was missing tells no one anything.
    let message = match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    };
    Err(BodyError::Unreadable(match top_level_fields(body) {
        Some(fields) if fields.is_empty() => format!("{message}; the body is an empty object"),
        Some(fields) => format!("{message}; the body's top-level fields: {}", fields.join(", ")),
        None => format!("{message}; the body is not a JSON object"),
    }))
}

/// The names of a JSON object's fields, in the order served; `None` for
/// anything but an object. At most 32, each cut to 64 characters: a name is
/// the service's text, and goes into logs and the run log.
fn top_level_fields(body: &[u8]) -> Option<Vec<String>> {
    struct Fields(Vec<String>);
    impl<'de> Deserialize<'de> for Fields {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Fields;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("an object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                    let mut names = Vec::new();
                    while let Some(name) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        if names.len() < 32 {
                            names.push(name.chars().take(64).collect::<String>());
                        }
                    }
                    Ok(Fields(names))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    serde_json::from_slice::<Fields>(body).ok().map(|f| f.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of this folder that declares a feed has its `mod` line
    /// and each of its feeds a place in [`FEEDS`]: a file left out would
    /// not even be compiled, so this reads the folder as text.
    #[test]
    fn every_feed_file_is_declared_and_registered() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/feeds");
        let this = std::fs::read_to_string(dir.join("mod.rs")).unwrap();
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "rs"))
            .collect();
        files.sort();
        let mut checked = 0;
        for path in files {
            let module = path.file_stem().unwrap().to_str().unwrap().to_owned();
            let text = std::fs::read_to_string(&path).unwrap();
            let statics: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("pub static ")?.strip_suffix(": Feed = Feed {"))
                .collect();
            if statics.is_empty() {
                continue;
            }
            assert!(
                this.contains(&format!("\npub mod {module};\n")),
                "src/feeds/{module}.rs declares a feed but has no `pub mod {module};` line in src/feeds/mod.rs"
            );
            for name in statics {
                assert!(
                    this.contains(&format!("    &{module}::{name},\n")),
                    "src/feeds/{module}.rs: its feed {name} is not listed in FEEDS (src/feeds/mod.rs)"
                );
                checked += 1;
            }
        }
        assert_eq!(checked, FEEDS.len(), "FEEDS lists a feed no file declares as a static");
    }

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
            for (c, _) in t.compression {
                assert!(t.all_columns().any(|k| k.name == *c), "{}: compression of {c}", t.name);
            }
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
            // Every data table whose rows change keeps what it held; its
            // versions are dated by the lineage's `_fetched_at`.
            let changes = matches!(
                t.load,
                crate::tables::LoadRule::Upsert | crate::tables::LoadRule::Replace
            );
            assert_eq!(t.versions, changes && !t.is_bookkeeping(), "{}: versions", t.name);
            if t.versions {
                assert!(t.lineage, "{}: versions without lineage", t.name);
                let name = t.versions_name();
                assert!(
                    catalogue().any(|v| v.name == name && v.versions_of == Some(t.name)),
                    "{}",
                    t.name
                );
            }
        }
    }

    /// A legal timestamp where the emulator sends a date (and the reverse)
    /// loads rather than quarantines: a filing, a regulation action, an event.
    #[test]
    fn dates_served_as_timestamps_and_timestamps_as_dates_load() {
        let day = chrono::NaiveDate::from_ymd_opt(2026, 11, 25).unwrap();
        let note: filings::FilingNote = serde_json::from_str(
            r#"{"accession":"a-1","filedAt":"2026-11-25T16:05:09-05:00","periodEnd":null,"sections":[]}"#,
        )
        .unwrap();
        assert_eq!((note.filed_at, note.period_end), (Some(day), None));
        let event: events::EventEntry = serde_json::from_str(
            r#"{"accession":"a-2","items":[],"filingDate":"2026-11-25T00:00:00Z","acceptedAt":"2026-11-25"}"#,
        )
        .unwrap();
        assert_eq!(event.filing_date, Some(day));
        assert_eq!(event.accepted_at, Some("2026-11-25T00:00:00Z".parse().unwrap()));
        let refused = serde_json::from_str::<filings::FilingNote>(
            r#"{"accession":"a-3","filedAt":"last Tuesday","sections":[]}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            refused.contains("last Tuesday") && refused.contains("RFC 3339"),
            "{refused}"
        );
    }

    /// Envelope fields no reader reads, at the top, in a market object of
    /// coverage, or beside a series' history: each named from the body's
    /// root and kept with its value; the records read as without them.
    #[test]
    fn envelope_fields_no_reader_reads_are_named_and_kept() {
        let mut rows = Rows::new("run", "/api/v1/landing/coverage", chrono::DateTime::UNIX_EPOCH);
        let Fetch::Single(read) = &feed("coverage").expect("coverage").fetch else {
            unreachable!("coverage is one request")
        };
        let body = r#"{"generatedAt":"2026-11-25T00:00:00Z","factSource":{"ref":"fs_1"},"markets":[{"market":"US","companies":5,"currency":"USD","dataTypes":[{"type":"prices","historyFrom":"1990-01-02","completenessPct":99.1,"periods":10}]}]}"#;
        read(&mut rows, body.as_bytes()).expect("read");
        let kept: Vec<(&str, &str)> = rows
            .envelope
            .iter()
            .map(|f| (f.unknown.field.as_str(), f.value.as_str()))
            .collect();
        assert_eq!(
            kept,
            [
                ("$.factSource", r#"{"ref":"fs_1"}"#),
                ("$.markets[].currency", r#""USD""#)
            ]
        );
        assert_eq!(rows.unknown_fields.len(), 2);
        assert_eq!(rows.unknown_fields[0].route, "/api/v1/landing/coverage");

        let mut rows = Rows::new(
            "run",
            "/api/v1/countries/US/series?key=GDP",
            chrono::DateTime::UNIX_EPOCH,
        );
        let Fetch::PerCountry(per_country) = &feed("macro").expect("macro").fetch else {
            unreachable!("macro goes by country")
        };
        let listed = Listed {
            key: "GDP".into(),
            raw: serde_json::value::RawValue::from_string(r#"{"key":"GDP"}"#.into()).expect("JSON"),
        };
        let body = r#"{"history":[{"period":"2026-09-01","value":2.9,"vintage":"2026-10-15"}],"frequency":"quarterly","units":"percent"}"#;
        (per_country.read)(&mut rows, body.as_bytes(), "US", &listed).expect("read");
        assert_eq!(rows.envelope.len(), 1);
        assert_eq!(rows.envelope[0].unknown.field, "$.units");
        assert_eq!(rows.envelope[0].unknown.route, "/api/v1/countries/{iso}/series");
        assert_eq!(rows.envelope[0].value, r#""percent""#);
        assert!(rows.row_count() >= 1, "the history still reads");
    }

    /// A list absent, renamed or null is unreadable (the body names what it
    /// had); a body cut short is malformed, and asked again.
    #[test]
    fn an_envelope_without_its_list_is_unreadable_and_a_cut_body_malformed() {
        #[derive(Debug, Deserialize)]
        struct Page<'a> {
            #[serde(borrow)]
            #[allow(dead_code)]
            events: Vec<&'a serde_json::value::RawValue>,
        }
        for (body, expected) in [
            (
                r#"{"total": 3, "data": []}"#,
                "missing field `events`; the body's top-level fields: total, data",
            ),
            (r#"{"events": null}"#, "the body's top-level fields: events"),
            ("{}", "the body is an empty object"),
            ("[1, 2]", "the body is not a JSON object"),
        ] {
            match parse_body::<Page>(body.as_bytes()) {
                Err(BodyError::Unreadable(why)) => assert!(why.contains(expected), "{body}: {why}"),
                other => panic!("{body}: {other:?}"),
            }
        }
        assert!(matches!(
            parse_body::<Page>(br#"{"events": [{"a": 1}"#),
            Err(BodyError::Malformed(_))
        ));
        assert_eq!(parse_body::<Page>(br#"{"events": []}"#).unwrap().events.len(), 0);
    }

    /// The `pages` fuzz target's seeds, each read as every response.
    #[test]
    fn every_reader_takes_every_seed_page_without_panic_and_makes_valid_batches() {
        let seeds = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/pages");
        let mut read = 0;
        for entry in std::fs::read_dir(&seeds).expect("the seeds") {
            let body = std::fs::read(entry.expect("a seed").path()).expect("a seed's bytes");
            let mut rows = Rows::new("run-seed", "/api/v1/seed", chrono::DateTime::UNIX_EPOCH);
            read_as_every_response(&mut rows, &body);
            rows.into_batches().expect("mapped rows make valid batches");
            read += 1;
        }
        assert!(read >= 10, "{read} seeds");
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
