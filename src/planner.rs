//! What is due: from checkpoints and pipeline settings, the requests a run makes.

use chrono::NaiveDate;

use crate::pipeline::Params;

/// Days each lookback range surely covers, whatever calendar arithmetic the
/// service uses (a month is counted as 28 days, a year as 364).
const RANGE_SPANS: &[(&str, i64)] = &[
    ("1M", 28),
    ("3M", 89),
    ("6M", 180),
    ("1Y", 364),
    ("2Y", 729),
    ("5Y", 1820),
];

/// The smallest price lookback that still covers every bar after `last_bar`,
/// plus the trailing `restate_days` the service may have corrected. With no
/// checkpoint, the pipeline's first range (default the whole history).
pub fn price_range(last_bar: Option<NaiveDate>, today: NaiveDate, params: &Params) -> String {
    let first = params.first_range.clone().unwrap_or_else(|| "ALL".into());
    let Some(last) = last_bar else { return first };
    let restate = i64::from(params.restate_days.unwrap_or(7));
    let needed = (today - last).num_days().max(0) + restate;
    RANGE_SPANS
        .iter()
        .find(|(_, span)| *span >= needed)
        .map(|(range, _)| (*range).to_owned())
        .unwrap_or_else(|| "ALL".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> NaiveDate {
        s.parse().unwrap()
    }

    #[test]
    fn first_sync_takes_everything_then_the_smallest_covering_range() {
        let p = Params::default();
        let today = d("2026-11-25");
        assert_eq!(price_range(None, today, &p), "ALL");
        assert_eq!(price_range(Some(d("2026-11-24")), today, &p), "1M");
        assert_eq!(price_range(Some(d("2026-10-01")), today, &p), "3M");
        assert_eq!(price_range(Some(d("2024-01-01")), today, &p), "5Y");
        assert_eq!(price_range(Some(d("2010-01-01")), today, &p), "ALL");
    }
}
