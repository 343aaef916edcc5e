//! What the configured pipelines will spend, per day and per month, against
//! the plan's quota, before a request is sent, and the `auto` schedules that
//! fit it (`fdsync plan` prints it). A pipeline's runs a day come from its
//! schedule (capped by a timer's, for `sync --once`); its requests a run from
//! the run log where it has run since its first sync, else the least its
//! routes allow; the backfill left from its standing ([`super::standing`]).

use chrono::{DateTime, Duration, Utc};
use serde::Serialize;

use crate::config::{Config, Plan, StreamMode};
use crate::error::SyncError;
use crate::feeds::Fetch;
use crate::pipeline::{MINUTES_A_DAY, Pipeline};
use crate::sink::duckdb::reader::BookkeepingReader;

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
    /// The daemon's live stream (a forecast for the daemon only).
    pub stream: Option<StreamForecast>,
    /// The daemon's daily verification (`[daemon] verify_requests`, at most
    /// one request per stored company it can verify); 0 under a timer.
    pub verify_per_day: f64,
    pub per_day: f64,
    pub per_month: f64,
    pub limit: Option<Limit>,
    /// `pipelines.quota_share`: what `auto` schedules plan to spend.
    pub quota_share: f64,
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
/// `auto` schedules are derived first ([`derive_schedules`]); without a
/// timer, the daemon's live stream is counted where it would connect.
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
    let limit = resolve_limit(config, reader, limit)?;
    let derived = derive(config, pipelines, reader, limit.as_ref(), timer_minutes, now)?;
    let mut out = Vec::new();
    for (p, cost) in derived.pipelines.iter().zip(&derived.costs) {
        let runs_per_day = runs_per_day(p, timer_minutes, now);
        let (requests_per_run, basis) = cost.per_run(runs_per_day);
        let backfill = match reader {
            Some(r) => super::standing::backfill_of(p, r)?,
            None => None,
        };
        let (backfill_requests, backfill_unknown) = match &backfill {
            Some(b) if !b.complete => (b.requests_left, b.requests_left.is_none()),
            Some(_) => (None, false),
            // Not started: how much there is shows once it has.
            None => (
                None,
                p.feed.fetch.backfill().is_some() && !p.feed.fetch.idle(crate::feeds::Reach::of(config)),
            ),
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
    let stream = derived.stream;
    let verify_per_day = verify_per_day(config, pipelines, timer_minutes);
    let per_day: f64 = out.iter().map(|p| p.per_day).sum::<f64>()
        + stream.as_ref().filter(|s| s.connected).map_or(0.0, |s| s.per_day)
        + verify_per_day;
    let backfill_requests: u64 = out.iter().filter_map(|p| p.backfill_requests).sum();
    let daily = limit.as_ref().and_then(Limit::daily);
    let fits = daily.map(|d| per_day <= d);
    let backfill_days = daily
        .map(|d| d - per_day)
        .filter(|spare| *spare > 0.0)
        .map(|spare| backfill_requests as f64 / spare);
    let suggestions = match daily {
        Some(d) if per_day > d => suggest(&out, &derived.pipelines, d, per_day, companies),
        _ => Vec::new(),
    };
    Ok(Forecast {
        generated_at: now,
        timer_minutes,
        pipelines: out,
        stream,
        verify_per_day,
        per_day,
        per_month: per_day * 30.0,
        limit,
        quota_share: config.pipelines.quota_share,
        fits,
        backfill_requests,
        backfill_days,
        suggestions,
    })
}

/// The quota to plan against: `limit` when given, else the quota the
/// service reported last (the ledger), else `upstream.plan`.
fn resolve_limit(
    config: &Config,
    reader: Option<&BookkeepingReader>,
    limit: Option<Limit>,
) -> Result<Option<Limit>, SyncError> {
    if limit.is_some() {
        return Ok(limit);
    }
    let seen = reader
        .map(BookkeepingReader::quota)
        .transpose()?
        .and_then(|q| q.into_iter().next());
    Ok(match seen {
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
    })
}

/// What one run of a pipeline costs, from what the run log knows.
#[derive(Debug, Clone)]
struct Cost {
    least: f64,
    /// The median of its recent `ok` runs after the first.
    observed: Option<f64>,
    /// Texts: the document parts of the last four weeks, a day.
    texts_a_day: Option<f64>,
    /// Requests a day besides the runs': a windowed list's tally of the day that closed.
    tally_a_day: f64,
}

impl Cost {
    fn of(
        config: &Config,
        p: &Pipeline,
        reader: Option<&BookkeepingReader>,
        now: DateTime<Utc>,
    ) -> Result<Cost, SyncError> {
        let observed = match reader {
            Some(r) => r.requests_of_recent_runs(&p.name)?,
            None => Vec::new(),
        };
        let texts_a_day = match reader {
            Some(r) => texts_per_day(p, r, now)?,
            None => None,
        };
        let tally_a_day = match &p.feed.fetch {
            Fetch::OffsetWindows(w)
                if w.tally.is_some() && p.params.tally_days.unwrap_or(crate::feeds::DEFAULT_TALLY_DAYS) > 0 =>
            {
                1.0
            }
            _ => 0.0,
        };
        Ok(Cost {
            least: p.feed.fetch.least_requests(crate::feeds::Reach::of(config)) as f64,
            observed: median(&observed),
            texts_a_day,
            tally_a_day,
        })
    }

    /// Requests a run at `runs_per_day`, and on what basis (see
    /// [`PipelineForecast::basis`]). Texts are asked per new document part,
    /// not per run, so their cost a run falls as runs grow.
    fn per_run(&self, runs_per_day: f64) -> (f64, &'static str) {
        let tally = if runs_per_day > 0.0 {
            self.tally_a_day / runs_per_day
        } else {
            0.0
        };
        match (self.texts_a_day, self.observed) {
            (Some(a_day), _) if runs_per_day > 0.0 => (self.least + a_day / runs_per_day, "rate"),
            (_, Some(m)) => (m + tally, "observed"),
            _ => (self.least + tally, "least"),
        }
    }

    fn per_day(&self, runs_per_day: f64) -> f64 {
        self.per_run(runs_per_day).0 * runs_per_day
    }
}

/// The daemon's live stream in a forecast.
#[derive(Debug, Clone, Serialize)]
pub struct StreamForecast {
    /// The pipelines whose stream it is.
    pub pipelines: Vec<String>,
    /// `daemon.stream`: `on`, `off` or `auto`.
    pub mode: &'static str,
    /// Whether the daemon connects it (`auto`: whether the quota carries it).
    pub connected: bool,
    /// Whether the quota carries it beside the schedules.
    pub fits: bool,
    /// Connections a day while connected (the service closes each after
    /// about 280 s), each one request against the quota.
    pub per_day: f64,
    /// Why it connects or not, for people.
    pub reason: String,
    /// Whether the quota it was held against is known (else the Free plan's
    /// was assumed).
    pub quota_known: bool,
}

/// How long the service keeps a stream connection open (upstream spec,
/// section 6): the daemon reconnects about this often.
pub const STREAM_CONNECTION_SECS: f64 = 280.0;

/// Pipelines with their `auto` schedules derived, what each run costs, and
/// whether the daemon's stream connects.
struct Derived {
    pipelines: Vec<Pipeline>,
    costs: Vec<Cost>,
    stream: Option<StreamForecast>,
}

/// `pipelines` with each `schedule = "auto"` set to an interval, from what
/// the warehouse behind `reader` measured, so that the whole configuration
/// plans at most `pipelines.quota_share` of the quota (the stream included
/// where it connects). Every `auto` pipeline runs at least once a day; the
/// spare quota goes one step at a time to the next shorter interval that
/// still fits and buys the most freshness a request, the more important
/// pipelines (by priority) weighing more. Intervals divide a day and, under a
/// timer, are whole multiples of it. An unknown quota is taken as the Free
/// plan's until the service's headers say otherwise.
///
/// # Errors
/// When the bookkeeping tables cannot be read.
pub fn derive_schedules(
    config: &Config,
    pipelines: &[Pipeline],
    reader: Option<&BookkeepingReader>,
    timer_minutes: Option<u32>,
    now: DateTime<Utc>,
) -> Result<Vec<Pipeline>, SyncError> {
    if !pipelines.iter().any(|p| p.auto) {
        return Ok(pipelines.to_vec());
    }
    let limit = resolve_limit(config, reader, None)?;
    Ok(derive(config, pipelines, reader, limit.as_ref(), timer_minutes, now)?.pipelines)
}

/// Whether the daemon connects the live stream of `pipelines` (none has
/// one: `None`), under `daemon.stream` and the quota (`limit`, else as
/// [`forecast`] finds it).
///
/// # Errors
/// When the bookkeeping tables cannot be read.
pub fn stream_of(
    config: &Config,
    pipelines: &[Pipeline],
    reader: Option<&BookkeepingReader>,
    limit: Option<Limit>,
    now: DateTime<Utc>,
) -> Result<Option<StreamForecast>, SyncError> {
    let limit = resolve_limit(config, reader, limit)?;
    Ok(derive(config, pipelines, reader, limit.as_ref(), None, now)?.stream)
}

/// What the daemon's daily verification spends: its budget, at most one
/// request a day per company and pipeline it can verify; none under a timer.
pub fn verify_per_day(config: &Config, pipelines: &[Pipeline], timer_minutes: Option<u32>) -> f64 {
    if timer_minutes.is_some() {
        return 0.0;
    }
    let verifiable = pipelines.iter().filter(|p| p.feed.whole_tables().is_some()).count() as u64;
    let most = verifiable * config.universe.companies.len() as u64;
    config.daemon.verify_requests.min(most) as f64
}

fn derive(
    config: &Config,
    pipelines: &[Pipeline],
    reader: Option<&BookkeepingReader>,
    limit: Option<&Limit>,
    timer_minutes: Option<u32>,
    now: DateTime<Utc>,
) -> Result<Derived, SyncError> {
    let costs = pipelines
        .iter()
        .map(|p| Cost::of(config, p, reader, now))
        .collect::<Result<Vec<_>, _>>()?;
    let share = config.pipelines.quota_share;
    let quota_known = limit.is_some();
    // Unknown: planned as the smallest published plan, never the largest.
    let limit = limit.cloned().unwrap_or_else(|| Limit::of(crate::config::Plan::Free));
    let budget = limit.daily().map(|d| d * share);
    let fixed: f64 = pipelines
        .iter()
        .zip(&costs)
        .filter(|(p, _)| !p.auto)
        .map(|(p, c)| c.per_day(runs_per_day(p, timer_minutes, now)))
        .sum::<f64>()
        + verify_per_day(config, pipelines, timer_minutes);
    let least_auto: f64 = pipelines
        .iter()
        .zip(&costs)
        .filter(|(p, _)| p.auto)
        .map(|(_, c)| c.per_day(1.0))
        .sum();
    let streams: Vec<String> = pipelines
        .iter()
        .filter(|p| p.params.stream_route.is_some())
        .map(|p| p.name.clone())
        .collect();
    let stream = (timer_minutes.is_none() && !streams.is_empty()).then(|| {
        let per_day = 86_400.0 / STREAM_CONNECTION_SECS;
        let fits = budget.is_none_or(|b| fixed + least_auto + per_day <= b);
        let (mode, connected, reason) = match (config.daemon.stream, budget) {
            (StreamMode::On, _) if fits => ("on", true, "daemon.stream = true".to_owned()),
            (StreamMode::On, _) => (
                "on",
                true,
                format!(
                    "daemon.stream = true, though its {per_day:.0} connections a day do not fit {:.0}% of the quota beside the schedules",
                    share * 100.0
                ),
            ),
            (StreamMode::Off, _) => ("off", false, "daemon.stream = false: the feed polls on its schedule".to_owned()),
            (StreamMode::Auto, None) => ("auto", true, format!("{} has no daily limit", limit.source)),
            (StreamMode::Auto, Some(b)) if fixed + least_auto + per_day <= b => (
                "auto",
                true,
                format!("its {per_day:.0} connections a day fit {:.0}% of the quota beside the schedules", share * 100.0),
            ),
            (StreamMode::Auto, Some(b)) => (
                "auto",
                false,
                format!(
                    "its {per_day:.0} connections a day do not fit {b:.0} ({:.0}% of the quota) beside the schedules: the feed polls on its schedule instead",
                    share * 100.0
                ),
            ),
        };
        StreamForecast {
            pipelines: streams,
            mode,
            connected,
            fits,
            per_day,
            reason,
            quota_known,
        }
    });
    let streaming = stream.as_ref().filter(|s| s.connected).map_or(0.0, |s| s.per_day);
    let ladder = intervals(timer_minutes);
    let mut at: Vec<usize> = vec![0; pipelines.len()];
    // Each run counted as one request at least: a run that usually costs
    // none (texts are asked per new part) is not free to repeat. One with
    // nothing to ask (no saved search) is.
    let reach = crate::feeds::Reach::of(config);
    let cost_at = |i: usize, step: usize| {
        let runs = f64::from(MINUTES_A_DAY / ladder[step]);
        if pipelines[i].feed.fetch.idle(reach) {
            return 0.0;
        }
        costs[i].per_day(runs).max(runs)
    };
    if let Some(budget) = budget {
        let mut total = fixed
            + streaming
            + (0..pipelines.len())
                .filter(|i| pipelines[*i].auto)
                .map(|i| cost_at(i, 0))
                .sum::<f64>();
        // The next step goes where it buys the most freshness a request:
        // minutes of interval saved, weighted by rank in priority order
        // (pipelines come sorted by it), the most important counting most.
        let autos: Vec<usize> = (0..pipelines.len())
            .filter(|i| pipelines[*i].auto && !pipelines[*i].feed.fetch.idle(reach))
            .collect();
        loop {
            let best = autos
                .iter()
                .enumerate()
                .filter(|(_, i)| at[**i] + 1 < ladder.len())
                .map(|(rank, &i)| {
                    let more = cost_at(i, at[i] + 1) - cost_at(i, at[i]);
                    let saved = f64::from(ladder[at[i]] - ladder[at[i] + 1]);
                    let value = saved / (rank as f64 + 1.0) / more.max(1e-9);
                    (i, more, value)
                })
                .filter(|(_, more, _)| total + more <= budget)
                .max_by(|a, b| a.2.total_cmp(&b.2));
            let Some((i, more, _)) = best else { break };
            total += more;
            at[i] += 1;
        }
    } else {
        // No daily limit: as often as the ladder allows.
        at.iter_mut().for_each(|a| *a = ladder.len() - 1);
    }
    let pipelines = pipelines
        .iter()
        .zip(&at)
        .map(|(p, step)| {
            let mut p = p.clone();
            if p.auto {
                p.schedule = crate::pipeline::Schedule::every_minutes(ladder[*step]);
                p.schedule_text = format!("auto ({})", short_interval(ladder[*step]));
            }
            p
        })
        .collect();
    Ok(Derived {
        pipelines,
        costs,
        stream,
    })
}

/// The intervals an `auto` schedule may take, longest first: the divisors
/// of a day that are whole multiples of the timer (five minutes without one).
fn intervals(timer_minutes: Option<u32>) -> Vec<u32> {
    let step = timer_minutes.unwrap_or(5).clamp(1, MINUTES_A_DAY);
    let mut out: Vec<u32> = (1..=MINUTES_A_DAY)
        .rev()
        .filter(|m| MINUTES_A_DAY.is_multiple_of(*m) && m % step == 0)
        .collect();
    if out.is_empty() {
        out.push(MINUTES_A_DAY);
    }
    out
}

/// `30m`, `2h`, `1d`.
fn short_interval(minutes: u32) -> String {
    match minutes {
        m if m % MINUTES_A_DAY == 0 => format!("{}d", m / MINUTES_A_DAY),
        m if m % 60 == 0 => format!("{}h", m / 60),
        m => format!("{m}m"),
    }
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
        // One request a row that arrived lacking them, at most the day's budget.
        Fetch::Details(d) => {
            let (_, recent) =
                reader.lacking_count(d.table, d.lacking, d.arrived, now - Duration::days(HORIZON_DAYS))?;
            let budget = p.params.daily_requests.unwrap_or(crate::feeds::DEFAULT_DAILY_REQUESTS);
            return Ok(Some((recent as f64 / HORIZON_DAYS as f64).min(f64::from(budget))));
        }
        Fetch::ParentTexts(t) => reader.part_texts(t.parent, t.parts, true, t.texts, since)?,
        Fetch::DocumentsAndSections(d) => reader.part_texts(d.documents, d.listed, false, d.parts, since)?,
        Fetch::Single(_)
        | Fetch::PerCompany(_)
        | Fetch::Universe(_)
        | Fetch::PerCountry(_)
        | Fetch::Cursor(_)
        | Fetch::CompanyCursor(_)
        | Fetch::SearchCursor(_)
        | Fetch::CompanyIndex(_)
        | Fetch::OffsetWindows(_)
        | Fetch::Layers(_) => return Ok(None),
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
