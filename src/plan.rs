//! `fdsync plan`: what the configured pipelines will spend, per day and per
//! month, against the plan's quota, before a request is sent. A pipeline's
//! runs a day come from its schedule (capped by a timer's, for `sync
//! --once`); its requests a run from the run log where it has run since its
//! first sync, else the least its routes allow; the backfill left from what
//! `fdsync status` reads.

use std::io::Write;

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::config::{Config, Plan};
use crate::feeds::Fetch;
use crate::pipeline::Pipeline;
use crate::sink::duckdb::reader::BookkeepingReader;
use crate::sync::SyncError;

/// How far ahead firings are counted: four weeks, so weekly and weekday
/// schedules average out.
const HORIZON_DAYS: i64 = 28;

/// The quota a forecast is held against, and where it was read.
#[derive(Debug, Clone, Serialize)]
pub struct Limit {
    pub per_day: Option<u64>,
    pub per_month: Option<u64>,
    pub source: String,
}

impl Limit {
    /// The published limits of `plan` (upstream spec, section 8).
    pub fn of(plan: Plan) -> Limit {
        let (per_day, per_month) = match plan {
            Plan::Free => (Some(250), None),
            Plan::Build => (None, Some(100_000)),
            Plan::Scale => (None, None),
        };
        Limit {
            per_day,
            per_month,
            source: format!("the {plan:?} plan's published limits").to_lowercase(),
        }
    }

    /// What a day may spend: the daily limit, or a thirtieth of the monthly.
    fn daily(&self) -> Option<f64> {
        self.per_day
            .map(|d| d as f64)
            .or(self.per_month.map(|m| m as f64 / 30.0))
    }
}

#[derive(Debug, Serialize)]
pub struct PipelineForecast {
    pub pipeline: String,
    pub schedule: String,
    pub runs_per_day: f64,
    pub requests_per_run: f64,
    /// `observed` (the median of its recent `ok` runs after the first),
    /// `rate` (texts: the document parts of the last four weeks, a day, plus
    /// the list requests) or `least` (the least its routes allow: it has not
    /// run since its first sync).
    pub basis: &'static str,
    pub per_day: f64,
    pub per_month: f64,
    /// Requests its backfill still needs, where that is known.
    pub backfill_requests: Option<u64>,
    /// Its backfill has further to go (or has not started), and no total is known.
    pub backfill_unknown: bool,
}

#[derive(Debug, Serialize)]
pub struct Forecast {
    pub generated_at: DateTime<Utc>,
    /// Minutes between `sync --once` runs, when the forecast is for a timer.
    pub timer_minutes: Option<u32>,
    pub pipelines: Vec<PipelineForecast>,
    pub per_day: f64,
    pub per_month: f64,
    pub limit: Option<Limit>,
    /// `None` when no limit is known.
    pub fits: Option<bool>,
    pub backfill_requests: u64,
    /// Days until the known backfill completes with what steady state leaves.
    pub backfill_days: Option<f64>,
    /// What would make it fit.
    pub suggestions: Vec<String>,
}

/// Forecasts `pipelines` for `config`, from what the warehouse behind
/// `reader` holds (none yet: every pipeline at its least); `limit` from the
/// caller (a `--plan` flag), else the quota ledger, else `upstream.plan`.
///
/// # Errors
/// When the bookkeeping tables cannot be read.
pub fn forecast(
    config: &Config,
    pipelines: &[Pipeline],
    reader: Option<&BookkeepingReader>,
    limit: Option<Limit>,
    timer_minutes: Option<u32>,
    now: DateTime<Utc>,
) -> Result<Forecast, SyncError> {
    let companies = config.universe.companies.len() as u64;
    let countries = config.universe.countries.len() as u64;
    let limit = match limit {
        Some(limit) => Some(limit),
        None => match reader
            .map(BookkeepingReader::quota)
            .transpose()?
            .and_then(|q| q.into_iter().next())
        {
            Some(q) if q.limit.is_some() => {
                let limit = u64::try_from(q.limit.unwrap_or(0)).unwrap_or(0);
                let monthly = q.window.as_deref() == Some("month");
                Some(Limit {
                    per_day: (!monthly).then_some(limit),
                    per_month: monthly.then_some(limit),
                    source: format!(
                        "the quota the service reported last ({limit} a {})",
                        q.window.as_deref().unwrap_or("window")
                    ),
                })
            }
            _ => config.upstream.plan.map(Limit::of),
        },
    };
    let mut out = Vec::new();
    for p in pipelines {
        let runs_per_day = runs_per_day(p, timer_minutes, now);
        let observed = match reader {
            Some(r) => r.requests_of_recent_runs(&p.name)?,
            None => Vec::new(),
        };
        let least = p.feed.fetch.least_requests(companies, countries) as f64;
        // Texts are asked per new document part, not per run: their rate
        // is the parts of the documents of the last four weeks.
        let texts_a_day = match reader {
            Some(r) => texts_per_day(p, r, now)?,
            None => None,
        };
        let (requests_per_run, basis) = match (texts_a_day, median(&observed)) {
            (Some(a_day), _) if runs_per_day > 0.0 => (least + a_day / runs_per_day, "rate"),
            (_, Some(m)) => (m, "observed"),
            _ => (least, "least"),
        };
        let backfill = match reader {
            Some(r) => crate::status::backfill_of(p, r)?,
            None => None,
        };
        let (backfill_requests, backfill_unknown) = match &backfill {
            Some(b) if !b.complete => (b.requests_left, b.requests_left.is_none()),
            Some(_) => (None, false),
            // Not started: how much there is shows once it has.
            None => (None, p.feed.fetch.backfill().is_some()),
        };
        let per_day = runs_per_day * requests_per_run;
        out.push(PipelineForecast {
            pipeline: p.name.clone(),
            schedule: p.schedule_text.clone(),
            runs_per_day,
            requests_per_run,
            basis,
            per_day,
            per_month: per_day * 30.0,
            backfill_requests,
            backfill_unknown,
        });
    }
    let per_day: f64 = out.iter().map(|p| p.per_day).sum();
    let backfill_requests: u64 = out.iter().filter_map(|p| p.backfill_requests).sum();
    let daily = limit.as_ref().and_then(Limit::daily);
    let fits = daily.map(|d| per_day <= d);
    let backfill_days = daily
        .map(|d| d - per_day)
        .filter(|spare| *spare > 0.0)
        .map(|spare| backfill_requests as f64 / spare);
    let suggestions = match daily {
        Some(d) if per_day > d => suggest(&out, pipelines, d, per_day, companies),
        _ => Vec::new(),
    };
    Ok(Forecast {
        generated_at: now,
        timer_minutes,
        pipelines: out,
        per_day,
        per_month: per_day * 30.0,
        limit,
        fits,
        backfill_requests,
        backfill_days,
        suggestions,
    })
}

/// How many runs a day the schedule makes: under a timer every `timer`
/// minutes, at most one per tick, in a tick after a firing.
fn runs_per_day(p: &Pipeline, timer: Option<u32>, now: DateTime<Utc>) -> f64 {
    let end = now + Duration::days(HORIZON_DAYS);
    let mut runs = 0u64;
    match timer {
        None => {
            let mut t = now;
            while let Some(next) = p.schedule.next_after(&t).filter(|n| *n < end) {
                runs += 1;
                t = next;
            }
        }
        Some(minutes) => {
            let step = Duration::minutes(i64::from(minutes.max(1)));
            let (mut last, mut tick) = (now, now + step);
            while tick < end {
                if p.schedule.next_after(&last).is_some_and(|f| f <= tick) {
                    runs += 1;
                    last = tick;
                }
                tick += step;
            }
        }
    }
    runs as f64 / HORIZON_DAYS as f64
}

/// For the engines that fetch a text per new document part: the parts of
/// the universe's documents dated in the last four weeks, a day.
fn texts_per_day(p: &Pipeline, reader: &BookkeepingReader, now: DateTime<Utc>) -> Result<Option<f64>, SyncError> {
    let since = Some((now - Duration::days(HORIZON_DAYS)).date_naive());
    let parts = match &p.feed.fetch {
        Fetch::ParentTexts(t) => reader.part_texts(t.parent, t.parts, true, t.texts, since)?,
        Fetch::DocumentsAndSections(d) => reader.part_texts(d.documents, d.listed, false, d.parts, since)?,
        _ => return Ok(None),
    };
    Ok(Some(parts.listed as f64 / HORIZON_DAYS as f64))
}

fn median(values: &[u64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_unstable();
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2] as f64),
        n => Some((v[n / 2 - 1] + v[n / 2]) as f64 / 2.0),
    }
}

/// Runs a day a schedule may be brought down to: every 15 minutes, half
/// hour, hour, 2 hours, 6 hours, once a day.
const STEPS: &[f64] = &[96.0, 48.0, 24.0, 12.0, 4.0, 1.0];

/// What would bring `per_day` under `daily`: the costliest pipelines run
/// less often, one step at a time, until it fits; then, if it still does
/// not, a smaller universe.
fn suggest(
    forecasts: &[PipelineForecast],
    pipelines: &[Pipeline],
    daily: f64,
    per_day: f64,
    companies: u64,
) -> Vec<String> {
    let mut runs: Vec<f64> = forecasts.iter().map(|f| f.runs_per_day).collect();
    let cost = |runs: &[f64]| -> f64 { forecasts.iter().zip(runs).map(|(f, r)| f.requests_per_run * r).sum() };
    let mut total = per_day;
    while total > daily {
        // The pipeline whose next step down saves the most.
        let best = forecasts
            .iter()
            .enumerate()
            .filter_map(|(i, f)| {
                let lower = STEPS.iter().copied().find(|s| *s < runs[i])?;
                Some((i, lower, (runs[i] - lower) * f.requests_per_run))
            })
            .filter(|(_, _, saved)| *saved > 0.0)
            .max_by(|a, b| a.2.total_cmp(&b.2));
        let Some((i, lower, _)) = best else {
            break;
        };
        runs[i] = lower;
        total = cost(&runs);
    }
    let mut out: Vec<String> = forecasts
        .iter()
        .zip(&runs)
        .filter(|(f, r)| **r < f.runs_per_day)
        .map(|(f, r)| {
            format!(
                "{}: {:.0} runs a day now ({}); {r:.0} a day, e.g. every {}, spends {:.0} requests a day instead of {:.0}",
                f.pipeline,
                f.runs_per_day,
                f.schedule,
                every((1440.0 / r).round() as u64),
                r * f.requests_per_run,
                f.per_day
            )
        })
        .collect();
    if total <= daily {
        out.push(format!("with those schedules: {total:.0} requests a day of {daily:.0}"));
        return out;
    }
    // What each company costs a day, across the pipelines that fan out.
    let per_company: f64 = forecasts
        .iter()
        .zip(pipelines)
        .zip(&runs)
        .filter(|((_, p), _)| p.per_company())
        .map(|((f, _), r)| f.requests_per_run * r / companies.max(1) as f64)
        .sum();
    let fixed = total - per_company * companies as f64;
    let fit = if per_company > 0.0 {
        ((daily - fixed) / per_company).floor()
    } else {
        0.0
    };
    if fit >= 1.0 {
        out.push(format!(
            "universe: with those schedules each company costs {per_company:.1} requests a day; {fit:.0} of the {companies} configured fit"
        ));
    } else {
        out.push(format!(
            "even then {total:.0} requests a day of {daily:.0}: run fewer pipelines (pipelines.enabled) or choose a larger plan"
        ));
    }
    out
}

fn every(minutes: u64) -> String {
    match minutes {
        m if m < 60 => format!("{m} minutes (\"*/{m} * * * *\")"),
        60 => "hour (\"0 * * * *\")".into(),
        m if m < 1440 => format!("{} hours (\"0 */{} * * *\")", m / 60, m / 60),
        _ => "day (\"@daily\")".into(),
    }
}

/// The forecast as a table for people.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_text(out: &mut impl Write, f: &Forecast) -> std::io::Result<()> {
    match f.timer_minutes {
        Some(m) => writeln!(out, "forecast for `sync --once` every {m} minutes")?,
        None => writeln!(out, "forecast for `fdsync daemon` (every schedule as written)")?,
    }
    writeln!(
        out,
        "\n{:<16} {:<16} {:>9} {:>9} {:>10} {:>11}  backfill left",
        "pipeline", "schedule", "runs/day", "reqs/run", "reqs/day", "reqs/month"
    )?;
    for p in &f.pipelines {
        let backfill = match (p.backfill_requests, p.backfill_unknown) {
            (Some(n), _) => format!("{n} requests"),
            (None, true) => "unknown (no total yet)".into(),
            (None, false) => "-".into(),
        };
        writeln!(
            out,
            "{:<16} {:<16} {:>9.1} {:>8.1}{} {:>10.0} {:>11.0}  {backfill}",
            p.pipeline,
            p.schedule,
            p.runs_per_day,
            p.requests_per_run,
            if p.basis == "least" { "*" } else { " " },
            p.per_day,
            p.per_month
        )?;
    }
    writeln!(
        out,
        "{:<16} {:<16} {:>9} {:>9} {:>10.0} {:>11.0}  {} requests",
        "total", "", "", "", f.per_day, f.per_month, f.backfill_requests
    )?;
    writeln!(out, "* not run since its first sync: the least its routes allow")?;
    writeln!(out)?;
    match (&f.limit, f.fits) {
        (Some(limit), Some(fits)) => {
            let quota = match (limit.per_day, limit.per_month) {
                (Some(d), _) => format!("{d} a day"),
                (None, Some(m)) => format!("{m} a month"),
                _ => "no limit".into(),
            };
            writeln!(
                out,
                "quota {quota} ({}): {}",
                limit.source,
                if fits { "fits" } else { "does NOT fit" }
            )?;
        }
        _ => writeln!(
            out,
            "quota unknown: set upstream.plan, pass --plan, or run once so the service's headers are seen"
        )?,
    }
    match f.backfill_days {
        Some(days) if f.backfill_requests > 0 => writeln!(
            out,
            "backfill: {} requests known left; about {:.1} days at what steady state leaves",
            f.backfill_requests, days
        )?,
        _ if f.backfill_requests > 0 => writeln!(
            out,
            "backfill: {} requests known left; nothing is left over for it",
            f.backfill_requests
        )?,
        _ => {}
    }
    for s in &f.suggestions {
        writeln!(out, "to fit: {s}")?;
    }
    Ok(())
}
