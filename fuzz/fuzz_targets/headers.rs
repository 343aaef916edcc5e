//! Any bytes as rate-limit headers (both forms), quota headers and
//! Retry-After: read or ignored, never a panic; no wait of zero or longer
//! than 31 days.
#![no_main]

use fdsync::upstream::ratelimit::{QuotaWindow, RateWindow, retry_after};
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
    let _ = RateWindow::from_headers(&headers);
    let _ = QuotaWindow::from_headers(&headers);
    if let Some(wait) = retry_after(&headers, now) {
        assert!(!wait.is_zero() && wait.as_secs() <= 31 * 86_400, "{wait:?}");
    }
});
