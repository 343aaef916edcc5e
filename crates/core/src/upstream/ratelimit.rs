//! Rate-limit and quota headers, read without a network, and the [`Pacer`] that
//! spends the per-minute budget they describe.
//!
//! Both header forms of the wire contract are understood: the legacy trio
//! (`RateLimit-Limit`, `-Remaining`, `-Reset`) and the IETF structured pair
//! (`RateLimit-Policy: "minute";q=30;w=60`, `RateLimit: "minute";r=12;t=17`).
//! Either, both or neither may be present.

use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, DurationRound, Utc};
use reqwest::header::HeaderMap;

use crate::clock::Clock;

/// The per-minute window as one response described it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct RateWindow {
    pub limit: Option<u32>,
    pub remaining: Option<u32>,
    /// Seconds until the window ends.
    pub reset_secs: Option<f64>,
}

/// The day or month quota as one response described it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct QuotaWindow {
    pub limit: Option<u64>,
    pub remaining: Option<u64>,
    pub window: Option<String>,
    pub reset_at: Option<DateTime<Utc>>,
    /// `credits` when prepaid credits paid for the request.
    pub billing_source: Option<String>,
    pub credits_remaining_usd: Option<f64>,
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

fn number<T: std::str::FromStr>(s: Option<&str>) -> Option<T> {
    s.and_then(|s| s.parse().ok())
}

impl RateWindow {
    pub fn from_headers(headers: &HeaderMap) -> RateWindow {
        let mut window = RateWindow {
            limit: number(header(headers, "ratelimit-limit")),
            remaining: number(header(headers, "ratelimit-remaining")),
            reset_secs: number::<f64>(header(headers, "ratelimit-reset")).and_then(window_reset),
        };
        // The structured form, when present, fills what the trio left out.
        if let Some(policy) = header(headers, "ratelimit-policy")
            && window.limit.is_none()
        {
            window.limit = structured_param(policy, "q").and_then(|q| q.parse().ok());
        }
        if let Some(state) = header(headers, "ratelimit") {
            if window.remaining.is_none() {
                window.remaining = structured_param(state, "r").and_then(|r| r.parse().ok());
            }
            if window.reset_secs.is_none() {
                window.reset_secs = structured_param(state, "t")
                    .and_then(|t| t.parse::<f64>().ok())
                    .and_then(window_reset);
            }
        }
        window
    }
}

/// A per-minute window ends within a minute: a reset further away is a
/// broken header, taken at one minute rather than obeyed.
const LONGEST_WINDOW_RESET_SECS: f64 = 60.0;

fn window_reset(secs: f64) -> Option<f64> {
    (secs.is_finite() && secs >= 0.0).then(|| secs.min(LONGEST_WINDOW_RESET_SECS))
}

/// The value of `param` in the first item of a structured-field list such as
/// `"minute";r=12;t=17, "day";r=100;t=3600`. The minute policy is the first one
/// listed by the service; if a "minute" item is present anywhere it wins.
fn structured_param<'a>(field: &'a str, param: &str) -> Option<&'a str> {
    let items: Vec<&str> = field.split(',').map(str::trim).collect();
    let item = items
        .iter()
        .find(|i| i.starts_with("\"minute\""))
        .or_else(|| items.first())?;
    item.split(';').skip(1).find_map(|kv| {
        let (k, v) = kv.trim().split_once('=')?;
        (k.trim() == param).then(|| v.trim().trim_matches('"'))
    })
}

impl QuotaWindow {
    /// The window with its reset no later than a month after `now`: a
    /// monthly quota's, the longest there is; a date past that is a broken
    /// header, and nothing may wait for it.
    pub fn bounded(mut self, now: DateTime<Utc>) -> QuotaWindow {
        let latest = now + chrono::Duration::seconds(LONGEST_RETRY_AFTER_SECS as i64);
        self.reset_at = self.reset_at.map(|at| at.min(latest));
        self
    }

    pub fn from_headers(headers: &HeaderMap) -> QuotaWindow {
        QuotaWindow {
            limit: number(header(headers, "x-quota-limit")),
            remaining: number(header(headers, "x-quota-remaining")),
            window: header(headers, "x-quota-window").map(|w| bounded_text(w, 40)),
            reset_at: header(headers, "x-quota-reset")
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|d| d.to_utc()),
            billing_source: header(headers, "x-billing-source").map(|b| bounded_text(b, 40)),
            credits_remaining_usd: number::<f64>(header(headers, "x-credits-remaining-usd")).filter(|c| c.is_finite()),
        }
    }
}

/// At most `chars` characters of a header's text: what the ledger and the
/// logs keep of it.
fn bounded_text(value: &str, chars: usize) -> String {
    value.chars().take(chars).collect()
}

/// How long `Retry-After` asks to wait: delta-seconds or an HTTP-date. Zero,
/// negative or unparseable values give `None`: no hint, so the caller falls back
/// to its own backoff instead of retrying in a hot loop.
pub fn retry_after(headers: &HeaderMap, now: DateTime<Utc>) -> Option<Duration> {
    let value = header(headers, "retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        // A positive value below a nanosecond (`1e-10`) is zero too.
        return (secs.is_finite() && secs > 0.0)
            .then(|| Duration::from_secs_f64(secs.min(LONGEST_RETRY_AFTER_SECS)))
            .filter(|d| !d.is_zero());
    }
    let at: DateTime<Utc> = httpdate::parse_http_date(value).ok()?.into();
    (at - now)
        .to_std()
        .ok()
        .filter(|d| !d.is_zero())
        .map(|d| d.min(Duration::from_secs_f64(LONGEST_RETRY_AFTER_SECS)))
}

/// The longest wait a `Retry-After` is taken at, in either form: a monthly
/// quota's reset. A date years away is a broken header, not a reason to hang.
const LONGEST_RETRY_AFTER_SECS: f64 = 86_400.0 * 31.0;

/// Safety margin past a window's announced end: `RateLimit-Reset` is whole seconds
/// and the service may round either way, so one second more never meets a stale window.
const WINDOW_MARGIN: Duration = Duration::from_secs(1);

/// Shares one per-minute budget among every request of the process.
///
/// Before sending, a request takes a token; when none is left it waits for the
/// window's end as the last response announced it. Responses refresh the budget.
#[derive(Debug)]
pub struct Pacer {
    clock: Clock,
    state: Mutex<PaceState>,
    /// Wakes requests waiting for the first answer to say what the budget is.
    answered: tokio::sync::Notify,
}

#[derive(Debug)]
struct PaceState {
    limit: Option<u32>,
    /// Tokens left in the current window, counting requests already sent.
    remaining: Option<u32>,
    window_end: Option<DateTime<Utc>>,
    in_flight: u32,
    /// Answers describing a window that ended before this are stale: the
    /// window was renewed since, and they must not touch the new budget.
    stale_before: Option<DateTime<Utc>>,
}

impl Pacer {
    /// `plan_limit` is the per-minute limit assumed until a response says otherwise.
    pub fn new(clock: Clock, plan_limit: Option<u32>) -> Pacer {
        Pacer {
            clock,
            state: Mutex::new(PaceState {
                limit: plan_limit,
                remaining: plan_limit,
                window_end: None,
                in_flight: 0,
                stale_before: None,
            }),
            answered: tokio::sync::Notify::new(),
        }
    }

    /// Waits until a request may be sent within the per-minute budget, and takes its token.
    pub async fn acquire(&self) {
        loop {
            let answered = self.answered.notified();
            tokio::pin!(answered);
            let wait_until = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let now = self.clock.now();
                // The window is renewed once, by whichever waiter sees its end
                // first; the others then share the renewed budget. Requests
                // still in flight may land in the new window: they count there.
                if let Some(end) = s.window_end
                    && now >= end
                {
                    // At least one request per window, whatever limit was announced.
                    s.remaining = Some(s.limit.unwrap_or(1).max(1).saturating_sub(s.in_flight));
                    s.window_end = None;
                    s.stale_before = Some(end + chrono::Duration::from_std(WINDOW_MARGIN).unwrap_or_default());
                }
                match s.remaining {
                    Some(0) => {
                        let end = *s.window_end.get_or_insert_with(|| next_minute(now));
                        Some(end + chrono::Duration::from_std(WINDOW_MARGIN).unwrap_or_default())
                    }
                    Some(n) => {
                        s.remaining = Some(n - 1);
                        s.in_flight += 1;
                        return;
                    }
                    // No budget known yet: send one request at a time to learn it.
                    None if s.in_flight == 0 => {
                        s.in_flight += 1;
                        return;
                    }
                    None => {
                        // Registered before the lock is released, so an answer
                        // arriving in between still wakes this request.
                        answered.as_mut().enable();
                        None
                    }
                }
            };
            match wait_until {
                Some(deadline) => {
                    tracing::debug!(message = "Pacing: waiting for the rate window.", until = %deadline);
                    self.clock.sleep_until(deadline).await;
                }
                None => answered.await,
            }
        }
    }

    /// Updates the budget from a response's headers (or just releases the token).
    pub fn observe(&self, window: Option<&RateWindow>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.in_flight = s.in_flight.saturating_sub(1);
        self.answered.notify_waiters();
        let Some(w) = window else { return };
        let now = self.clock.now();
        if let Some(limit) = w.limit {
            s.limit = Some(limit);
        }
        // Bounded by `window_reset`; the cap again here keeps a window built by
        // hand from overflowing the date arithmetic.
        let end = w.reset_secs.map(|reset| {
            now + chrono::Duration::milliseconds((reset.clamp(0.0, LONGEST_WINDOW_RESET_SECS) * 1000.0) as i64)
        });
        if let (Some(end), Some(stale)) = (end, s.stale_before)
            && end < stale
        {
            return;
        }
        // Requests still in flight were sent after the server counted this one.
        let left = w.remaining.map(|r| r.saturating_sub(s.in_flight));
        let margin = chrono::Duration::from_std(WINDOW_MARGIN).unwrap_or_default();
        let newer_window = match (end, s.window_end) {
            (_, None) => true,
            (Some(end), Some(current)) => end > current + margin,
            (None, Some(_)) => false,
        };
        if newer_window {
            s.window_end = end.or(s.window_end);
            if left.is_some() {
                s.remaining = left;
            }
        } else if let Some(left) = left {
            // Answers to concurrent requests arrive in any order: within one
            // window an older answer must never raise the budget a newer one lowered.
            s.remaining = Some(s.remaining.map_or(left, |current| current.min(left)));
        }
    }

    /// Sends nothing before `deadline`: a `Retry-After` holds every request of
    /// the process, not only the one that was refused.
    pub fn hold_until(&self, deadline: DateTime<Utc>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.window_end.is_none_or(|end| end < deadline) || s.remaining != Some(0) {
            s.remaining = Some(0);
            s.window_end = Some(deadline);
        }
    }

    /// The per-minute tokens left as last seen, for the request log.
    pub fn remaining(&self) -> Option<u32> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).remaining
    }
}

fn next_minute(now: DateTime<Utc>) -> DateTime<Utc> {
    now.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(now) + chrono::Duration::minutes(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn reads_the_legacy_trio() {
        let w = RateWindow::from_headers(&headers(&[
            ("RateLimit-Limit", "30"),
            ("RateLimit-Remaining", "12"),
            ("RateLimit-Reset", "17"),
        ]));
        assert_eq!(
            w,
            RateWindow {
                limit: Some(30),
                remaining: Some(12),
                reset_secs: Some(17.0)
            }
        );
    }

    #[test]
    fn reads_the_structured_form() {
        let w = RateWindow::from_headers(&headers(&[
            ("RateLimit-Policy", "\"day\";q=250;w=86400, \"minute\";q=30;w=60"),
            ("RateLimit", "\"minute\";r=12;t=17"),
        ]));
        assert_eq!(
            w,
            RateWindow {
                limit: Some(30),
                remaining: Some(12),
                reset_secs: Some(17.0)
            }
        );
    }

    #[test]
    fn tolerates_no_headers_and_garbage() {
        assert_eq!(RateWindow::from_headers(&HeaderMap::new()), RateWindow::default());
        let w = RateWindow::from_headers(&headers(&[("RateLimit-Remaining", "-3"), ("RateLimit", "nonsense")]));
        assert_eq!(w, RateWindow::default());
    }

    #[test]
    fn reads_quota_headers() {
        let q = QuotaWindow::from_headers(&headers(&[
            ("X-Quota-Limit", "250"),
            ("X-Quota-Remaining", "113"),
            ("X-Quota-Window", "day"),
            ("X-Quota-Reset", "2026-11-26T00:00:00Z"),
        ]));
        assert_eq!(q.remaining, Some(113));
        assert_eq!(q.reset_at, Some("2026-11-26T00:00:00Z".parse().unwrap()));
    }

    #[test]
    fn retry_after_forms() {
        let now: DateTime<Utc> = "2026-11-25T10:00:00Z".parse().unwrap();
        assert_eq!(
            retry_after(&headers(&[("Retry-After", "17")]), now),
            Some(Duration::from_secs(17))
        );
        assert_eq!(retry_after(&headers(&[("Retry-After", "0")]), now), None);
        assert_eq!(retry_after(&headers(&[("Retry-After", "-5")]), now), None);
        assert_eq!(
            retry_after(&headers(&[("Retry-After", "Wed, 25 Nov 2026 10:00:30 GMT")]), now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            retry_after(&headers(&[("Retry-After", "Wed, 25 Nov 2026 09:00:00 GMT")]), now),
            None
        );
    }

    #[tokio::test]
    async fn an_older_answer_arriving_late_never_raises_the_budget() {
        let start: DateTime<Utc> = "2026-11-25T10:00:10Z".parse().unwrap();
        let clock = Clock::simulated(start, 0.0);
        let pacer = Pacer::new(clock.clone(), Some(10));
        for _ in 0..3 {
            pacer.acquire().await;
        }
        let answer = |remaining| RateWindow {
            limit: Some(10),
            remaining: Some(remaining),
            reset_secs: Some(50.0),
        };
        // The server counted them in the order 1, 2, 3; the answers come back 3, 1, 2.
        // Seven are truly left; the pacer may be more careful, never less.
        pacer.observe(Some(&answer(7)));
        let after_newest = pacer.remaining();
        pacer.observe(Some(&answer(9)));
        pacer.observe(Some(&answer(8)));
        assert_eq!(pacer.remaining(), after_newest);
        assert!(pacer.remaining() <= Some(7), "{:?}", pacer.remaining());
    }

    #[tokio::test]
    async fn pacer_waits_for_the_window_when_the_budget_is_spent() {
        let start: DateTime<Utc> = "2026-11-25T10:00:10Z".parse().unwrap();
        let clock = Clock::simulated(start, 0.0);
        let pacer = Pacer::new(clock.clone(), None);
        pacer.acquire().await;
        pacer.observe(Some(&RateWindow {
            limit: Some(2),
            remaining: Some(1),
            reset_secs: Some(50.0),
        }));
        pacer.acquire().await;
        pacer.observe(Some(&RateWindow {
            limit: Some(2),
            remaining: Some(0),
            reset_secs: Some(50.0),
        }));
        assert_eq!(clock.now(), start);
        pacer.acquire().await;
        assert!(clock.now() >= start + chrono::Duration::seconds(51), "{}", clock.now());
    }
}
