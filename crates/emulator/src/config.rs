//! How an emulator is set up: plans and their limits, header forms, stream
//! timing, injected faults, and the built-in demo keys.

use super::*;

/// A plan's limits. Windows are fixed UTC windows.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanLimits {
    pub name: String,
    pub per_minute: u64,
    pub quota: Option<(QuotaPeriod, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaPeriod {
    Day,
    Month,
}

impl PlanLimits {
    pub fn free() -> PlanLimits {
        PlanLimits {
            name: "free".into(),
            per_minute: 30,
            quota: Some((QuotaPeriod::Day, 250)),
        }
    }
    pub fn build() -> PlanLimits {
        PlanLimits {
            name: "build".into(),
            per_minute: 300,
            quota: Some((QuotaPeriod::Month, 100_000)),
        }
    }
    /// Scale plans are set per account.
    pub fn scale(per_minute: u64, quota: Option<(QuotaPeriod, u64)>) -> PlanLimits {
        PlanLimits {
            name: "scale".into(),
            per_minute,
            quota,
        }
    }

    /// `free`, `build`, or `scale:PER_MINUTE[:PER_MONTH]`.
    pub fn parse(s: &str) -> Option<PlanLimits> {
        let mut parts = s.split(':');
        match parts.next()? {
            "free" => Some(PlanLimits::free()),
            "build" => Some(PlanLimits::build()),
            "scale" => {
                let per_minute = parts.next()?.parse().ok()?;
                let quota = match parts.next() {
                    Some(m) => Some((QuotaPeriod::Month, m.parse().ok()?)),
                    None => None,
                };
                Some(PlanLimits::scale(per_minute, quota))
            }
            _ => None,
        }
    }
}

/// Which rate-limit header form responses carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderForm {
    Legacy,
    Ietf,
    Both,
}

#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    pub seed: u64,
    pub clock: Clock,
    pub accounts: Vec<Account>,
    pub header_form: HeaderForm,
    /// Generated companies beside the named ones.
    pub generated_companies: u64,
    pub sales_email: String,
    pub faults: Faults,
    /// Hostile behaviours of the data routes (none by default).
    pub hostile: super::Hostile,
    /// Which of the contract's legal shapes the data routes serve.
    pub shapes: super::WireShapes,
    /// Other choices a service may make where the specification is open (none by default).
    pub quirks: super::Quirks,
    /// Minutes between 8-K filings on the wire (30: 48 a day).
    pub filing_spacing_minutes: i64,
    pub stream: StreamTiming,
    /// How long a revoked key keeps working on the data routes (spec: about 60 s).
    pub revoke_delay: chrono::Duration,
}

/// Real-time intervals of the SSE stream (spec: ping every 15 s, close after about 280 s).
#[derive(Debug, Clone)]
pub struct StreamTiming {
    pub ping: std::time::Duration,
    pub close_after: std::time::Duration,
    /// How often the stream looks for new or rewritten items.
    pub poll: std::time::Duration,
}

impl Default for StreamTiming {
    fn default() -> Self {
        StreamTiming {
            ping: std::time::Duration::from_secs(15),
            close_after: std::time::Duration::from_secs(280),
            poll: std::time::Duration::from_millis(250),
        }
    }
}

/// Keys every emulator knows unless told otherwise, documented in the README.
pub const DEMO_FREE_KEY: &str = "pk_live_emulator_free_0001";

pub const DEMO_BUILD_KEY: &str = "pk_live_emulator_build_0001";

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            seed: 42,
            clock: Clock::System,
            accounts: vec![
                Account::new("free-demo", PlanLimits::free(), vec![DEMO_FREE_KEY.into()]),
                Account::new("build-demo", PlanLimits::build(), vec![DEMO_BUILD_KEY.into()]),
            ],
            header_form: HeaderForm::Legacy,
            generated_companies: 5000,
            sales_email: "sales@example.invalid".into(),
            faults: Faults::default(),
            hostile: super::Hostile::default(),
            shapes: super::WireShapes::default(),
            quirks: super::Quirks::default(),
            filing_spacing_minutes: super::world::FILING_SPACING_MINUTES,
            stream: StreamTiming::default(),
            revoke_delay: chrono::Duration::seconds(60),
        }
    }
}

/// Faults injected into data-route responses, each at a rate from 0 to 1.
/// Decisions are a function of the seed and the request's sequence number, so
/// a run with the same faults and requests fails the same way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// 503 with an error body.
    pub server_error: f64,
    /// Headers sent, then the connection drops mid-body.
    pub reset: f64,
    /// A 200 whose JSON body stops halfway.
    pub truncate: f64,
    /// Responses delayed by `slow_ms` (real time).
    pub slow: f64,
    pub slow_ms: u64,
    /// A 200 whose first record list has its first record replaced by one of
    /// the wrong shape (the rest of the page intact): a record to quarantine.
    pub bad_record: f64,
    /// A 429 `rate_limited` with `Retry-After: 1`, as seconds or as an
    /// HTTP date (alternately): a storm of them at high rates.
    pub throttle: f64,
}

impl Faults {
    /// `5xx=0.1,reset=0.05,truncate=0.05,slow=0.1,slow_ms=200,bad_record=0.1,throttle=0.1`.
    pub fn parse(s: &str) -> Result<Faults, String> {
        let mut f = Faults {
            slow_ms: 200,
            ..Faults::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected NAME=RATE"))?;
            let rate: f64 = v.parse().map_err(|_| format!("{part:?}: {v:?} is not a number"))?;
            let slot = match k {
                "5xx" => &mut f.server_error,
                "reset" => &mut f.reset,
                "truncate" => &mut f.truncate,
                "slow" => &mut f.slow,
                "bad_record" => &mut f.bad_record,
                "throttle" => &mut f.throttle,
                "slow_ms" => {
                    f.slow_ms = rate as u64;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "{k:?}: expected 5xx, reset, truncate, slow, slow_ms, bad_record or throttle"
                    ));
                }
            };
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{part:?}: a rate is between 0 and 1"));
            }
            *slot = rate;
        }
        Ok(f)
    }
}
