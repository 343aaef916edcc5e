//! Companies a per-company route does not serve: a 404 for one company is
//! remembered in a checkpoint partition of its own, reported, and asked
//! again a day later, without ending the pipeline `partial`.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use super::{Member, Progress, SyncError, found};
use crate::bookkeeping::NOT_SERVED;
use crate::pipeline::Pipeline;
use crate::sink::{Checkpoint, StoredCheckpoint};
use crate::upstream::UpstreamError;

/// A company a per-company route does not serve (it answered 404).
#[derive(Debug, Clone)]
pub(super) struct NotServed {
    pub(super) company: String,
    pub(super) route: String,
    pub(super) message: String,
}

/// The checkpoint partition remembering that a pipeline's route answered
/// 404 for `company`, and when (its cursor).
pub(super) fn not_served_partition(company: &str) -> String {
    format!("{NOT_SERVED}{company}")
}

/// When the pipeline's route last answered 404 for `company`, unless a
/// checkpoint of the company's own has moved since (it was served again).
fn not_served_since(checkpoints: &HashMap<String, StoredCheckpoint>, company: &str) -> Option<DateTime<Utc>> {
    let noted = checkpoints.get(&not_served_partition(company))?;
    let at = noted.cursor.parse::<DateTime<Utc>>().ok()?;
    // Both moved by the sink's own clock: which came last.
    let served = checkpoints.get(company).map(|c| c.updated_at);
    served.is_none_or(|served| served <= noted.updated_at).then_some(at)
}

/// How long a company a route answered 404 for is not asked again.
const NOT_SERVED_RECHECK_HOURS: i64 = 24;

/// `members` split into those to ask and those the route answered 404 for
/// within the last day.
pub(super) fn resting(
    members: Vec<Member>,
    checkpoints: &HashMap<String, StoredCheckpoint>,
    now: DateTime<Utc>,
) -> (Vec<Member>, Vec<Member>) {
    members.into_iter().partition(|m| {
        not_served_since(checkpoints, &m.key)
            .is_none_or(|at| now - at >= chrono::Duration::hours(NOT_SERVED_RECHECK_HOURS))
    })
}

/// The checkpoints remembering each 404 of this run.
pub(super) fn remembered(pipeline: &Pipeline, progress: &Progress, now: DateTime<Utc>) -> Vec<Checkpoint> {
    progress
        .not_served
        .iter()
        .map(|n| Checkpoint {
            pipeline: pipeline.name.clone(),
            partition: not_served_partition(&n.company),
            cursor: now.to_rfc3339(),
        })
        .collect()
}

/// As [`found`], for a company's own route: a 404 says the route does not
/// serve `company`, which is remembered ([`NOT_SERVED`]) and asked again a
/// day later, without ending the pipeline `partial`.
pub(super) fn found_for<T>(
    fetched: Result<crate::upstream::Fetched<T>, UpstreamError>,
    progress: &mut Progress,
    company: &str,
) -> Result<Option<T>, SyncError> {
    match fetched {
        Err(UpstreamError::NotFound { route, message }) => {
            progress.not_served.push(NotServed {
                company: company.to_owned(),
                route,
                message,
            });
            Ok(None)
        }
        other => found(other, progress),
    }
}
