//! The emulator's synthetic world: companies, daily bars and dividends (and, in `market.rs`,
//! indices and coverage), all derived from a seed and the clock's date, so the same seed and clock
//! give the same bytes and nothing large is held in memory. Generated companies (`S0001`...) exist
//! lazily: a profile is computed from its number when asked for.

use chrono::{DateTime, Datelike, Duration, NaiveDate, Utc, Weekday};

use crate::wire::Bar;
use crate::wire::Company;
use crate::wire::{DividendEvent, DividendSummary, YieldPoint};

/// splitmix64: a small, well-mixed hash for deterministic pseudo-randomness.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A stable hash of a string (FNV-1a), for seeding per-entity streams.
pub fn mix_str(s: &str) -> u64 {
    hash_str(s)
}

fn hash_str(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Uniform in [0, 1).
pub fn unit(seed: u64, a: u64, b: u64) -> f64 {
    (mix(seed ^ mix(a ^ mix(b))) >> 11) as f64 / (1u64 << 53) as f64
}

/// Roughly standard normal (Irwin-Hall of four uniforms, rescaled).
fn normal(seed: u64, a: u64, b: u64) -> f64 {
    let s: f64 = (0..4).map(|k| unit(seed, a, b.wrapping_mul(4).wrapping_add(k))).sum();
    (s - 2.0) * 3f64.sqrt()
}

pub fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

#[derive(Debug, Clone)]
pub struct DividendPolicy {
    pub months_between: u32,
    pub first: NaiveDate,
    /// Yield of the first payment, in percent of the price then; later payments
    /// grow by `annual_raise` each calendar year.
    pub initial_yield_pct: f64,
    pub annual_raise: f64,
}

#[derive(Debug, Clone)]
pub struct CompanyProfile {
    pub cik: String,
    pub symbol: String,
    pub name: String,
    pub market: String,
    pub currency: String,
    pub predecessors: Vec<String>,
    pub listed: NaiveDate,
    pub start_price: f64,
    pub drift: f64,
    pub vol: f64,
    pub base_volume: f64,
    pub dividend: Option<DividendPolicy>,
    /// A split on this date by this ratio (2.0 = two for one); bars are split-adjusted.
    pub split: Option<(NaiveDate, f64)>,
    /// A new name from this date on, as a company payload shows it.
    pub renamed: Option<(NaiveDate, &'static str)>,
}

impl CompanyProfile {
    /// The company's payload as served on `today`.
    pub fn payload(&self, today: NaiveDate) -> Company {
        let name = match self.renamed {
            Some((from, renamed)) if today >= from => renamed.to_owned(),
            _ => self.name.clone(),
        };
        Company {
            cik: self.cik.clone(),
            symbol: Some(self.symbol.clone()),
            name: Some(name),
            market: Some(self.market.clone()),
            currency: Some(self.currency.clone()),
            predecessors: self.predecessors.clone(),
        }
    }
}

pub(super) fn d(y: i32, m: u32, day: u32) -> NaiveDate {
    NaiveDate::from_ymd_opt(y, m, day).expect("valid literal date")
}

struct Named {
    cik: &'static str,
    symbol: &'static str,
    name: &'static str,
    market: &'static str,
    currency: &'static str,
    predecessors: &'static [&'static str],
    listed: (i32, u32, u32),
    price: f64,
    /// Months between payments, first ex-date, initial yield in percent.
    dividend: Option<(u32, (i32, u32, u32), f64)>,
    split: Option<((i32, u32, u32), f64)>,
}

/// Renames, so that a client refreshing company payloads has something to
/// find: the company, the day, the new name.
const RENAMES: &[(&str, (i32, u32, u32), &str)] = &[("0000726728", (2026, 12, 1), "Realty Income Corp.")];

/// Well-known issuers, so demos and docs read naturally; everything about them is synthetic.
const NAMED: &[Named] = &[
    Named {
        cik: "0000320193",
        symbol: "AAPL",
        name: "Apple Inc.",
        market: "US",
        currency: "USD",
        predecessors: &[],
        listed: (1995, 1, 3),
        price: 1.2,
        dividend: Some((3, (2012, 8, 9), 0.6)),
        split: Some(((2020, 8, 31), 4.0)),
    },
    Named {
        cik: "0000789019",
        symbol: "MSFT",
        name: "Microsoft Corporation",
        market: "US",
        currency: "USD",
        predecessors: &[],
        listed: (1995, 1, 3),
        price: 4.5,
        dividend: Some((3, (2004, 2, 18), 1.1)),
        split: None,
    },
    Named {
        cik: "0001045810",
        symbol: "NVDA",
        name: "NVIDIA Corporation",
        market: "US",
        currency: "USD",
        predecessors: &[],
        listed: (1999, 1, 22),
        price: 0.4,
        dividend: Some((3, (2012, 11, 20), 0.2)),
        split: Some(((2024, 6, 10), 10.0)),
    },
    Named {
        cik: "0000726728",
        symbol: "O",
        name: "Realty Income Corporation",
        market: "US",
        currency: "USD",
        predecessors: &[],
        listed: (1995, 1, 3),
        price: 9.0,
        dividend: Some((1, (1996, 1, 30), 5.2)),
        split: None,
    },
    Named {
        cik: "0001326801",
        symbol: "META",
        name: "Meta Platforms, Inc.",
        market: "US",
        currency: "USD",
        predecessors: &["0001326800"],
        listed: (2012, 5, 18),
        price: 38.0,
        dividend: Some((3, (2024, 2, 22), 0.4)),
        split: None,
    },
    Named {
        cik: "TW:2330",
        symbol: "2330",
        name: "Taiwan Semiconductor Manufacturing Co., Ltd.",
        market: "TW",
        currency: "TWD",
        predecessors: &[],
        listed: (1995, 1, 5),
        price: 60.0,
        dividend: Some((3, (2019, 6, 20), 1.8)),
        split: None,
    },
    Named {
        cik: "JP:7203",
        symbol: "7203",
        name: "Toyota Motor Corporation",
        market: "JP",
        currency: "JPY",
        predecessors: &[],
        listed: (1995, 1, 4),
        price: 300.0,
        dividend: Some((6, (2005, 3, 28), 2.6)),
        split: Some(((2021, 9, 29), 5.0)),
    },
    Named {
        cik: "GB:BP.",
        symbol: "BP.",
        name: "BP p.l.c.",
        market: "GB",
        currency: "GBP",
        predecessors: &[],
        listed: (1995, 1, 3),
        price: 4.0,
        dividend: Some((3, (2000, 2, 10), 4.5)),
        split: None,
    },
    Named {
        cik: "SA:2222",
        symbol: "2222",
        name: "Saudi Arabian Oil Co.",
        market: "SA",
        currency: "SAR",
        predecessors: &[],
        listed: (2019, 12, 11),
        price: 35.0,
        dividend: Some((3, (2020, 5, 17), 3.9)),
        split: None,
    },
];

/// A numbered stream of arrivals (filings, news items): arrival `n` happens at
/// `epoch + n * spacing` plus a jitter shorter than the spacing, so arrival times
/// are monotonic in `n` and a time maps to a number without holding anything.
pub struct Cadence {
    pub epoch: DateTime<Utc>,
    pub spacing_ms: i64,
    pub salt: u64,
}

impl Cadence {
    pub fn at(&self, seed: u64, n: u64) -> DateTime<Utc> {
        let jitter = (unit(seed, self.salt, n) * (self.spacing_ms - 1000) as f64) as i64;
        self.epoch + Duration::milliseconds(n as i64 * self.spacing_ms + jitter)
    }

    /// How many arrivals happened by `now`.
    pub fn count_at(&self, seed: u64, now: DateTime<Utc>) -> u64 {
        let mut n = match (now - self.epoch).num_milliseconds() {
            ms if ms < 0 => return 0,
            ms => (ms / self.spacing_ms) as u64 + 1,
        };
        // The last slot's arrival may still be ahead.
        while n > 0 && self.at(seed, n - 1) > now {
            n -= 1;
        }
        n
    }

    /// The first arrival number whose slot contains or follows `t`.
    pub fn first_at_or_after(&self, t: DateTime<Utc>) -> u64 {
        match (t - self.epoch).num_milliseconds() {
            ms if ms <= 0 => 0,
            ms => (ms / self.spacing_ms) as u64,
        }
    }
}

/// How many named companies the world has.
pub fn named_count() -> usize {
    NAMED.len()
}

/// First CIK of the generated companies `S0000`, `S0001`...
const GENERATED_CIK_BASE: u64 = 9_000_000;

#[derive(Debug, Clone)]
pub struct World {
    pub seed: u64,
    /// How many generated companies exist beside the named ones.
    pub generated: u64,
    /// Minutes between 8-K filings on the wire.
    pub filing_spacing_minutes: i64,
}

/// Minutes between 8-K filings by default: 48 a day.
pub const FILING_SPACING_MINUTES: i64 = 30;

impl World {
    pub fn new(seed: u64, generated: u64) -> World {
        World {
            seed,
            generated,
            filing_spacing_minutes: FILING_SPACING_MINUTES,
        }
    }

    fn named(&self, n: &Named) -> CompanyProfile {
        let h = hash_str(n.cik);
        CompanyProfile {
            cik: n.cik.into(),
            symbol: n.symbol.into(),
            name: n.name.into(),
            market: n.market.into(),
            currency: n.currency.into(),
            predecessors: n.predecessors.iter().map(|s| (*s).to_owned()).collect(),
            listed: d(n.listed.0, n.listed.1, n.listed.2),
            start_price: n.price,
            drift: 0.0004 + 0.0002 * unit(self.seed, h, 1),
            vol: 0.012 + 0.01 * unit(self.seed, h, 2),
            base_volume: 2e6 + 5e7 * unit(self.seed, h, 3),
            dividend: n.dividend.map(|(months, first, yield_pct)| DividendPolicy {
                months_between: months,
                first: d(first.0, first.1, first.2),
                initial_yield_pct: yield_pct,
                annual_raise: 0.06 + 0.06 * unit(self.seed, h, 4),
            }),
            split: n.split.map(|(date, ratio)| (d(date.0, date.1, date.2), ratio)),
            renamed: RENAMES
                .iter()
                .find(|(cik, _, _)| *cik == n.cik)
                .map(|(_, (y, m, day), name)| (d(*y, *m, *day), *name)),
        }
    }

    fn generated(&self, n: u64) -> CompanyProfile {
        let h = mix(n ^ 0x5EED);
        let listed = d(1995, 1, 3) + Duration::days((unit(self.seed, h, 1) * 9000.0) as i64);
        let pays = unit(self.seed, h, 5) < 0.55;
        let months = [1, 3, 3, 3, 6, 12][(unit(self.seed, h, 6) * 6.0) as usize % 6];
        CompanyProfile {
            cik: format!("{:010}", GENERATED_CIK_BASE + n),
            symbol: format!("S{n:04}"),
            name: format!("Synthetic Holdings {n:04} Inc."),
            market: "US".into(),
            currency: "USD".into(),
            predecessors: Vec::new(),
            listed,
            start_price: 5.0 + 95.0 * unit(self.seed, h, 2),
            drift: 0.0001 + 0.0004 * unit(self.seed, h, 3),
            vol: 0.01 + 0.02 * unit(self.seed, h, 4),
            base_volume: 1e5 + 5e6 * unit(self.seed, h, 7),
            dividend: pays.then(|| DividendPolicy {
                months_between: months,
                first: listed + Duration::days(400),
                initial_yield_pct: 0.5 + 5.0 * unit(self.seed, h, 8),
                annual_raise: 0.1 * unit(self.seed, h, 9),
            }),
            split: (unit(self.seed, h, 10) < 0.2).then(|| (listed + Duration::days(2000), 2.0)),
            renamed: None,
        }
    }

    /// The `i`-th named company.
    pub fn named_by_index(&self, i: usize) -> Option<CompanyProfile> {
        NAMED.get(i).map(|n| self.named(n))
    }

    /// Position of a named company by its cik.
    pub fn named_position(&self, cik: &str) -> Option<usize> {
        NAMED.iter().position(|n| n.cik == cik)
    }

    /// Number of a generated company by its cik.
    pub fn generated_number(&self, cik: &str) -> Option<u64> {
        cik.parse::<u64>()
            .ok()?
            .checked_sub(GENERATED_CIK_BASE)
            .filter(|n| *n < self.generated)
    }

    /// The `n`-th generated company.
    pub fn generated_by_index(&self, n: u64) -> Option<CompanyProfile> {
        (n < self.generated).then(|| self.generated(n))
    }

    /// Resolves a company identifier as the spec defines: platform key, CIK
    /// (padded or not) or a ticker, which always means the SEC registrant.
    pub fn resolve(&self, id: &str) -> Option<CompanyProfile> {
        let id = id.trim();
        if id.contains(':') {
            let upper = id.to_ascii_uppercase();
            return NAMED.iter().find(|n| n.cik == upper).map(|n| self.named(n));
        }
        if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) {
            let number: u64 = id.parse().ok()?;
            let padded = format!("{number:010}");
            if let Some(n) = NAMED.iter().find(|n| n.cik == padded) {
                return Some(self.named(n));
            }
            return number
                .checked_sub(GENERATED_CIK_BASE)
                .filter(|n| *n < self.generated)
                .map(|n| self.generated(n));
        }
        let upper = id.to_ascii_uppercase();
        if let Some(n) = NAMED.iter().find(|n| n.symbol == upper && n.market == "US") {
            return Some(self.named(n));
        }
        let n: u64 = upper.strip_prefix('S').filter(|r| r.len() == 4)?.parse().ok()?;
        (n < self.generated).then(|| self.generated(n))
    }

    /// Bars of every trading day from listing to the last complete session at `now`.
    /// A day's bar exists once its session closed (21:00 UTC) and is restated
    /// (final volume, sometimes a corrected close) two days later.
    pub fn daily_bars(&self, c: &CompanyProfile, now: DateTime<Utc>) -> Vec<(NaiveDate, Bar)> {
        let last = last_session(now);
        let h = hash_str(&c.cik);
        let mut out = Vec::new();
        let mut log_close = c.start_price.ln();
        let mut day = c.listed;
        let mut i: u64 = 0;
        while day <= last {
            if is_trading_day(day) {
                let prev = log_close.exp();
                log_close += c.drift + c.vol * normal(self.seed, h, i);
                let close = log_close.exp();
                let open = prev * (1.0 + 0.004 * normal(self.seed, h ^ 1, i));
                let spread = 1.0 + 0.01 * unit(self.seed, h ^ 2, i);
                let t = day.and_hms_opt(0, 0, 0).expect("midnight").and_utc().timestamp_millis();
                let mut volume = c.base_volume * (0.5 + unit(self.seed, h ^ 3, i));
                let mut served_close = close;
                // A bar is preliminary for two days after its session: volume is
                // short, and some closes are corrected when the bar is restated.
                let closed_at = day.and_hms_opt(21, 0, 0).expect("21:00").and_utc();
                if now < closed_at + Duration::hours(48) {
                    volume *= 0.85 + 0.1 * unit(self.seed, h ^ 4, i);
                    if unit(self.seed, h ^ 5, i) < 0.25 {
                        served_close *= 1.0 + 0.005 * (2.0 * unit(self.seed, h ^ 6, i) - 1.0);
                    }
                }
                out.push((
                    day,
                    Bar {
                        t,
                        o: Some(round(open, 4)),
                        h: Some(round(open.max(close).max(served_close) * spread, 4)),
                        l: Some(round(open.min(close).min(served_close) / spread, 4)),
                        c: round(served_close, 4),
                        v: Some(volume as i64),
                    },
                ));
                i += 1;
            }
            day = day.succ_opt().expect("date in range");
        }
        out
    }

    /// Dividend events oldest first, with every derived field as the spec defines it.
    pub fn dividends(
        &self,
        c: &CompanyProfile,
        bars: &[(NaiveDate, Bar)],
        today: NaiveDate,
    ) -> (Vec<DividendEvent>, DividendSummary, Vec<YieldPoint>) {
        let Some(policy) = &c.dividend else {
            return (Vec::new(), DividendSummary::default(), Vec::new());
        };
        let mut dates = Vec::new();
        let mut month = policy.first.with_day(1).expect("first of month");
        let start = policy.first.max(c.listed + Duration::days(30));
        while let Some(ex) = first_weekday_from(month.with_day(policy.first.day().min(28)).expect("day <= 28")) {
            if ex > today {
                break;
            }
            if ex >= start {
                dates.push(ex);
            }
            month = month
                .checked_add_months(chrono::Months::new(policy.months_between))
                .expect("month in range");
        }
        let per_year = 12.0 / f64::from(policy.months_between);
        let base_amount = dates
            .first()
            .and_then(|first| close_before(bars, *first))
            .map_or(0.0, |p| policy.initial_yield_pct / 100.0 * p / per_year);
        let mut events: Vec<DividendEvent> = Vec::with_capacity(dates.len());
        let mut adj_amounts: Vec<f64> = Vec::with_capacity(dates.len());
        for (i, ex) in dates.iter().enumerate() {
            let years = (ex.year() - policy.first.year()).max(0);
            let adj = round(base_amount * (1.0 + policy.annual_raise).powi(years), 4);
            let factor = c.split.filter(|(date, _)| ex < date).map_or(1.0, |(_, r)| r);
            adj_amounts.push(adj);
            let ttm = trailing_total(&dates[..=i], &adj_amounts, *ex);
            let change =
                (i > 0 && adj_amounts[i - 1] > 0.0).then(|| round((adj / adj_amounts[i - 1] - 1.0) * 100.0, 4));
            let before = close_before(bars, *ex);
            let window_start = if i > 0 { dates[i - 1] } else { *ex - Duration::days(365) };
            let avg = average_close(bars, window_start, *ex);
            events.push(DividendEvent {
                ex_date: *ex,
                kind: "Cash".into(),
                amount: round(adj * factor, 4),
                amount_split_adj: Some(adj),
                ttm: Some(round(ttm, 4)),
                change_pct: change,
                yield_at_ex_date_pct: before.map(|p| round(ttm / p * 100.0, 4)),
                yield_period_avg_pct: avg.map(|p| round(ttm / p * 100.0, 4)),
            });
        }
        let last_price = bars.last().map(|(_, b)| b.c);
        let ttm_now = trailing_total(&dates, &adj_amounts, today);
        let ttm_then = |months_back: u32| {
            let at = today
                .checked_sub_months(chrono::Months::new(months_back))
                .unwrap_or(today);
            let n = dates.partition_point(|x| *x <= at);
            trailing_total(&dates[..n], &adj_amounts[..n], at)
        };
        let growth =
            |prev: f64, years: f64| (prev > 0.0).then(|| round(((ttm_now / prev).powf(1.0 / years) - 1.0) * 100.0, 4));
        let latest = events.last();
        let summary = DividendSummary {
            count: events.len() as i64,
            latest_amount: latest.map(|e| e.amount),
            latest_ex_date: latest.map(|e| e.ex_date),
            ttm_total: Some(round(ttm_now, 4)),
            last_price,
            trailing_yield_pct: last_price.map(|p| round(ttm_now / p * 100.0, 4)),
            indicated_yield_pct: last_price
                .zip(adj_amounts.last())
                .map(|(p, a)| round(a * per_year / p * 100.0, 4)),
            growth_1y: growth(ttm_then(12), 1.0),
            growth_3y: growth(ttm_then(36), 3.0),
            cadence: Some(cadence(&dates).into()),
        };
        let mut series = Vec::new();
        let mut month_end = today.with_day(1).expect("first") - Duration::days(1);
        for _ in 0..60 {
            let n = dates.partition_point(|x| *x <= month_end);
            if n == 0 {
                break;
            }
            if let Some(p) = close_on_or_before(bars, month_end) {
                let ttm = trailing_total(&dates[..n], &adj_amounts[..n], month_end);
                series.push(YieldPoint {
                    date: month_end,
                    trailing_yield_pct: round(ttm / p * 100.0, 4),
                });
            }
            month_end = month_end.with_day(1).expect("first") - Duration::days(1);
        }
        series.reverse();
        (events, summary, series)
    }
}

/// Ex-dates and amounts within the twelve calendar months ending at `at` (the
/// same month a year earlier excluded), so a quarterly payer always counts four.
fn trailing_total(dates: &[NaiveDate], amounts: &[f64], at: NaiveDate) -> f64 {
    let months = |x: NaiveDate| x.year() * 12 + x.month() as i32;
    dates
        .iter()
        .zip(amounts)
        .filter(|(x, _)| **x <= at && months(at) - months(**x) < 12)
        .map(|(_, a)| a)
        .sum()
}

fn cadence(dates: &[NaiveDate]) -> &'static str {
    if dates.len() < 2 {
        return "Irregular";
    }
    let recent = &dates[dates.len().saturating_sub(5)..];
    let mut gaps: Vec<i64> = recent.windows(2).map(|w| (w[1] - w[0]).num_days()).collect();
    gaps.sort_unstable();
    match gaps[gaps.len() / 2] {
        0..=45 => "Monthly",
        46..=120 => "Quarterly",
        121..=240 => "Semi-Annual",
        _ => "Annual",
    }
}

fn close_before(bars: &[(NaiveDate, Bar)], day: NaiveDate) -> Option<f64> {
    let n = bars.partition_point(|(d, _)| *d < day);
    n.checked_sub(1).map(|i| bars[i].1.c)
}

pub(super) fn close_on_or_before(bars: &[(NaiveDate, Bar)], day: NaiveDate) -> Option<f64> {
    let n = bars.partition_point(|(d, _)| *d <= day);
    n.checked_sub(1).map(|i| bars[i].1.c)
}

/// Average close from `from` to the day before `until`.
fn average_close(bars: &[(NaiveDate, Bar)], from: NaiveDate, until: NaiveDate) -> Option<f64> {
    let lo = bars.partition_point(|(d, _)| *d < from);
    let hi = bars.partition_point(|(d, _)| *d < until);
    let window = &bars[lo..hi.max(lo)];
    (!window.is_empty()).then(|| window.iter().map(|(_, b)| b.c).sum::<f64>() / window.len() as f64)
}

pub fn is_trading_day(day: NaiveDate) -> bool {
    !matches!(day.weekday(), Weekday::Sat | Weekday::Sun)
}

fn first_weekday_from(mut day: NaiveDate) -> Option<NaiveDate> {
    while !is_trading_day(day) {
        day = day.succ_opt()?;
    }
    Some(day)
}

/// The last day whose session has closed at `now` (sessions close at 21:00 UTC).
pub fn last_session(now: DateTime<Utc>) -> NaiveDate {
    (now - Duration::hours(21)).date_naive()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-25T12:00:00Z".parse().unwrap()
    }

    #[test]
    fn identifiers_resolve_as_the_spec_says() {
        let w = World::new(42, 100);
        assert_eq!(w.resolve("MSFT").unwrap().cik, "0000789019");
        assert_eq!(w.resolve("789019").unwrap().cik, "0000789019");
        assert_eq!(w.resolve("0000789019").unwrap().cik, "0000789019");
        assert_eq!(w.resolve("TW:2330").unwrap().cik, "TW:2330");
        assert!(w.resolve("2330").is_none(), "a bare number is a CIK, not a Taiwan code");
        assert_eq!(w.resolve("S0007").unwrap().cik, "0009000007");
        assert!(w.resolve("S0100").is_none());
    }

    #[test]
    fn same_seed_same_bars() {
        let w = World::new(42, 10);
        let c = w.resolve("AAPL").unwrap();
        assert_eq!(w.daily_bars(&c, now()), w.daily_bars(&c, now()));
        assert_ne!(w.daily_bars(&c, now()), World::new(43, 10).daily_bars(&c, now()));
    }

    #[test]
    fn dividend_fields_follow_their_definitions() {
        let w = World::new(42, 10);
        let c = w.resolve("MSFT").unwrap();
        let bars = w.daily_bars(&c, now());
        let (events, summary, series) = w.dividends(&c, &bars, now().date_naive());
        assert!(events.windows(2).all(|p| p[0].ex_date < p[1].ex_date), "oldest first");
        assert_eq!(events[0].change_pct, None);
        let i = events.len() - 1;
        let e = &events[i];
        let ttm: f64 = events[i - 3..=i].iter().map(|e| e.amount_split_adj.unwrap()).sum();
        assert!((e.ttm.unwrap() - ttm).abs() < 1e-3);
        let before = close_before(&bars, e.ex_date).unwrap();
        assert!((e.yield_at_ex_date_pct.unwrap() - ttm / before * 100.0).abs() < 1e-2);
        let prev = events[i - 1].amount_split_adj.unwrap();
        assert!((e.change_pct.unwrap() - (e.amount_split_adj.unwrap() / prev - 1.0) * 100.0).abs() < 1e-2);
        assert_eq!(summary.cadence.as_deref(), Some("Quarterly"));
        assert_eq!(summary.count as usize, events.len());
        assert!(!series.is_empty());
        let o = w.resolve("O").unwrap();
        let (_, s, _) = w.dividends(&o, &w.daily_bars(&o, now()), now().date_naive());
        assert_eq!(s.cadence.as_deref(), Some("Monthly"));
    }

    #[test]
    fn split_adjusts_old_amounts_only() {
        let w = World::new(42, 10);
        let c = w.resolve("AAPL").unwrap();
        let bars = w.daily_bars(&c, now());
        let (events, _, _) = w.dividends(&c, &bars, now().date_naive());
        let old = events.iter().find(|e| e.ex_date < d(2020, 8, 31)).unwrap();
        assert!((old.amount - old.amount_split_adj.unwrap() * 4.0).abs() < 1e-3);
        let new = events.last().unwrap();
        assert_eq!(new.amount, new.amount_split_adj.unwrap());
    }
}
