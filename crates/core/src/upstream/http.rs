//! The HTTP edge of the client: which redirects are followed, bodies read
//! within a limit, and what of the service's text and reqwest's errors is kept.

use std::time::Duration;

use bytes::Bytes;

use super::{MAX_REDIRECTS, MAX_SERVICE_TEXT, UpstreamError};

/// The most of an error body read: the wire contract's error object is a
/// few fields.
pub(super) const ERROR_BODY_BYTES: u64 = 64 * 1024;

/// Follows a redirect only within the origin the request was sent to: the
/// key travels in a header reqwest would carry to another host. A redirect
/// elsewhere comes back as the 3xx answer, which [`super::Client`] refuses.
pub(super) fn same_origin_redirects() -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(|attempt| {
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if same_origin && attempt.previous().len() <= MAX_REDIRECTS {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}

/// Reads a body as it arrives (decoded), failing once it passes `limit` bytes.
pub(super) async fn read_body(
    mut response: reqwest::Response,
    route: &str,
    limit: u64,
) -> Result<Bytes, UpstreamError> {
    let too_large = || UpstreamError::TooLarge {
        route: route.to_owned(),
        limit_mb: limit >> 20,
    };
    let mut body = bytes::BytesMut::with_capacity(response.content_length().unwrap_or(0).min(limit) as usize);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if (body.len() + chunk.len()) as u64 > limit {
                    return Err(too_large());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body.freeze()),
            Err(e) => {
                return Err(transient(
                    route,
                    format!("response body cut short: {}", without_url(&e)),
                    None,
                ));
            }
        }
    }
}

/// Text the service wrote, as the logs and the bookkeeping tables keep it:
/// lossily UTF-8, without control characters, at most [`MAX_SERVICE_TEXT`]
/// characters.
pub(super) fn service_text(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(&bytes[..bytes.len().min(4 * MAX_SERVICE_TEXT)]);
    let mut out: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_SERVICE_TEXT)
        .collect();
    if text.chars().count() > MAX_SERVICE_TEXT {
        out.push('…');
    }
    out
}

pub(super) fn transient(route: &str, message: String, retry_after: Option<Duration>) -> UpstreamError {
    UpstreamError::Transient {
        route: route.to_owned(),
        message,
        retry_after,
    }
}

/// The errors beneath `e`, nearest first: reqwest's own text names only the
/// kind of failure, its causes say what went wrong.
pub(super) fn causes(e: &reqwest::Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(std::error::Error::source(e), |s| s.source())
}

pub(super) fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "could not connect"
    } else if e.is_body() || e.is_decode() {
        "body error"
    } else {
        "transport error"
    };
    let detail = causes(e).last().map(ToString::to_string).unwrap_or_default();
    if detail.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {detail}")
    }
}
