//! The checkpoints' vocabulary: the partitions the engines keep beside a
//! pipeline's own, and the cursors they write, so that status and the
//! planner read what the engines wrote without asking the engines.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};

/// The checkpoint partition of a tape that its live stream moves.
pub const STREAM_PARTITION: &str = "stream";

/// The checkpoint of when the window was last read again from the oldest
/// pending record (its cursor, an RFC 3339 time).
pub const PENDING_PARTITION: &str = "pending";

/// The checkpoint that a windowed list's `from` and `to` were found
/// inclusive, as the wire contract defines them (its cursor `inclusive`).
pub const DATES_PARTITION: &str = "dates";

/// The checkpoint of a windowed list's tally: the newest day whose tally by
/// kind was asked after the day closed (its cursor a date); no day up to it
/// is asked again.
pub const TALLY_PARTITION: &str = "tally";
/// Its cursor once the service answered a tally request without a tally:
/// it is not asked again.
pub const TALLY_UNSERVED: &str = "unserved";

/// The checkpoint of the backfill: the oldest day from which every later day
/// is stored and, after `;`, how many older records the service still
/// counted then (`2026-10-01;3400`); or [`BACKFILL_COMPLETE`].
pub const BACKFILL_PARTITION: &str = "backfill";
/// The backfill's cursor once the service has nothing older.
pub const BACKFILL_COMPLETE: &str = "complete";

/// The prefix of a partition that remembers a company the pipeline's route
/// refused (`not_served:<company>`), its cursor a [`NotServedCursor`].
pub const NOT_SERVED: &str = "not_served:";

/// The same, as warehouses before refusals other than 404 were remembered
/// wrote it: `404:<company>`, its cursor the time of the 404.
pub const NOT_SERVED_404: &str = "404:";

/// What a route said when it refused a company, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotServedCursor {
    pub at: DateTime<Utc>,
    /// HTTP status (200 for a body past the size cap).
    pub status: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    pub message: String,
    pub route: String,
}

impl NotServedCursor {
    /// A stored cursor: JSON, or the bare time of a 404 an earlier
    /// version wrote; `None` for anything else.
    pub fn parse(cursor: &str) -> Option<NotServedCursor> {
        if let Ok(at) = cursor.parse::<DateTime<Utc>>() {
            return Some(NotServedCursor {
                at,
                status: 404,
                code: None,
                message: String::new(),
                route: String::new(),
            });
        }
        serde_json::from_str(cursor).ok()
    }

    /// The company a not-served partition names, under either prefix.
    pub fn company(partition: &str) -> Option<&str> {
        partition
            .strip_prefix(NOT_SERVED)
            .or_else(|| partition.strip_prefix(NOT_SERVED_404))
    }
}

/// The prefix of the cursor of a company without a monthly revenue mandate
/// (`no_mandate:<day>`): the day the service said so (404), so it is asked
/// again only after the pipeline's `recheck_days`.
pub const NO_MANDATE: &str = "no_mandate:";

/// Where one tape stands, saved as the checkpoint's cursor (JSON).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct TapeCursor {
    /// The last `latestId`: the next `after`.
    pub(crate) after: Option<String>,
    /// The last `serverTime`: the next `changedSince`.
    pub(crate) changed_since: Option<String>,
    /// The next `before` of the backfill: kept when a horizon stops it, so
    /// a horizon raised or removed later goes on from there.
    pub(crate) before: Option<String>,
    /// The oldest `firstSeenAt` the backfill read: every item since is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reached: Option<DateTime<Utc>>,
    /// The backfill reached the start of the tape.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) complete: bool,
    /// A saved search no longer configured: not read, and its backfill
    /// neither counts nor keeps the pipeline due; configured again, it
    /// goes on from here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) retired: bool,
}

/// How far one tape's backfill reached, read from its checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapeBackfill {
    pub reached: Option<DateTime<Utc>>,
    pub complete: bool,
}

impl TapeBackfill {
    /// `None` for a cursor that does not parse, or a retired tape's.
    pub fn parse(cursor: &str) -> Option<TapeBackfill> {
        let c: TapeCursor = serde_json::from_str(cursor).ok().filter(|c: &TapeCursor| !c.retired)?;
        Some(TapeBackfill {
            reached: c.reached,
            complete: c.complete,
        })
    }
}

/// Where a backfill stands: the oldest day reached, and how many older
/// records the service counted when it got there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backfill {
    pub reached: NaiveDate,
    pub left: Option<u64>,
}

impl Backfill {
    /// `None` for a complete backfill or a cursor that does not parse.
    pub fn parse(cursor: &str) -> Option<Backfill> {
        let (day, left) = cursor.split_once(';').unwrap_or((cursor, ""));
        Some(Backfill {
            reached: day.parse().ok()?,
            left: left.parse().ok(),
        })
    }
}

impl std::fmt::Display for Backfill {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self.left {
            Some(left) => write!(f, "{};{left}", self.reached),
            None => write!(f, "{}", self.reached),
        }
    }
}
