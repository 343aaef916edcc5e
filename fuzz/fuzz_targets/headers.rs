//! Any bytes as rate-limit headers (both forms), quota headers and
//! Retry-After: read or ignored, never a panic; no wait of zero or longer
//! than 31 days; and fed to the pacer, no wait past a window and its margin.
#![no_main]

use fdsync_core::clock::Clock;
use fdsync_core::upstream::ratelimit::{Pacer, QuotaWindow, RateWindow, retry_after};
use libfuzzer_sys::fuzz_target;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

/// Every header `upstream::ratelimit` reads (not the list the emulator test
/// checks the service sends: that one follows the spec, this one the parser).
const NAMES: [&str; 12] = [
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "ratelimit-policy",
    "ratelimit",
    "x-quota-limit",
    "x-quota-remaining",
    "x-quota-window",
    "x-quota-reset",
    "x-billing-source",
    "x-credits-remaining-usd",
    "retry-after",
];

fuzz_target!(|input: &[u8]| {
    // One value per line, in the order of NAMES.
    let mut headers = HeaderMap::new();
    for (name, value) in NAMES.iter().zip(input.split(|b| *b == b'\n')) {
        if let Ok(v) = HeaderValue::from_bytes(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    let now = "2026-11-25T23:00:00Z".parse().unwrap();
    let rate = RateWindow::from_headers(&headers);
    let quota = QuotaWindow::from_headers(&headers).bounded(now);
    if let Some(wait) = retry_after(&headers, now) {
        assert!(!wait.is_zero() && wait.as_secs() <= 31 * 86_400, "{wait:?}");
    }
    assert!(quota.reset_at.is_none_or(|at| at <= now + chrono::Duration::days(31)));
    // The pacer that consumes them, on a clock that moves only when it waits:
    // the next request goes within a window and its margin.
    let clock = Clock::simulated(now, 0.0);
    let pacer = Pacer::new(clock.clone(), None);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let waited = runtime.block_on(async {
        pacer.acquire().await;
        pacer.observe(Some(&rate));
        let before = clock.now();
        pacer.acquire().await;
        clock.now() - before
    });
    assert!(waited <= chrono::Duration::seconds(62), "{waited} after {rate:?}");
});
