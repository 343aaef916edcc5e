//! Pipeline files: one TOML file per pipeline under `pipelines/`, naming a
//! feed ([`crate::feeds`]) and what an operator tunes about it: its schedule,
//! priority, params, whether it runs, and its route where that varies. Read
//! into [`RawPipeline`] and validated into a [`Pipeline`], with errors naming
//! the file and the key at fault.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

use crate::config::ConfigError;
use crate::feeds::{self, FEEDS, Feed, Fetch};

pub use crate::feeds::Params;

/// A pipeline file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPipeline {
    /// Pipeline name; must equal the file name without `.toml`.
    pub name: String,
    /// One line for `--help`, status and docs.
    pub description: String,
    /// The feed it runs; default: the pipeline's name.
    pub feed: Option<String>,
    /// The request path under the base URL, when not the feed's own.
    pub route: Option<String>,
    /// Standard 5-field cron expression (UTC) for `fdsync daemon`.
    pub schedule: String,
    /// Lower runs first when a run cannot do everything.
    pub priority: u32,
    /// A pipeline file with `enabled = false` is left out of every run.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Feed-specific settings.
    #[serde(default)]
    pub params: Params,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone)]
pub struct Pipeline {
    pub name: String,
    pub description: String,
    pub feed: &'static Feed,
    pub route: String,
    pub schedule_text: String,
    pub schedule: cron::Schedule,
    pub priority: u32,
    pub enabled: bool,
    pub params: Params,
    pub file: PathBuf,
}

impl Pipeline {
    /// Whether the route needs the API key.
    pub fn auth(&self) -> bool {
        self.feed.auth
    }

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
        let feed_name = raw.feed.as_deref().unwrap_or(&raw.name);
        let feed = feeds::feed(feed_name).ok_or_else(|| {
            let known: Vec<&str> = FEEDS.iter().map(|f| f.name).collect();
            let key = if raw.feed.is_some() {
                "feed"
            } else {
                "name (no feed = given)"
            };
            err(format!(
                "{key} = {feed_name:?} is not a feed: expected one of {}",
                known.join(", ")
            ))
        })?;
        let route = raw.route.unwrap_or_else(|| feed.route.to_owned());
        if !route.starts_with("/api/") {
            return Err(err(format!("route = {route:?} must start with /api/")));
        }
        let holes = feed.fetch.holes();
        if let Some(missing) = holes.iter().find(|h| !route.contains(*h)) {
            return Err(err(format!(
                "route = {route:?}: feed {:?} needs {missing} in its route",
                feed.name
            )));
        }
        for hole in ["{company}", "{country}", "{accession}", "{layers}"] {
            if route.contains(hole) && !holes.contains(&hole) {
                return Err(err(format!(
                    "route = {route:?}: feed {:?} has nothing to put in {hole}",
                    feed.name
                )));
            }
        }
        if let Some(extra) = raw.params.set().into_iter().find(|p| !feed.params.contains(p)) {
            let takes = if feed.params.is_empty() {
                "none".to_owned()
            } else {
                feed.params.join(", ")
            };
            return Err(err(format!(
                "params.{extra}: feed {:?} does not use it (its params: {takes})",
                feed.name
            )));
        }
        (feed.check)(&route, &raw.params).map_err(|e| err(format!("feed {:?}: {e}", feed.name)))?;
        let schedule = parse_schedule(&raw.schedule).map_err(|e| err(format!("schedule = {:?}: {e}", raw.schedule)))?;
        Ok(Pipeline {
            name: raw.name,
            description: raw.description,
            feed,
            route,
            schedule_text: raw.schedule,
            schedule,
            priority: raw.priority,
            enabled: raw.enabled,
            params: raw.params,
            file: file.to_owned(),
        })
    }

    /// Whether the pipeline sends a request per company of the universe each run.
    pub fn per_company(&self) -> bool {
        self.feed.fetch.per_company()
    }

    /// Whether the pipeline only resolves the universe.
    pub fn resolves_universe(&self) -> bool {
        matches!(self.feed.fetch, Fetch::Universe(_))
    }
}

/// Reads every `*.toml` in `dir`, keeps those in `enabled` (all when `None`)
/// whose files do not say `enabled = false`, and orders them by priority.
///
/// # Errors
/// An unreadable or invalid file, or an enabled name without a file or whose
/// file disables it.
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
        if let Some(off) = pipelines.iter().find(|p| !p.enabled && names.contains(&p.name)) {
            return Err(ConfigError::Pipeline {
                path: off.file.clone(),
                message: format!(
                    "pipeline {:?} is named in [pipelines] enabled but its file says enabled = false",
                    off.name
                ),
            });
        }
        pipelines.retain(|p| names.contains(&p.name));
    }
    pipelines.retain(|p| p.enabled);
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

    fn load(text: &str) -> Result<Pipeline, String> {
        let file = Path::new("pipelines/test.toml");
        let raw: RawPipeline = toml::from_str(text).map_err(|e| e.to_string())?;
        Pipeline::try_from_raw(raw, file).map_err(|e| e.to_string())
    }

    #[test]
    fn every_shipped_pipeline_file_loads_and_every_feed_has_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("pipelines");
        let pipelines = load_dir(&dir, None).unwrap();
        for feed in FEEDS {
            assert!(
                pipelines.iter().any(|p| std::ptr::eq(p.feed, *feed)),
                "no shipped pipeline runs feed {}",
                feed.name
            );
        }
        let prices = pipelines.iter().find(|p| p.name == "prices").unwrap();
        assert_eq!(
            prices.route, "/api/v1/companies/{company}/prices",
            "the feed's own route"
        );
    }

    #[test]
    fn every_key_drives_something_and_a_wrong_one_is_named() {
        let base = "name = \"test\"\ndescription = \"d\"\nschedule = \"0 * * * *\"\npriority = 1\n";
        let ok = load(&format!(
            "{base}feed = \"prices\"\nroute = \"/api/v2/companies/{{company}}/prices\"\n"
        ))
        .unwrap();
        assert_eq!(ok.route, "/api/v2/companies/{company}/prices");
        let no_feed = load(base).unwrap_err();
        assert!(no_feed.contains("\"test\" is not a feed"), "{no_feed}");
        let param = load(&format!("{base}feed = \"indices\"\n[params]\nbackfill_days = 3\n")).unwrap_err();
        assert!(
            param.contains("params.backfill_days") && param.contains("indices"),
            "{param}"
        );
        let hole = load(&format!("{base}feed = \"prices\"\nroute = \"/api/v1/prices\"\n")).unwrap_err();
        assert!(hole.contains("needs {company}"), "{hole}");
        let extra = load(&format!("{base}feed = \"indices\"\nroute = \"/api/v1/{{company}}\"\n")).unwrap_err();
        assert!(extra.contains("nothing to put in {company}"), "{extra}");
        let check = load(&format!("{base}feed = \"filings\"\n[params]\ntext_days = 3\n")).unwrap_err();
        assert!(check.contains("params.section_route"), "{check}");
        let asserting = load(&format!("{base}feed = \"prices\"\nfan_out = \"universe\"\n")).unwrap_err();
        assert!(asserting.contains("fan_out"), "{asserting}");
    }

    #[test]
    fn a_disabled_pipeline_is_left_out_and_cannot_be_enabled_by_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("indices.toml"),
            "name = \"indices\"\ndescription = \"d\"\nschedule = \"0 * * * *\"\npriority = 1\nenabled = false\n",
        )
        .unwrap();
        assert!(load_dir(dir.path(), None).unwrap().is_empty());
        let named = load_dir(dir.path(), Some(&["indices".to_owned()]))
            .unwrap_err()
            .to_string();
        assert!(named.contains("enabled = false"), "{named}");
    }

    #[test]
    fn rejects_six_field_and_bad_expressions() {
        assert!(parse_schedule("0 30 22 * * 1-5").is_err());
        assert!(parse_schedule("61 * * * *").is_err());
        assert!(parse_schedule("0 0 * * 9").is_err());
    }
}
