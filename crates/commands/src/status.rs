//! `fdsync status`: per pipeline its last run, rows, checkpoint and freshness,
//! and the quota the service reported last, read from the warehouse's
//! bookkeeping tables without writing to it ([`fdsync_core::planner::standing`]).

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};

pub use fdsync_core::planner::standing::{BackfillStatus, PipelineStatus, Share, Status, read};
use fdsync_core::sink::duckdb::reader::QuotaStatus;

fn ts(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "-".into(), |t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

fn age(secs: Option<i64>) -> String {
    match secs {
        None => "never".into(),
        Some(s) if s < 120 => format!("{s}s ago"),
        Some(s) if s < 7200 => format!("{}m ago", s / 60),
        Some(s) if s < 172_800 => format!("{}h ago", s / 3600),
        Some(s) => format!("{}d ago", s / 86_400),
    }
}

/// The status as a table for people.
///
/// # Errors
/// When `out` cannot be written.
pub fn write_text(out: &mut impl Write, status: &Status) -> std::io::Result<()> {
    writeln!(out, "warehouse {}", status.warehouse.display())?;
    match &status.writer {
        Some(h) => writeln!(out, "writer    {h}")?,
        None => writeln!(out, "writer    none running")?,
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<16} {:<15} {:>9} {:>7} {:>10}  {:<12} {:<21} checkpoint",
        "pipeline", "last run", "status", "reqs", "rows", "fresh", "next run"
    )?;
    for p in &status.pipelines {
        let (when, state, reqs, rows) = match &p.last_run {
            Some(r) => (
                age(Some((status.generated_at - r.started_at).num_seconds())),
                r.status.clone(),
                r.requests.to_string(),
                r.rows_written.to_string(),
            ),
            None => ("never".into(), "-".into(), "-".into(), "-".into()),
        };
        let checkpoint = match (&p.checkpoint, p.checkpoints) {
            (None, _) => "-".to_owned(),
            (Some(c), 1) => shorten(c),
            (Some(_), n) => format!(
                "{n} partitions, last moved {}",
                age(p.checkpoint_updated_at.map(|t| (status.generated_at - t).num_seconds()))
            ),
        };
        writeln!(
            out,
            "{:<16} {:<15} {:>9} {:>7} {:>10}  {:<12} {:<21} {checkpoint}",
            p.pipeline,
            when,
            state,
            reqs,
            rows,
            age(p.freshness_secs),
            if p.due.runs() {
                format!("now: {}", p.due)
            } else {
                ts(p.next_run_at)
            }
        )?;
        if let Some(r) = p.last_run.as_ref().filter(|r| r.shortfall > 0) {
            writeln!(
                out,
                "{:<16} ! incomplete: {} record(s) the service counts are not stored; the next run fetches them",
                "", r.shortfall
            )?;
        }
        if let Some(error) = p.last_run.as_ref().and_then(|r| r.error.as_deref()) {
            writeln!(out, "{:<16} ! {}", "", shorten(error))?;
        }
        if let Some(b) = &p.backfill {
            writeln!(out, "{:<16} backfill {}", "", backfill_text(b, &status.quota))?;
        }
        if !p.not_served.is_empty() {
            let companies: Vec<String> = p
                .not_served
                .iter()
                .map(|(company, said)| {
                    let code = said.code.as_deref().map(|c| format!(" {c}")).unwrap_or_default();
                    let meaning = if said.status == 402 {
                        ": the key's plan does not include this route"
                    } else {
                        ""
                    };
                    format!("{company} ({}{code}{meaning} at {})", said.status, ts(Some(said.at)))
                })
                .collect();
            writeln!(
                out,
                "{:<16} not served: {}; asked again a day after",
                "",
                companies.join(", ")
            )?;
        }
    }
    if !status.unknown_fields.is_empty() {
        writeln!(out)?;
        writeln!(
            out,
            "new fields: the service sends these, no column holds them (they stay in raw; docs/operations.md, Drift)"
        )?;
        for f in &status.unknown_fields {
            writeln!(
                out,
                "  {} {}  first seen {}, last {}; e.g. {}",
                f.route,
                f.field,
                ts(Some(f.first_seen_at)),
                ts(Some(f.last_seen_at)),
                shorten(f.example.as_deref().unwrap_or("-"))
            )?;
        }
    }
    if let Some(v) = &status.verification {
        writeln!(out)?;
        writeln!(
            out,
            "verified  last {} ({}); {} companies compared in 30 days",
            ts(Some(v.verified_at)),
            v.run_id,
            v.companies_30d
        )?;
        for t in &v.tables {
            writeln!(
                out,
                "  {:<18} {} companies: {} equal, {} changed, {} withdrawn, {} missing",
                t.table, t.companies, t.equal, t.changed, t.withdrawn, t.missing
            )?;
        }
    }
    writeln!(out)?;
    if status.quota.is_empty() {
        writeln!(out, "quota     not seen yet")?;
    }
    for q in &status.quota {
        writeln!(
            out,
            "quota     key {}: {} of {} left in the {} window (resets {}); {} of {} left this minute; seen {}",
            q.key_id,
            q.remaining.map_or("?".into(), |n| n.to_string()),
            q.limit.map_or("?".into(), |n| n.to_string()),
            q.window.as_deref().unwrap_or("quota"),
            ts(q.reset_at),
            q.rate_remaining.map_or("?".into(), |n| n.to_string()),
            q.rate_limit.map_or("?".into(), |n| n.to_string()),
            ts(Some(q.observed_at)),
        )?;
    }
    Ok(())
}

/// `reached 2026-10-01; 600 of 4000 records (15%); 3400 left, 17 requests
/// (at the plan's 250 a day: about 1 days, if it had them all)`, or complete.
fn backfill_text(b: &BackfillStatus, quota: &[QuotaStatus]) -> String {
    if b.complete {
        return "complete: everything the service serves is stored".into();
    }
    let mut text = b.reached.map_or_else(|| "started".into(), |d| format!("reached {d}"));
    if let Some(share) = &b.share {
        let percent = (share.done * 100).checked_div(share.total).unwrap_or(100);
        text.push_str(&format!(
            "; {} of {} {} ({percent}%)",
            share.done, share.total, share.unit
        ));
    }
    if let (Some(records), Some(requests)) = (b.records_left, b.requests_left) {
        text.push_str(&format!("; {records} left, {requests} requests"));
        if let Some((limit, window)) = quota
            .first()
            .and_then(|q| Some((u64::try_from(q.limit?).ok()?, q.window.clone()?)))
        {
            let windows = requests.div_ceil(limit.max(1));
            text.push_str(&format!(
                " (at the plan's {limit} a {window}: about {windows} {window}s, if it had them all)"
            ));
        }
    }
    text
}

fn shorten(text: &str) -> String {
    const MAX: usize = 90;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        format!("{}...", text.chars().take(MAX).collect::<String>())
    }
}
