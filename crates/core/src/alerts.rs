//! Alert hooks (`[alerts] webhook`): after each run, a JSON POST for every
//! pipeline that failed, fell short of the service's counts or met the
//! quota wall, and for new drift, at most once per pipeline and cause a UTC
//! day. What was sent is remembered in `_sync_alerts`, so a timer that runs
//! the same failing pipeline every 15 minutes alerts once; a POST that fails
//! is not remembered, so the next run tries again.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::Credential;
use crate::sink::SinkHandle;
use crate::sync::RunSummary;

/// Why an alert fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    Failed,
    Shortfall,
    QuotaWall,
    Drift,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Failed => "failed",
            Cause::Shortfall => "shortfall",
            Cause::QuotaWall => "quota_wall",
            Cause::Drift => "drift",
        }
    }
}

/// The body POSTed: flat, with `text` for chat webhooks that show only it.
#[derive(Debug, Clone, Serialize)]
pub struct Alert {
    pub source: &'static str,
    /// The pipeline, or `*` for drift (fields belong to routes, not pipelines).
    pub pipeline: String,
    pub cause: Cause,
    /// How the run ended: `failed`, `partial`, `quota_exhausted`, `ok`.
    pub status: String,
    pub reason: String,
    pub run_id: String,
    pub at: DateTime<Utc>,
    pub text: String,
}

/// The fields no column holds that were first seen at `since` or later,
/// as `route field`: a run's new drift.
pub fn drift_since(status: &crate::planner::standing::Status, since: DateTime<Utc>) -> Vec<String> {
    status
        .unknown_fields
        .iter()
        .filter(|f| f.first_seen_at >= since)
        .map(|f| format!("{} {}", f.route, f.field))
        .collect()
}

/// The alerts `summary` calls for; `new_drift` lists the fields first
/// seen in this run (`route field`).
pub fn of_run(summary: &RunSummary, new_drift: &[String], at: DateTime<Utc>) -> Vec<Alert> {
    let alert = |pipeline: &str, cause: Cause, status: &str, reason: String| Alert {
        source: "fdsync",
        pipeline: pipeline.to_owned(),
        cause,
        status: status.to_owned(),
        text: format!("fdsync: {pipeline} {}: {reason}", cause.as_str()),
        reason,
        run_id: summary.run_id.clone(),
        at,
    };
    let mut alerts = Vec::new();
    for p in &summary.pipelines {
        let reason = p.error.clone().unwrap_or_default();
        let cause = match p.status.as_str() {
            "failed" => Some(Cause::Failed),
            "quota_exhausted" => Some(Cause::QuotaWall),
            _ if p.shortfall > 0 => Some(Cause::Shortfall),
            _ => None,
        };
        if let Some(cause) = cause {
            let reason = if reason.is_empty() {
                format!("{} records the service counted were not stored", p.shortfall)
            } else {
                reason
            };
            alerts.push(alert(&p.pipeline, cause, &p.status, reason));
        }
    }
    if !new_drift.is_empty() {
        let more = new_drift.len().saturating_sub(5);
        let mut reason = format!(
            "the service sends {} field(s) no column holds: {}",
            new_drift.len(),
            new_drift.iter().take(5).cloned().collect::<Vec<_>>().join(", ")
        );
        if more > 0 {
            reason.push_str(&format!(" and {more} more"));
        }
        alerts.push(alert("*", Cause::Drift, &summary.status, reason));
    }
    alerts
}

/// POSTs each alert not sent yet today to `webhook`, and remembers those
/// the receiver took (2xx). The credential is cut out of every body,
/// whatever put it there. Failures are logged, never fatal: an alert must
/// not fail the run it reports.
pub async fn fire(webhook: &str, sink: &SinkHandle, alerts: Vec<Alert>, credential: Option<&Credential>) {
    if alerts.is_empty() {
        return;
    }
    let client = match reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(client) => client,
        Err(e) => {
            tracing::warn!(message = "Alerts not sent: no HTTP client.", error = %e);
            return;
        }
    };
    for alert in alerts {
        let (day, pipeline, cause) = (alert.at.date_naive(), alert.pipeline.clone(), alert.cause.as_str());
        let sent = sink
            .call(move |s| s.alerted(day, &pipeline, cause))
            .await
            .and_then(|r| r);
        match sent {
            Ok(true) => continue,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(message = "Alert not sent: the alert log cannot be read.", error = %e);
                continue;
            }
        }
        let Ok(mut body) = serde_json::to_string(&alert) else {
            continue;
        };
        if let Some(credential) = credential {
            body = credential.redact(&body);
        }
        let answer = client
            .post(webhook)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await;
        match answer {
            Ok(r) if r.status().is_success() => {
                let status = r.status().as_u16();
                let record = (alert.at, alert.pipeline.clone(), cause, alert.run_id.clone(), status);
                if let Err(e) = sink
                    .call(move |s| s.record_alert(record.0, &record.1, record.2, &record.3, record.4))
                    .await
                    .and_then(|r| r)
                {
                    tracing::warn!(message = "Alert sent but not remembered; it may be sent again.", error = %e);
                }
                tracing::info!(message = "Alert sent.", pipeline = %alert.pipeline, cause);
            }
            // The URL may hold a token: the error's text (which names it) is not logged.
            Ok(r) => {
                tracing::warn!(message = "Alert refused by the receiver; tried again at the next run.", status = r.status().as_u16(), pipeline = %alert.pipeline, cause);
            }
            Err(e) => {
                let why = if e.is_timeout() {
                    "timed out"
                } else if e.is_connect() {
                    "no connection"
                } else {
                    "failed"
                };
                tracing::warn!(message = "Alert not delivered; tried again at the next run.", why, pipeline = %alert.pipeline, cause);
            }
        }
    }
}
