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
    /// `none`: one request per run; `universe`: one per configured company.
    pub fan_out: String,
    /// How a response continues: `single` (one response holds everything).
    pub paging: String,
    /// Which record mapper reads the response: `company`, `prices`, `dividends`, `indices`, `coverage`.
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOut {
    None,
    Universe,
    /// One request per configured country (`universe.countries`).
    Countries,
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
            other => {
                return Err(err(format!(
                    "fan_out = {other:?}: expected \"none\", \"universe\" or \"countries\""
                )));
            }
        };
        if (fan_out == FanOut::Universe) != raw.route.contains("{company}") {
            return Err(err(
                "route must contain {company} exactly when fan_out = \"universe\"".into()
            ));
        }
        if (fan_out == FanOut::Countries) != raw.route.contains("{country}") {
            return Err(err(
                "route must contain {country} exactly when fan_out = \"countries\"".into()
            ));
        }
        if raw.paging != "single" {
            return Err(err(format!("paging = {:?}: expected \"single\"", raw.paging)));
        }
        let records = Records::parse(&raw.records).ok_or_else(|| {
            err(format!(
                "records = {:?}: expected one of company, prices, dividends, indices, coverage, macro",
                raw.records
            ))
        })?;
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
