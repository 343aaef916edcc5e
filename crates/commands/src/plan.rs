//! `fdsync plan`: what the configured pipelines will spend, per day and per
//! month, against the plan's quota, before a request is sent
//! ([`fdsync_core::planner::cost`]).

use std::io::Write;

pub use fdsync_core::planner::cost::{Forecast, Limit, PipelineForecast, derive_schedules, forecast};

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
    if let Some(stream) = f.stream.as_ref().filter(|s| s.connected) {
        writeln!(
            out,
            "{:<16} {:<16} {:>9.1} {:>8.1}  {:>10.0} {:>11.0}  -",
            "(live stream)",
            format!("{} connected", stream.pipelines.join(",")),
            stream.per_day,
            1.0,
            stream.per_day,
            stream.per_day * 30.0
        )?;
    }
    if f.verify_per_day > 0.0 {
        writeln!(
            out,
            "{:<16} {:<16} {:>9.1} {:>8.1}  {:>10.0} {:>11.0}  -",
            "(verify)",
            "daily",
            1.0,
            f.verify_per_day,
            f.verify_per_day,
            f.verify_per_day * 30.0
        )?;
    }
    writeln!(
        out,
        "{:<16} {:<16} {:>9} {:>9} {:>10.0} {:>11.0}  {} requests",
        "total", "", "", "", f.per_day, f.per_month, f.backfill_requests
    )?;
    writeln!(out, "* not run since its first sync: the least its routes allow")?;
    if f.pipelines.iter().any(|p| p.schedule.starts_with("auto")) {
        writeln!(
            out,
            "auto: intervals derived to plan at most {:.0}% of the quota (pipelines.quota_share), most important first",
            f.quota_share * 100.0
        )?;
    }
    if let Some(stream) = &f.stream {
        writeln!(
            out,
            "live stream ({}): {} ({})",
            stream.mode,
            if stream.connected { "connected" } else { "not connected" },
            stream.reason
        )?;
    }
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
