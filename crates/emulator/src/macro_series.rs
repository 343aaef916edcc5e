//! Macro series with point-in-time history that moves with the clock.
//!
//! Each period is first published some days after it ends (its first vintage),
//! revised once or twice a month apart (new vintages), and, like the real
//! service, old vintages stop being served: for periods older than
//! [`KEEP_VINTAGES_MONTHS`] only the newest vintage is returned. Once a year per
//! series (the March period) a value is restated under its first vintage. All of
//! it is a function of the seed and the clock.

use chrono::{DateTime, Datelike, Duration, Months, NaiveDate, Utc};
use serde::Serialize;

use super::world::{mix_str, round, unit};

pub struct CountryDef {
    pub iso: &'static str,
    pub name: &'static str,
}

pub const COUNTRIES: &[CountryDef] = &[
    CountryDef {
        iso: "US",
        name: "United States",
    },
    CountryDef {
        iso: "JP",
        name: "Japan",
    },
    CountryDef {
        iso: "TW",
        name: "Taiwan",
    },
    CountryDef {
        iso: "KR",
        name: "Korea",
    },
    CountryDef {
        iso: "GB",
        name: "United Kingdom",
    },
    CountryDef {
        iso: "DE",
        name: "Germany",
    },
    CountryDef {
        iso: "SA",
        name: "Saudi Arabia",
    },
    CountryDef {
        iso: "AE",
        name: "United Arab Emirates",
    },
];

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Frequency {
    Monthly,
    Quarterly,
}

pub struct SeriesDef {
    pub key: &'static str,
    pub name: &'static str,
    pub frequency: Frequency,
    pub level: f64,
    pub noise: f64,
    /// Days after the period ends that it is first published.
    pub lag_days: i64,
}

pub const SERIES: &[SeriesDef] = &[
    SeriesDef {
        key: "CPI_YOY",
        name: "Consumer prices, year on year (%)",
        frequency: Frequency::Monthly,
        level: 2.5,
        noise: 0.6,
        lag_days: 14,
    },
    SeriesDef {
        key: "UNEMPLOYMENT_RATE",
        name: "Unemployment rate (%)",
        frequency: Frequency::Monthly,
        level: 4.5,
        noise: 0.4,
        lag_days: 7,
    },
    SeriesDef {
        key: "POLICY_RATE",
        name: "Central bank policy rate (%)",
        frequency: Frequency::Monthly,
        level: 3.0,
        noise: 0.2,
        lag_days: 1,
    },
    SeriesDef {
        key: "GDP_QOQ",
        name: "Real GDP, quarter on quarter (%)",
        frequency: Frequency::Quarterly,
        level: 0.5,
        noise: 0.5,
        lag_days: 30,
    },
];

/// Periods older than this many months are served with their newest vintage only.
pub const KEEP_VINTAGES_MONTHS: u32 = 24;

/// First period of every series.
fn first_period() -> NaiveDate {
    NaiveDate::from_ymd_opt(2000, 1, 1).expect("valid")
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Point {
    pub period: NaiveDate,
    pub value: f64,
    pub vintage: NaiveDate,
}

pub fn country(iso: &str) -> Option<&'static CountryDef> {
    COUNTRIES.iter().find(|c| c.iso == iso)
}

pub fn series(key: &str) -> Option<&'static SeriesDef> {
    SERIES.iter().find(|s| s.key == key)
}

fn period_end(s: &SeriesDef, period: NaiveDate) -> NaiveDate {
    let months = if s.frequency == Frequency::Monthly { 1 } else { 3 };
    period + Months::new(months) - Duration::days(1)
}

/// Every vintage ever published for `period` as of `now`, oldest first, with the
/// value each carried then (a restatement changes the first vintage's value).
fn vintages(seed: u64, c: &CountryDef, s: &SeriesDef, period: NaiveDate, now: DateTime<Utc>) -> Vec<Point> {
    let today = now.date_naive();
    let h = mix_str(c.iso) ^ mix_str(s.key).rotate_left(17);
    let n = (period.year() as u64) * 12 + u64::from(period.month());
    let first = period_end(s, period) + Duration::days(s.lag_days);
    if first > today {
        return Vec::new();
    }
    let base = s.level * (0.6 + 0.8 * unit(seed, h, 0)) + s.noise * (2.0 * unit(seed, h, n) - 1.0);
    let revisions = (unit(seed, h ^ 0xA5, n) * 3.0) as u32; // 0, 1 or 2 revisions
    let mut out = Vec::new();
    let mut value = base;
    for r in 0..=revisions {
        let vintage = first + Duration::days(30 * i64::from(r));
        if vintage > today {
            break;
        }
        if r > 0 {
            value += s.noise * 0.2 * (2.0 * unit(seed, h ^ u64::from(r), n) - 1.0);
        }
        out.push(Point {
            period,
            value: round(value, 3),
            vintage,
        });
    }
    // Once a year per series, the March figure is restated under its first vintage.
    if period.month() == 3 && today >= first + Duration::days(100) {
        out[0].value = round(out[0].value + s.noise * 0.1, 3);
    }
    out
}

/// The history the route serves at `now`: every period published so far; all of
/// a recent period's vintages, only the newest of an older one.
pub fn history(seed: u64, c: &CountryDef, s: &SeriesDef, now: DateTime<Utc>) -> Vec<Point> {
    let today = now.date_naive();
    let cutoff = today - Months::new(KEEP_VINTAGES_MONTHS);
    let step = if s.frequency == Frequency::Monthly { 1 } else { 3 };
    let mut out = Vec::new();
    let mut period = first_period();
    while period <= today {
        let mut v = vintages(seed, c, s, period, now);
        if period < cutoff && v.len() > 1 {
            v.drain(..v.len() - 1);
        }
        out.extend(v);
        period = period + Months::new(step);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn revisions_add_vintages_and_old_ones_are_dropped_later() {
        let (c, s) = (country("US").unwrap(), series("CPI_YOY").unwrap());
        let now = at("2026-11-25T12:00:00Z");
        let h = history(42, c, s, now);
        assert!(
            h.windows(2)
                .all(|w| (w[0].period, w[0].vintage) < (w[1].period, w[1].vintage))
        );
        let revised = h
            .iter()
            .filter(|p| p.vintage > period_end(s, p.period) + Duration::days(s.lag_days))
            .count();
        assert!(revised > 0, "some recent periods carry revisions");
        // Two years on, today's recent multi-vintage periods are served with one vintage.
        let later = history(42, c, s, at("2028-12-01T00:00:00Z"));
        let period = h
            .iter()
            .rev()
            .find(|p| h.iter().filter(|q| q.period == p.period).count() > 1)
            .unwrap()
            .period;
        assert_eq!(later.iter().filter(|p| p.period == period).count(), 1);
    }

    #[test]
    fn a_march_value_is_restated_under_the_same_vintage() {
        let (c, s) = (country("JP").unwrap(), series("CPI_YOY").unwrap());
        let period = NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        let first = period_end(s, period) + Duration::days(s.lag_days);
        let before = vintages(
            42,
            c,
            s,
            period,
            (first + Duration::days(99)).and_hms_opt(0, 0, 0).unwrap().and_utc(),
        );
        let after = vintages(
            42,
            c,
            s,
            period,
            (first + Duration::days(100)).and_hms_opt(0, 0, 0).unwrap().and_utc(),
        );
        assert_eq!(before[0].vintage, after[0].vintage);
        assert_ne!(before[0].value, after[0].value);
    }
}
