//! Declarative pipelines: one TOML file per pipeline under `pipelines/`, read into
//! [`RawPipeline`] and validated into a [`Pipeline`], with errors naming the file
//! and the key at fault.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

use crate::config::ConfigError;
use crate::tables::{self, LoadRule, TableDef};

/// A pipeline file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Pipeline name; must equal the file name without `.toml`.
    pub name: String,
    /// One line for `--help`, status and docs.
    pub description: String,
    /// Request path under the base URL; `{company}` stands for each company of the universe.
    pub route: String,
    /// Whether the route needs the API key (public routes such as coverage do not).
    #[serde(default = "yes")]
    pub auth: bool,
    /// `none`: one request per run; `universe`: one per configured company;
    /// `countries`: one per configured country; `parent`: one per row of the
    /// `parent` table still missing its child rows.
    pub fan_out: String,
    /// With `fan_out = "parent"`: the table whose rows drive the requests.
    pub parent: Option<String>,
    /// How a response continues: `single` (one response holds everything),
    /// `cursor` (news cursors: `after` forward, `before` back), `offset`
    /// (the events wire: date windows paged by offset).
    pub paging: String,
    /// Which strategy reads the responses (see [`Records`]).
    pub records: String,
    /// Tables written, each with its key and load rule exactly as the warehouse contract states them.
    pub tables: Vec<RawTarget>,
    /// Standard 5-field cron expression (UTC) for `fdsync daemon`.
    pub schedule: String,
    /// Lower runs first when a run cannot do everything.
    pub priority: u32,
    /// Mapper-specific settings.
    #[serde(default)]
    pub params: Params,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTarget {
    pub name: String,
    pub key: Vec<String>,
    pub load: String,
}

/// Settings a mapper may take.
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOut {
    None,
    Universe,
    /// One request per configured country (`universe.countries`).
    Countries,
    /// One request per row of a parent table that still lacks its children.
    Parent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paging {
    Single,
    Cursor,
    Offset,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Records {
    Company,
    Prices,
    Dividends,
    Indices,
    Coverage,
    /// A country's series list, then each series' point-in-time history.
    Macro,
    /// The news tape: forward with `after` and `changedSince`, back with `before`.
    News,
    /// Each company's own news (lineage included), with the same cursors.
    CompanyNews,
    NewsSources,
    NewsTopics,
    /// The per-company 8-K index: whole history once, then only what is new.
    Events,
    /// The market-wide 8-K wire, by date windows.
    EventsWire,
    EventsLatest,
    /// 8-K item texts, once per (accession, item).
    EventTexts,
    Regulation,
    MonthlyRevenue,
    /// Filing notes and their section texts.
    Filings,
    /// Geo layers, then reviewed-asset counts per country.
    Geo,
}

impl Records {
    /// The fan-out and paging this strategy works with.
    fn shape(self) -> (FanOut, Paging) {
        use Records::*;
        match self {
            Company | Prices | Dividends | Regulation | MonthlyRevenue | Filings | Events => {
                (FanOut::Universe, Paging::Single)
            }
            Indices | Coverage | NewsSources | NewsTopics | EventsLatest | Geo => (FanOut::None, Paging::Single),
            Macro => (FanOut::Countries, Paging::Single),
            News => (FanOut::None, Paging::Cursor),
            CompanyNews => (FanOut::Universe, Paging::Cursor),
            EventsWire => (FanOut::None, Paging::Offset),
            EventTexts => (FanOut::Parent, Paging::Single),
        }
    }
}

impl Records {
    fn parse(s: &str) -> Option<Records> {
        Some(match s {
            "company" => Records::Company,
            "prices" => Records::Prices,
            "dividends" => Records::Dividends,
            "indices" => Records::Indices,
            "coverage" => Records::Coverage,
            "macro" => Records::Macro,
            "news" => Records::News,
            "company_news" => Records::CompanyNews,
            "news_sources" => Records::NewsSources,
            "news_topics" => Records::NewsTopics,
            "events" => Records::Events,
            "events_wire" => Records::EventsWire,
            "events_latest" => Records::EventsLatest,
            "event_texts" => Records::EventTexts,
            "regulation" => Records::Regulation,
            "monthly_revenue" => Records::MonthlyRevenue,
            "filings" => Records::Filings,
            "geo" => Records::Geo,
            _ => return None,
        })
    }
}

/// The price lookback ranges the service accepts.
pub const PRICE_RANGES: &[&str] = &["1M", "3M", "6M", "YTD", "1Y", "2Y", "5Y", "ALL"];

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    pub description: String,
    pub route: String,
    pub auth: bool,
    pub fan_out: FanOut,
    pub paging: Paging,
    /// With [`FanOut::Parent`]: the table whose rows drive the requests.
    pub parent: Option<&'static TableDef>,
    pub records: Records,
    pub tables: Vec<&'static TableDef>,
    pub schedule_text: String,
    pub schedule: cron::Schedule,
    pub priority: u32,
    pub params: Params,
    pub file: PathBuf,
}

impl Pipeline {
    /// Validates a raw pipeline read from `file`.
    ///
    /// # Errors
    /// Names the file and the key that is wrong.
    pub fn try_from_raw(raw: RawPipeline, file: &Path) -> Result<Pipeline, ConfigError> {
        let err = |message: String| ConfigError::Pipeline {
            path: file.to_owned(),
            message,
        };
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if raw.name != stem {
            return Err(err(format!("name = {:?} must equal the file name {stem:?}", raw.name)));
        }
        if !raw.route.starts_with("/api/") {
            return Err(err(format!("route = {:?} must start with /api/", raw.route)));
        }
        let fan_out = match raw.fan_out.as_str() {
            "none" => FanOut::None,
            "universe" => FanOut::Universe,
            "countries" => FanOut::Countries,
            "parent" => FanOut::Parent,
            other => {
                return Err(err(format!(
                    "fan_out = {other:?}: expected \"none\", \"universe\", \"countries\" or \"parent\""
                )));
            }
        };
        if fan_out == FanOut::Universe && !raw.route.contains("{company}") {
            return Err(err("fan_out = \"universe\" needs {company} in route".into()));
        }
        if fan_out == FanOut::None && raw.route.contains("{company}") {
            return Err(err("route has {company}: use fan_out = \"universe\"".into()));
        }
        let parent = match (&raw.parent, fan_out) {
            (Some(name), FanOut::Parent) => {
                Some(tables::table(name).ok_or_else(|| err(format!("parent = {name:?} is not a warehouse table")))?)
            }
            (None, FanOut::Parent) => return Err(err("fan_out = \"parent\" needs parent = \"<table>\"".into())),
            (Some(_), _) => return Err(err("parent is only for fan_out = \"parent\"".into())),
            (None, _) => None,
        };
        if (fan_out == FanOut::Countries) != raw.route.contains("{country}") {
            return Err(err(
                "route must contain {country} exactly when fan_out = \"countries\"".into()
            ));
        }
        let paging = match raw.paging.as_str() {
            "single" => Paging::Single,
            "cursor" => Paging::Cursor,
            "offset" => Paging::Offset,
            other => {
                return Err(err(format!(
                    "paging = {other:?}: expected \"single\", \"cursor\" or \"offset\""
                )));
            }
        };
        let records = Records::parse(&raw.records).ok_or_else(|| {
            err(format!(
                "records = {:?}: expected one of company, prices, dividends, indices, coverage, macro, news, \
                 company_news, news_sources, news_topics, events, events_wire, events_latest, event_texts, \
                 regulation, monthly_revenue, filings, geo",
                raw.records
            ))
        })?;
        let (want_fan_out, want_paging) = records.shape();
        if (fan_out, paging) != (want_fan_out, want_paging) {
            return Err(err(format!(
                "records = {:?} works with fan_out = {:?} and paging = {:?}",
                raw.records,
                format!("{want_fan_out:?}").to_lowercase(),
                format!("{want_paging:?}").to_lowercase()
            )));
        }
        if let Some(limit) = raw.params.page_limit
            && !(1..=200).contains(&limit)
        {
            return Err(err(format!("params.page_limit = {limit}: use 1 to 200")));
        }
        let needs = |param: &Option<String>, name: &str, holes: &[&str]| -> Result<(), ConfigError> {
            let route = param.as_deref().unwrap_or_default();
            if !route.starts_with("/api/") || holes.iter().any(|h| !route.contains(h)) {
                return Err(err(format!(
                    "records = {:?} needs params.{name}, a route starting /api/ with {}",
                    raw.records,
                    holes.join(", ")
                )));
            }
            Ok(())
        };
        match records {
            Records::Filings => needs(
                &raw.params.section_route,
                "section_route",
                &["{company}", "{accession}", "{section}"],
            )?,
            Records::Geo => {
                needs(&raw.params.layers_route, "layers_route", &[])?;
                if !raw.route.contains("{layers}") {
                    return Err(err("records = \"geo\" needs {layers} in route".into()));
                }
            }
            Records::News if raw.params.stream_route.is_some() => needs(&raw.params.stream_route, "stream_route", &[])?,
            _ if raw.params.stream_route.is_some() => {
                return Err(err(format!(
                    "params.stream_route: only records = \"news\" has a live stream, not {:?}",
                    raw.records
                )));
            }
            Records::EventTexts if !raw.route.contains("{accession}") => {
                return Err(err(
                    "records = \"event_texts\" needs {company} and {accession} in route".into(),
                ));
            }
            _ => {}
        }
        let mut targets = Vec::new();
        for t in &raw.tables {
            let def =
                tables::table(&t.name).ok_or_else(|| err(format!("tables: {:?} is not a warehouse table", t.name)))?;
            if t.key != def.key {
                return Err(err(format!(
                    "tables.{}: key {:?} differs from the warehouse contract's {:?}",
                    t.name, t.key, def.key
                )));
            }
            if LoadRule::parse(&t.load) != Some(def.load) {
                return Err(err(format!(
                    "tables.{}: load = {:?} differs from the warehouse contract's {:?}",
                    t.name, t.load, def.load
                )));
            }
            targets.push(def);
        }
        if targets.is_empty() {
            return Err(err("tables: at least one table is written".into()));
        }
        let schedule = parse_schedule(&raw.schedule).map_err(|e| err(format!("schedule = {:?}: {e}", raw.schedule)))?;
        if let Some(range) = &raw.params.first_range
            && !PRICE_RANGES.contains(&range.as_str())
        {
            return Err(err(format!(
                "params.first_range = {range:?}: expected one of {PRICE_RANGES:?}"
            )));
        }
        if records == Records::Macro {
            let route = raw.params.series_route.as_deref().unwrap_or_default();
            if fan_out != FanOut::Countries || !route.contains("{country}") || !route.contains("{series}") {
                return Err(err(
                    "records = \"macro\" needs fan_out = \"countries\" and params.series_route with {country} and {series}"
                        .into(),
                ));
            }
        }
        Ok(Pipeline {
            name: raw.name,
            description: raw.description,
            route: raw.route,
            auth: raw.auth,
            fan_out,
            paging,
            parent,
            records,
            tables: targets,
            schedule_text: raw.schedule,
            schedule,
            priority: raw.priority,
            params: raw.params,
            file: file.to_owned(),
        })
    }
}

/// Reads every `*.toml` in `dir`, keeps those in `enabled` (all when `None`), and
/// orders them by priority.
///
/// # Errors
/// An unreadable or invalid file, or an enabled name without a file.
pub fn load_dir(dir: &Path, enabled: Option<&[String]>) -> Result<Vec<Pipeline>, ConfigError> {
    let read_err = |message: String| ConfigError::Pipeline {
        path: dir.to_owned(),
        message,
    };
    let entries = std::fs::read_dir(dir).map_err(|e| read_err(format!("cannot read the pipelines folder: {e}")))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut pipelines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).map_err(|e| ConfigError::Pipeline {
            path: file.clone(),
            message: e.to_string(),
        })?;
        let raw: RawPipeline = toml::from_str(&text).map_err(|e| ConfigError::Pipeline {
            path: file.clone(),
            message: e.to_string(),
        })?;
        pipelines.push(Pipeline::try_from_raw(raw, &file)?);
    }
    if let Some(names) = enabled {
        for name in names {
            if !pipelines.iter().any(|p| &p.name == name) {
                let known: Vec<&str> = pipelines.iter().map(|p| p.name.as_str()).collect();
                return Err(read_err(format!(
                    "no pipeline named {name:?} (known: {})",
                    known.join(", ")
                )));
            }
        }
        pipelines.retain(|p| names.contains(&p.name));
    }
    pipelines.sort_by(|a, b| a.priority.cmp(&b.priority).then_with(|| a.name.cmp(&b.name)));
    Ok(pipelines)
}

/// Parses a standard 5-field cron expression (as crontab and Kubernetes write
/// them) into the `cron` crate's 6-field form: a seconds field is added, and
/// numeric days of the week (0 or 7 = Sunday) become names, because the crate
/// numbers them from Sunday = 1.
pub fn parse_schedule(expr: &str) -> Result<cron::Schedule, String> {
    let fields: Vec<&str> = expr.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week), found {}",
            fields.len()
        ));
    }
    let dow = normalise_dow(fields[4])?;
    let six = format!("0 {} {} {} {} {}", fields[0], fields[1], fields[2], fields[3], dow);
    cron::Schedule::from_str(&six).map_err(|e| e.to_string())
}

const DAY_NAMES: [&str; 8] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"];

fn normalise_dow(field: &str) -> Result<String, String> {
    let day = |s: &str| -> Result<String, String> {
        match s.parse::<usize>() {
            Ok(n) if n <= 7 => Ok(DAY_NAMES[n].to_owned()),
            Ok(n) => Err(format!("day of week {n} is out of range 0-7")),
            Err(_) => Ok(s.to_ascii_uppercase()),
        }
    };
    let mut parts = Vec::new();
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, Some(s)),
            None => (part, None),
        };
        let step = step.map(|s| format!("/{s}")).unwrap_or_default();
        match range.split_once('-') {
            _ if range == "*" || range == "?" => parts.push(format!("{range}{step}")),
            Some((a, b)) => {
                let (a, b_name) = (day(a)?, day(b)?);
                // 7 closes a range on Sunday, which the crate cannot reach from Monday upwards.
                if b.trim() == "7" && a != "SUN" {
                    parts.push(format!("{a}-SAT{step}"));
                    parts.push("SUN".into());
                } else {
                    parts.push(format!("{a}-{b_name}{step}"));
                }
            }
            None => parts.push(format!("{}{step}", day(range)?)),
        }
    }
    Ok(parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Utc, Weekday};

    #[test]
    fn weekday_schedules_mean_what_crontab_means() {
        let s = parse_schedule("30 22 * * 1-5").unwrap();
        let from = Utc.with_ymd_and_hms(2026, 11, 27, 23, 0, 0).unwrap(); // a Friday night
        let next = s.after(&from).next().unwrap();
        assert_eq!(next.weekday(), Weekday::Mon);
        let sunday = parse_schedule("0 6 * * 0").unwrap().after(&from).next().unwrap();
        assert_eq!(sunday.weekday(), Weekday::Sun);
        let weekend = parse_schedule("0 6 * * 6-7").unwrap();
        let days: Vec<Weekday> = weekend.after(&from).take(2).map(|d| d.weekday()).collect();
        assert_eq!(days, [Weekday::Sat, Weekday::Sun]);
    }

    #[test]
    fn rejects_six_field_and_bad_expressions() {
        assert!(parse_schedule("0 30 22 * * 1-5").is_err());
        assert!(parse_schedule("61 * * * *").is_err());
        assert!(parse_schedule("0 0 * * 9").is_err());
    }
}
