//! Pipeline files: one TOML file per pipeline under `pipelines/`, naming a
//! feed ([`crate::feeds`]) and what an operator tunes about it: its schedule,
//! priority, params, whether it runs, and its route where that varies. Read
//! into [`RawPipeline`] and validated into a [`Pipeline`], with errors naming
//! the file and the key at fault.

use chrono::{DateTime, Utc};
use std::path::{Path, PathBuf};

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
    /// Standard 5-field cron expression (UTC), or `"auto"`: an interval
    /// derived from the quota, the priority and the measured cost of a run.
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
    pub schedule: Schedule,
    /// `schedule = "auto"`: [`crate::planner::cost::derive_schedules`] sets `schedule`.
    pub auto: bool,
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
        if raw.params.backfill_days.is_some() && raw.params.since.is_some() {
            return Err(err(
                "params.backfill_days and params.since both set: keep one (since is a date, backfill_days days back)"
                    .into(),
            ));
        }
        (feed.check)(&route, &raw.params).map_err(|e| err(format!("feed {:?}: {e}", feed.name)))?;
        let auto = raw.schedule.trim() == "auto";
        let schedule = if auto {
            Schedule::every_minutes(MINUTES_A_DAY)
        } else {
            parse_schedule(&raw.schedule).map_err(|e| err(format!("schedule = {:?}: {e}", raw.schedule)))?
        };
        Ok(Pipeline {
            name: raw.name,
            description: raw.description,
            feed,
            route,
            schedule_text: raw.schedule,
            schedule,
            auto,
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
/// The pipelines the binary carries (the repository's `pipelines/*.toml`):
/// what runs when the configured folder does not exist, and what `fdsync
/// init` writes out for editing. A test holds this list to the folder.
pub const SHIPPED: &[(&str, &str)] = &[
    ("companies.toml", include_str!("../../../pipelines/companies.toml")),
    (
        "company_news.toml",
        include_str!("../../../pipelines/company_news.toml"),
    ),
    ("coverage.toml", include_str!("../../../pipelines/coverage.toml")),
    ("dividends.toml", include_str!("../../../pipelines/dividends.toml")),
    ("event_texts.toml", include_str!("../../../pipelines/event_texts.toml")),
    ("events.toml", include_str!("../../../pipelines/events.toml")),
    (
        "events_latest.toml",
        include_str!("../../../pipelines/events_latest.toml"),
    ),
    ("events_wire.toml", include_str!("../../../pipelines/events_wire.toml")),
    ("filings.toml", include_str!("../../../pipelines/filings.toml")),
    ("geo.toml", include_str!("../../../pipelines/geo.toml")),
    ("indices.toml", include_str!("../../../pipelines/indices.toml")),
    ("macro.toml", include_str!("../../../pipelines/macro.toml")),
    (
        "monthly_revenue.toml",
        include_str!("../../../pipelines/monthly_revenue.toml"),
    ),
    ("news.toml", include_str!("../../../pipelines/news.toml")),
    ("news_bodies.toml", include_str!("../../../pipelines/news_bodies.toml")),
    (
        "news_searches.toml",
        include_str!("../../../pipelines/news_searches.toml"),
    ),
    (
        "news_sources.toml",
        include_str!("../../../pipelines/news_sources.toml"),
    ),
    ("news_top.toml", include_str!("../../../pipelines/news_top.toml")),
    ("news_topics.toml", include_str!("../../../pipelines/news_topics.toml")),
    ("prices.toml", include_str!("../../../pipelines/prices.toml")),
    ("regulation.toml", include_str!("../../../pipelines/regulation.toml")),
];

/// Where a run's pipelines come from: `dir` when it exists (its files are
/// the whole set), else the shipped ones.
pub fn source_of(dir: &Path) -> &'static str {
    if dir.exists() { "folder" } else { "built in" }
}

/// The pipelines in `dir` ([`SHIPPED`] when it does not exist), the
/// `enabled` ones only when named, in run order (priority, then name).
///
/// # Errors
/// A file that does not read as a pipeline, or a name `enabled` lacks.
pub fn load_dir(dir: &Path, enabled: Option<&[String]>) -> Result<Vec<Pipeline>, ConfigError> {
    let read_err = |message: String| ConfigError::Pipeline {
        path: dir.to_owned(),
        message,
    };
    let mut texts: Vec<(PathBuf, String)> = Vec::new();
    if dir.exists() {
        let entries = std::fs::read_dir(dir).map_err(|e| read_err(format!("cannot read the pipelines folder: {e}")))?;
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|e| ConfigError::Pipeline {
                path: file.clone(),
                message: e.to_string(),
            })?;
            texts.push((file, text));
        }
    } else {
        // Named as if in the folder: an error says which file to write out (`fdsync init`).
        texts.extend(SHIPPED.iter().map(|(name, text)| (dir.join(name), (*text).to_owned())));
    }
    let mut pipelines = Vec::new();
    for (file, text) in texts {
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

/// Minutes in a day: the longest interval of an `auto` schedule.
pub const MINUTES_A_DAY: u32 = 1440;

/// When a pipeline fires, in UTC: a crontab schedule, or every so many
/// minutes from midnight (an `auto` schedule's derived interval).
#[derive(Debug, Clone)]
pub struct Schedule(When);

#[derive(Debug, Clone)]
enum When {
    Cron(Box<croner::Cron>),
    Every(u32),
}

impl Schedule {
    /// Every `minutes` (at least one), counted from midnight UTC, so the
    /// firings of a divisor of a day fall at the same times every day.
    pub fn every_minutes(minutes: u32) -> Schedule {
        Schedule(When::Every(minutes.max(1)))
    }

    /// The interval of an `every` schedule.
    pub fn interval_minutes(&self) -> Option<u32> {
        match self.0 {
            When::Every(m) => Some(m),
            When::Cron(_) => None,
        }
    }

    /// The first firing strictly after `t`; `None` if it never fires again.
    pub fn next_after(&self, t: &DateTime<Utc>) -> Option<DateTime<Utc>> {
        // Firings fall on whole minutes; a fraction of a second in `t` would
        // otherwise be carried into the answer.
        let whole = chrono::Timelike::with_nanosecond(t, 0).unwrap_or(*t);
        match &self.0 {
            When::Cron(cron) => cron.find_next_occurrence(&whole, false).ok(),
            When::Every(minutes) => {
                let midnight = whole.date_naive().and_hms_opt(0, 0, 0)?.and_utc();
                let step = chrono::Duration::minutes(i64::from(*minutes));
                let passed = (whole - midnight).num_seconds() / step.num_seconds();
                Some(midnight + step * i32::try_from(passed + 1).ok()?)
            }
        }
    }
}

/// Parses a crontab schedule as crontab(5) reads one: five fields (minute
/// hour day-of-month month day-of-week, names allowed, 0 or 7 for Sunday),
/// day-of-month and day-of-week combined with OR when both are restricted,
/// or a nickname (`@hourly`, `@daily`, `@weekly`, `@monthly`, `@yearly`).
/// A seconds or years field is refused.
pub fn parse_schedule(expr: &str) -> Result<Schedule, String> {
    let fields = expr.split_whitespace().count();
    if !expr.trim_start().starts_with('@') && fields != 5 {
        return Err(format!(
            "expected 5 fields (minute hour day-of-month month day-of-week) or a nickname such as @daily, found {fields} fields"
        ));
    }
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
        .map(|cron| Schedule(When::Cron(Box::new(cron))))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, TimeZone, Weekday};

    #[test]
    fn the_shipped_pipelines_are_the_folder_s_files_and_load_without_it() {
        let folder = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pipelines");
        let mut on_disk: Vec<(String, String)> = std::fs::read_dir(&folder)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(&p).unwrap())
            })
            .collect();
        on_disk.sort();
        let shipped: Vec<(String, String)> = SHIPPED
            .iter()
            .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
            .collect();
        assert_eq!(shipped, on_disk, "SHIPPED lists every file of pipelines/, as it is");
        let missing = Path::new("no/such/folder");
        let built_in = load_dir(missing, None).unwrap();
        assert_eq!(built_in.len(), load_dir(&folder, None).unwrap().len());
        assert_eq!(source_of(missing), "built in");
    }

    #[test]
    fn weekday_schedules_mean_what_crontab_means() {
        let s = parse_schedule("30 22 * * 1-5").unwrap();
        let from = Utc.with_ymd_and_hms(2026, 11, 27, 23, 0, 0).unwrap(); // a Friday night
        let next = s.next_after(&from).unwrap();
        assert_eq!(next.weekday(), Weekday::Mon);
        let sunday = parse_schedule("0 6 * * 0").unwrap().next_after(&from).unwrap();
        assert_eq!(sunday.weekday(), Weekday::Sun);
        let weekend = parse_schedule("0 6 * * 6-7").unwrap();
        let first = weekend.next_after(&from).unwrap();
        let second = weekend.next_after(&first).unwrap();
        assert_eq!([first.weekday(), second.weekday()], [Weekday::Sat, Weekday::Sun]);
    }

    /// The examples of crontab(5) and of Kubernetes' CronJob documentation,
    /// each with the firings crontab gives.
    #[test]
    fn schedules_fire_as_crontab_fires_them() {
        let at = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let firings = |expr: &str, from: &str, n: usize| {
            let schedule = parse_schedule(expr).unwrap_or_else(|e| panic!("{expr}: {e}"));
            let mut t = at(from);
            (0..n)
                .map(|_| {
                    t = schedule.next_after(&t).unwrap();
                    t.format("%Y-%m-%d %a %H:%M").to_string()
                })
                .collect::<Vec<_>>()
        };
        // crontab(5): "run at 4:30 am on the 1st and 15th of each month, plus every Friday".
        assert_eq!(
            firings("30 4 1,15 * 5", "2026-11-26T00:00:00Z", 4),
            [
                "2026-11-27 Fri 04:30",
                "2026-12-01 Tue 04:30",
                "2026-12-04 Fri 04:30",
                "2026-12-11 Fri 04:30"
            ]
        );
        // crontab(5): "run five minutes after midnight, every day".
        assert_eq!(
            firings("5 0 * * *", "2026-11-26T12:00:00Z", 2),
            ["2026-11-27 Fri 00:05", "2026-11-28 Sat 00:05"]
        );
        // crontab(5): "run at 2:15pm on the first of every month".
        assert_eq!(
            firings("15 14 1 * *", "2026-11-26T00:00:00Z", 2),
            ["2026-12-01 Tue 14:15", "2027-01-01 Fri 14:15"]
        );
        // crontab(5): "run at 10 pm on weekdays".
        assert_eq!(
            firings("0 22 * * 1-5", "2026-11-27T23:00:00Z", 2),
            ["2026-11-30 Mon 22:00", "2026-12-01 Tue 22:00"]
        );
        // crontab(5): "23 minutes after midn, 2am, 4am ..., everyday".
        assert_eq!(
            firings("23 0-23/2 * * *", "2026-11-26T01:00:00Z", 2),
            ["2026-11-26 Thu 02:23", "2026-11-26 Thu 04:23"]
        );
        // crontab(5): "run at 5 after 4 every sunday", with a name.
        assert_eq!(
            firings("5 4 * * sun", "2026-11-26T00:00:00Z", 1),
            ["2026-11-29 Sun 04:05"]
        );
        // Month and day names, and 7 for Sunday.
        assert_eq!(
            firings("0 9 * jan mon-fri", "2026-11-26T00:00:00Z", 1),
            ["2027-01-01 Fri 09:00"]
        );
        assert_eq!(
            firings("0 6 * * 7", "2026-11-26T00:00:00Z", 1),
            ["2026-11-29 Sun 06:00"]
        );
        // Nicknames.
        assert_eq!(firings("@hourly", "2026-11-26T10:30:00Z", 1), ["2026-11-26 Thu 11:00"]);
        assert_eq!(firings("@daily", "2026-11-26T10:30:00Z", 1), ["2026-11-27 Fri 00:00"]);
        assert_eq!(firings("@weekly", "2026-11-26T10:30:00Z", 1), ["2026-11-29 Sun 00:00"]);
        assert_eq!(firings("@monthly", "2026-11-26T10:30:00Z", 1), ["2026-12-01 Tue 00:00"]);
        // Kubernetes' own example.
        assert_eq!(
            firings("*/15 * * * *", "2026-11-26T10:31:00Z", 2),
            ["2026-11-26 Thu 10:45", "2026-11-26 Thu 11:00"]
        );
    }

    fn load(text: &str) -> Result<Pipeline, String> {
        let file = Path::new("pipelines/test.toml");
        let raw: RawPipeline = toml::from_str(text).map_err(|e| e.to_string())?;
        Pipeline::try_from_raw(raw, file).map_err(|e| e.to_string())
    }

    #[test]
    fn every_shipped_pipeline_file_loads_and_every_feed_has_one() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../pipelines");
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
