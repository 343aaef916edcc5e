//! Companies a per-company route does not serve: any refusal for one company
//! (a 404, a 402 `upgrade_required`, a 403, a 410, a body past the size cap)
//! is remembered in a checkpoint partition of its own with what the service
//! said, reported, and asked again a day later. It never stops the other
//! companies, and a 404 alone does not end the pipeline `partial`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Member, Progress, SyncError, found};
use crate::bookkeeping::{NOT_SERVED, NOT_SERVED_404, NotServedCursor};
use crate::pipeline::Pipeline;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::{Refusal, UpstreamError};

/// A company a per-company route refused this run.
#[derive(Debug, Clone)]
pub(super) struct NotServed {
    pub(super) company: String,
    pub(super) refusal: Refusal,
}

/// A company not asked this run: the route refused it within a day.
#[derive(Debug, Clone)]
pub(super) struct Resting {
    pub(super) company: String,
    pub(super) said: NotServedCursor,
}

/// The checkpoint partition remembering that a pipeline's route refused
/// `company`, and what it said (its cursor).
pub(super) fn not_served_partition(company: &str) -> String {
    format!("{NOT_SERVED}{company}")
}

/// What the pipeline's route last said refusing `company`, unless a
/// checkpoint of the company's own has moved since (it was served again).
fn not_served_since(checkpoints: &HashMap<String, StoredCheckpoint>, company: &str) -> Option<NotServedCursor> {
    let noted = [NOT_SERVED, NOT_SERVED_404]
        .iter()
        .filter_map(|prefix| checkpoints.get(&format!("{prefix}{company}")))
        .max_by_key(|c| c.updated_at)?;
    let said = NotServedCursor::parse(&noted.cursor)?;
    // Both moved by the sink's own clock: which came last.
    let served = checkpoints.get(company).map(|c| c.updated_at);
    served.is_none_or(|served| served <= noted.updated_at).then_some(said)
}

/// How long a company a route refused is not asked again.
const NOT_SERVED_RECHECK_HOURS: i64 = 24;

/// `members` split into those to ask and those the route refused within
/// the last day.
pub(super) fn resting(
    members: Vec<Member>,
    checkpoints: &HashMap<String, StoredCheckpoint>,
    now: DateTime<Utc>,
) -> (Vec<Member>, Vec<Resting>) {
    let mut ask = Vec::new();
    let mut rest = Vec::new();
    for m in members {
        match not_served_since(checkpoints, &m.key) {
            Some(said) if now - said.at < chrono::Duration::hours(NOT_SERVED_RECHECK_HOURS) => {
                rest.push(Resting { company: m.key, said })
            }
            _ => ask.push(m),
        }
    }
    (ask, rest)
}

/// The checkpoints remembering each refusal of this run.
pub(super) fn remembered(pipeline: &Pipeline, progress: &Progress, now: DateTime<Utc>) -> Vec<Checkpoint> {
    progress
        .not_served
        .iter()
        .map(|n| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: not_served_partition(&n.company),
            cursor: serde_json::to_string(&NotServedCursor {
                at: now,
                status: n.refusal.status,
                code: n.refusal.code.clone(),
                message: n.refusal.message.clone(),
                route: n.refusal.route.clone(),
            })
            .expect("a cursor serializes"),
        })
        .collect()
}

/// As [`found`], for a company's own route: a refusal says the route does
/// not serve `company` (now, to this key), which is remembered and asked
/// again a day later; the other companies go on.
pub(super) fn found_for<T>(
    fetched: Result<crate::upstream::Fetched<T>, UpstreamError>,
    progress: &mut Progress,
    company: &str,
) -> Result<Option<T>, SyncError> {
    match fetched {
        Err(e) => match e.into_refusal() {
            Ok(refusal) => {
                not_served(progress, company, refusal);
                Ok(None)
            }
            Err(e) => found(Err(e), progress),
        },
        ok => found(ok, progress),
    }
}

/// Notes that the route refused `company`, with what it said.
pub(super) fn not_served(progress: &mut Progress, company: &str, refusal: Refusal) {
    tracing::warn!(
        message = "The route refused this company; remembered, asked again in a day, the other companies go on.",
        company,
        route = %refusal.route,
        status = refusal.status,
        code = refusal.code.as_deref().unwrap_or(""),
    );
    progress.not_served.push(NotServed {
        company: company.to_owned(),
        refusal,
    });
}
