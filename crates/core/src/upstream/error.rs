//! Why a request did not produce a usable response: the errors of
//! [`super::Client::get`], and how a 429 is told to be the quota wall.

use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::wire::ErrorBody;

/// Why a request did not produce a usable response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// A 401, or an access token known to have expired, so not sent.
    #[error("{}: {message}; {advice}", if *sent {
        format!("the service refused the {credential} (401 on {route})")
    } else {
        format!("the {credential} was not sent to {route}")
    })]
    Unauthenticated {
        route: String,
        message: String,
        /// "API key" or "OAuth access token".
        credential: &'static str,
        /// What to do, and for a token whether it had expired.
        advice: String,
        sent: bool,
    },
    #[error("quota exhausted: the {window} window resets at {reset_at}; for a bigger plan contact {sales_email}")]
    QuotaExhausted {
        window: String,
        reset_at: DateTime<Utc>,
        sales_email: String,
    },
    #[error("{route}: not found (404): {message}")]
    NotFound { route: String, message: String },
    #[error("{route}: the service rejected the request (400): {message}")]
    BadRequest {
        route: String,
        message: String,
        body: Box<ErrorBody>,
    },
    /// Any other status that is not a success, a redirect or a 5xx: 402,
    /// 403, 410, 422 and the rest. The service refuses this request, and
    /// asking again at once will not change that.
    #[error("{route}: {}", refusal_text(*status, code.as_deref(), message))]
    Status {
        route: String,
        status: u16,
        code: Option<String>,
        message: String,
    },
    #[error("the request budget of this run ({limit} requests, --max-requests) is spent")]
    BudgetSpent { limit: u64 },
    /// The running pipeline's fair share of the quota left is spent.
    #[error("this pipeline's share of the quota left ({cap} requests) is spent")]
    ShareSpent { cap: u64 },
    #[error(
        "{route}: the service answered HTTP {status} with a redirect to {location}; fdsync sends the API key only to upstream.base_url and follows no redirect to another origin: set upstream.base_url to the service's own address"
    )]
    Redirected {
        route: String,
        status: u16,
        location: String,
    },
    #[error(
        "{route}: the response passed {limit_mb} MiB once decoded (upstream.max_body_mb); it was not read further. Raise the limit if the service really sends pages that large"
    )]
    TooLarge { route: String, limit_mb: u64 },
    /// The process was told to stop ([`Client::stop_sending`](super::Client::stop_sending)): no request
    /// is sent, and one in flight is abandoned.
    #[error("stopping: no further request is sent")]
    Stopped,
    #[error("{route}: {message}")]
    Transient {
        route: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// A 200 whose body is whole JSON that does not have what fdsync reads
    /// there ([`BodyError::Unreadable`]).
    #[error("{route}: the service's answer (200) could not be read: {message}")]
    Unreadable {
        route: String,
        message: String,
        body: Bytes,
    },
}

/// Why a response's body could not be read, which decides whether to ask again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BodyError {
    /// Not whole JSON (cut short or garbled on the way): asked again, as a 5xx is.
    Malformed(String),
    /// Whole JSON of a shape the reader cannot take (its list absent, renamed
    /// or `null`): the service's answer, not a failed transfer, so it is not
    /// asked again; the caller quarantines the body and acts on nothing in it.
    Unreadable(String),
}

impl From<String> for BodyError {
    fn from(message: String) -> BodyError {
        BodyError::Malformed(message)
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::Malformed(m) | BodyError::Unreadable(m) => f.write_str(m),
        }
    }
}

impl UpstreamError {
    pub(super) fn is_retriable(&self) -> bool {
        matches!(self, UpstreamError::Transient { .. })
    }

    /// Whether [`UpstreamError::into_refusal`] takes this error.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            UpstreamError::NotFound { .. }
                | UpstreamError::BadRequest { .. }
                | UpstreamError::Status { .. }
                | UpstreamError::TooLarge { .. }
        )
    }

    /// The refusal this error is, when the service refused one request
    /// (any status but a success, 401, 429 and a 5xx retried until it gave
    /// up, or a body past the size cap), rather than the key, the quota or
    /// the network: what a per-company route remembers for that company.
    ///
    /// # Errors
    /// The error itself, when it is not such a refusal.
    pub fn into_refusal(self) -> Result<Refusal, UpstreamError> {
        Ok(match self {
            UpstreamError::NotFound { route, message } => Refusal {
                route,
                status: 404,
                code: None,
                message,
            },
            UpstreamError::BadRequest { route, message, body } => Refusal {
                route,
                status: 400,
                code: body.code,
                message,
            },
            UpstreamError::Status {
                route,
                status,
                code,
                message,
            } => Refusal {
                route,
                status,
                code,
                message,
            },
            UpstreamError::TooLarge { route, limit_mb } => Refusal {
                route,
                status: 200,
                code: Some(TOO_LARGE.to_owned()),
                message: format!("the response passed {limit_mb} MiB once decoded (upstream.max_body_mb)"),
            },
            other => return Err(other),
        })
    }
}

/// The code a [`Refusal`] of a body past the size cap carries (the
/// service sent a 200; fdsync refused to read it whole).
pub const TOO_LARGE: &str = "too_large";

/// One request the service refused, with what it said: remembered for the
/// company it was about, reported, and asked again a day later.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refusal {
    pub route: String,
    /// The HTTP status (200 for a body past the size cap).
    pub status: u16,
    /// The error body's `code`, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The service's message (cut to a few hundred characters).
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.route,
            refusal_text(self.status, self.code.as_deref(), &self.message)
        )
    }
}

/// A refusal in words: its status, its code, what it means where the
/// specification says (402: the plan), and the service's message.
pub fn refusal_text(status: u16, code: Option<&str>, message: &str) -> String {
    let code = code.map(|c| format!(" {c}")).unwrap_or_default();
    let meaning = match status {
        402 => "the key's plan does not include this route (a larger plan would serve it)",
        403 => "the service forbids this key this resource",
        404 => "not found",
        400 => "the service rejected the request",
        410 => "the resource is gone",
        200 => "not read",
        _ => "refused",
    };
    format!("HTTP {status}{code}: {meaning}: {message}")
}

/// Whether a 429 is the quota wall rather than the minute's limit: its code
/// says so, or, without a code that says either, the quota left is 0 or the
/// wait asked for is longer than any minute window needs. Retried as a rate
/// limit, such a 429 would hold the run (and its lock) until the quota resets.
pub(super) fn is_quota_wall(code: Option<&str>, quota_remaining: Option<u64>, retry_after: Option<Duration>) -> bool {
    match code {
        Some("quota_exceeded") => true,
        Some("rate_limited") => false,
        _ => quota_remaining == Some(0) || retry_after.is_some_and(|wait| wait > RATE_WINDOW_WAIT),
    }
}

/// The longest `Retry-After` a per-minute limit can need, with room for a
/// clock that runs a little apart from the service's.
const RATE_WINDOW_WAIT: Duration = Duration::from_secs(120);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_429_is_the_quota_wall_by_its_code_or_else_by_what_its_headers_say() {
        let (minute, hour) = (Some(Duration::from_secs(17)), Some(Duration::from_secs(3600)));
        assert!(is_quota_wall(Some("quota_exceeded"), Some(3), minute));
        assert!(
            !is_quota_wall(Some("rate_limited"), Some(0), hour),
            "the code says which"
        );
        assert!(is_quota_wall(None, Some(0), minute), "nothing left of the quota");
        assert!(is_quota_wall(None, None, hour), "a wait no minute window needs");
        assert!(
            is_quota_wall(Some("slow_down"), Some(12), hour),
            "a code fdsync does not know"
        );
        assert!(!is_quota_wall(None, Some(12), minute));
        assert!(!is_quota_wall(None, None, None));
    }
}
