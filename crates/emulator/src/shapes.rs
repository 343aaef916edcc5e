//! Which of the wire contract's legal shapes the data routes serve. Where
//! the contract leaves a choice open (a timestamp where a date is meant,
//! `12.0` or `1.2e1` for `12`, an optional left out rather than null, key
//! order, fields it does not name), the emulator makes one choice by default;
//! `--shapes other` (or `PUT /admin/shapes`) makes the other on every JSON body
//! and stream frame, so that a client is held to the contract and not to the
//! emulator's habits.

use std::fmt::Write as _;

use chrono::{DateTime, FixedOffset, NaiveDate, SecondsFormat};
use serde_json::Value;

use super::*;

/// The shapes the data routes serve.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WireShapes {
    /// The wire contract's examples: dates as dates, timestamps in UTC with
    /// `Z`, integers as integers, nulls written out, keys in one order.
    #[default]
    Contract,
    /// The other legal shape of each: dates as RFC 3339 timestamps,
    /// timestamps at a `-05:00` offset, every number in exponent form
    /// (integers as `1.2e1`), null optionals left out, keys in reverse
    /// order, and a field the contract does not name in every object.
    Other,
}

impl WireShapes {
    /// `contract` or `other`.
    pub fn parse(name: &str) -> Result<WireShapes, String> {
        match name {
            "contract" => Ok(WireShapes::Contract),
            "other" => Ok(WireShapes::Other),
            _ => Err(format!("{name:?}: use contract or other")),
        }
    }
}

/// The field added to every object by [`WireShapes::Other`].
pub const EXTRA_FIELD: &str = "servedShape";

/// Serves each JSON body of a data route in the switched-on shapes.
pub(super) async fn shapes(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let shapes = *state.shapes.lock().unwrap_or_else(|e| e.into_inner());
    let response = next.run(req).await;
    // The stream's frames are rendered where they are written.
    if shapes == WireShapes::Contract || !is_json_answer(&response) {
        return response;
    }
    gate::rewrite_body(response, |value| render(&value, shapes)).await
}

fn is_json_answer(response: &Response) -> bool {
    response.status().is_success()
        && response
            .headers()
            .get(axum::http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"application/json"))
}

/// A JSON body as it was served, and the path and query it answered.
#[derive(Debug, Clone)]
pub struct Served {
    pub target: String,
    pub body: String,
}

/// Keeps each JSON body served while [`super::Emulator::record_served`] is
/// on, for the test that finds every field of it stored.
pub(super) async fn record_served(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let recording = state.served.lock().unwrap_or_else(|e| e.into_inner()).is_some();
    let target = req.uri().to_string();
    let response = next.run(req).await;
    if !recording || !is_json_answer(&response) {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    if let Some(served) = state.served.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        served.push(Served {
            target,
            body: String::from_utf8_lossy(&bytes).into_owned(),
        });
    }
    Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// `value` as JSON text in `shapes`.
pub(super) fn render(value: &Value, shapes: WireShapes) -> String {
    match shapes {
        WireShapes::Contract => value.to_string(),
        WireShapes::Other => {
            let mut out = String::new();
            write_other(value, &mut out);
            out
        }
    }
}

fn write_other(value: &Value, out: &mut String) {
    match value {
        Value::Null | Value::Bool(_) => out.push_str(&value.to_string()),
        Value::Number(n) => match n.as_f64() {
            // Past 2^53 an integer has no exact float: written as it is.
            Some(f) if n.is_f64() || f.abs() < 9_007_199_254_740_992.0 => {
                let _ = write!(out, "{f:e}");
            }
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => out.push_str(&Value::String(other_string(s)).to_string()),
        Value::Array(list) => {
            out.push('[');
            for (i, v) in list.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_other(v, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            let _ = write!(out, "{}:\"other\"", Value::String(EXTRA_FIELD.into()));
            for (k, v) in map.iter().rev().filter(|(_, v)| !v.is_null()) {
                out.push(',');
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_other(v, out);
            }
            out.push('}');
        }
    }
}

/// A date as a timestamp at midnight, a timestamp at another offset; any
/// other string as it was.
fn other_string(s: &str) -> String {
    if s.len() == 10 && NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() {
        return format!("{s}T00:00:00+00:00");
    }
    if s.len() >= 20
        && s.as_bytes()[10] == b'T'
        && let (Ok(t), Some(offset)) = (DateTime::parse_from_rfc3339(s), FixedOffset::west_opt(5 * 3600))
    {
        return t.with_timezone(&offset).to_rfc3339_opts(SecondsFormat::AutoSi, false);
    }
    s.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_shapes_are_the_same_values_written_the_other_legal_way() {
        let served = json!({"filedAt": "2026-10-30", "acceptedAt": "2026-10-30T21:05:09Z",
            "count": 12, "value": 2.9, "headline": null, "month": "2026-10", "items": []});
        let text = render(&served, WireShapes::Other);
        assert_eq!(
            text,
            r#"{"servedShape":"other","value":2.9e0,"month":"2026-10","items":[],"filedAt":"2026-10-30T00:00:00+00:00","count":1.2e1,"acceptedAt":"2026-10-30T16:05:09-05:00"}"#
        );
        let read: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(read["count"].as_f64(), Some(12.0));
        assert_eq!(
            DateTime::parse_from_rfc3339(read["acceptedAt"].as_str().unwrap()).unwrap(),
            DateTime::parse_from_rfc3339("2026-10-30T21:05:09Z").unwrap()
        );
        assert_eq!(render(&served, WireShapes::Contract), served.to_string());
    }
}
