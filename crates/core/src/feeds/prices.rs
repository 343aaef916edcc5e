//! `GET /companies/{id}/prices`: daily OHLCV bars, restated bars replaced.

use chrono::{DateTime, NaiveDate};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, Params, PerCompany, Restates, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::Compression::{Dictionary, Fsst};
use crate::tables::{LakePartition, LoadRule};

#[derive(Debug, Deserialize)]
pub struct PricesPage<'a> {
    pub symbol: Option<String>,
    #[serde(borrow)]
    pub bars: Vec<&'a RawValue>,
    #[serde(rename = "displayFrom")]
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub display_from: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    #[serde(deserialize_with = "crate::wire::tolerant::integer")]
    pub t: i64,
    pub o: Option<f64>,
    pub h: Option<f64>,
    pub l: Option<f64>,
    pub c: f64,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub v: Option<i64>,
}

table! {
    /// Daily OHLCV bars per company; a restated bar replaces the stored one.
    pub const PRICES_DAILY: PriceRow = "prices_daily" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The day (UTC) the row is for.
        date: Date,
        /// Ticker symbol.
        symbol: Text,
        /// The bar's time as served, epoch milliseconds.
        t_ms: Int,
        /// Opening price.
        open: Float,
        /// Highest price of the day.
        high: Float,
        /// Lowest price of the day.
        low: Float,
        /// Closing price.
        close: Float,
        /// Shares traded.
        volume: Int,
    }
    key: &["company_key", "date"],
    load: LoadRule::Upsert,
    versions: true,
    lake_partition: Some(LakePartition::Year("date")),
    compression: &[("raw", Fsst), ("company_key", Dictionary), ("symbol", Dictionary)],
}

table! {
    /// The window a prices response said it served (`displayFrom`) beside the
    /// one asked: every whole-history answer, and any other that differs from
    /// the range asked. A log, appended as served.
    pub const PRICE_WINDOWS: PriceWindowRow = "price_windows" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// When fdsync observed the value (UTC).
        observed_at: Timestamp,
        /// The lookback range asked (`ALL`: the whole history).
        range_asked: Text,
        /// The first day the range asked reaches at the least; NULL for `ALL`.
        asked_from: Date,
        /// `displayFrom`, as the day it names: the start of the window served.
        display_from: Date,
        /// The oldest bar served.
        first_bar: Date,
        /// How many bars were served.
        bars: Int,
    }
    load: LoadRule::Append,
}

pub static FEED: Feed = Feed {
    name: "prices",
    route: "/api/v1/companies/{company}/prices",
    auth: true,
    tables: &[&PRICES_DAILY, &PRICE_WINDOWS],
    fetch: Fetch::PerCompany(PerCompany {
        query: Some(range_query),
        read: read_page,
        absent_on_404: false,
        restates: Some(Restates {
            table: &PRICES_DAILY,
            date: "date",
            value: "close",
            whole: "range=ALL",
        }),
    }),
    params: &["first_range", "restate_days"],
    check,
};

/// The price lookback ranges the service accepts.
pub const PRICE_RANGES: &[&str] = &["1M", "3M", "6M", "YTD", "1Y", "2Y", "5Y", "ALL"];

fn check(_route: &str, params: &Params) -> Result<(), String> {
    match &params.first_range {
        Some(range) if !PRICE_RANGES.contains(&range.as_str()) => Err(format!(
            "params.first_range = {range:?}: expected one of {PRICE_RANGES:?}"
        )),
        _ => Ok(()),
    }
}

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

/// The window a lookback `range` asked on `today` covers: the day it surely
/// reaches back to, and the earliest a service counting months and years its
/// own way may start it. `None` for `ALL` (or a range not known).
fn asked_window(range: &str, today: NaiveDate) -> Option<(NaiveDate, NaiveDate)> {
    use chrono::Datelike;
    if range == "YTD" {
        let jan1 = NaiveDate::from_ymd_opt(today.year(), 1, 1)?;
        return Some((jan1, jan1 - chrono::Duration::days(3)));
    }
    let span = RANGE_SPANS.iter().find(|(r, _)| *r == range)?.1;
    Some((
        today - chrono::Duration::days(span),
        today - chrono::Duration::days(span + span / 10 + 3),
    ))
}

/// The lookback range whose calendar start on `today` is within 3 days of
/// `served`, if any.
fn range_starting_at(served: NaiveDate, today: NaiveDate) -> Option<&'static str> {
    use chrono::{Datelike, Months};
    let starts = [
        ("1M", today.checked_sub_months(Months::new(1))),
        ("3M", today.checked_sub_months(Months::new(3))),
        ("6M", today.checked_sub_months(Months::new(6))),
        ("YTD", NaiveDate::from_ymd_opt(today.year(), 1, 1)),
        ("1Y", today.checked_sub_months(Months::new(12))),
        ("2Y", today.checked_sub_months(Months::new(24))),
        ("5Y", today.checked_sub_months(Months::new(60))),
    ];
    starts
        .into_iter()
        .find(|(_, start)| start.is_some_and(|s| (served - s).num_days().abs() <= 3))
        .map(|(range, _)| range)
}

/// What a history shorter than asked is reported as.
pub const SHORTER_THAN_ASKED: &str = "prices: the service served a shorter history than the lookback asked \
     (its displayFrom is later than the range's start)";
/// What a window longer than asked is reported as.
pub const LOOKBACK_IGNORED: &str = "prices: the service served more than the lookback asked, so it seems to \
     ignore the lookback parameter: a history asked with range=ALL may hold only its default window";

/// Keeps the window the response said it served (`displayFrom`) and checks
/// it against the range asked: shorter, or far longer (the parameter
/// ignored), is reported. A whole read replaces nothing before it.
fn check_window(rows: &mut Rows, page: &PricesPage<'_>, company_key: &str, first_bar: Option<NaiveDate>, bars: usize) {
    let range = rows
        .route
        .split_once('?')
        .and_then(|(_, query)| query.split('&').find_map(|p| p.strip_prefix("range=")))
        .unwrap_or("")
        .to_owned();
    let served_from = page.display_from.and_then(|t| {
        bar_date(t, company_key)
            .ok()
            .or_else(|| DateTime::from_timestamp_millis(t).map(|at| at.date_naive()))
    });
    let today = rows.fetched_at.date_naive();
    let asked = asked_window(&range, today);
    rows.served_from = served_from;
    let mut differs = false;
    let route = rows.route.clone();
    match (asked, served_from) {
        (Some((surely, _)), Some(served)) if served > surely => {
            rows.report(
                SHORTER_THAN_ASKED,
                format!("{route} (range={range} reaches {surely}, served from {served})"),
            );
            differs = true;
        }
        (Some((surely, earliest)), Some(served)) if served < earliest => {
            rows.report(
                LOOKBACK_IGNORED,
                format!("{route} (range={range} reaches {surely}, served from {served})"),
            );
            differs = true;
        }
        // The whole history asked, and a window that starts where a lookback
        // range would (a year back to within days): a service answering with
        // its default window, which no later request can tell apart.
        (None, Some(served)) if range == "ALL" => {
            if let Some(like) = range_starting_at(served, today) {
                rows.report_if_shared(
                    LOOKBACK_IGNORED,
                    format!("{route} (the whole history asked, served from {served}, where range={like} starts)"),
                );
            }
        }
        _ => {}
    }
    // A routine refetch served as asked says nothing worth a row a day.
    if asked.is_some() && !differs {
        return;
    }
    let fetched_at = rows.fetched_at;
    // The envelope as served, its bars left out (they are in prices_daily).
    let raw = serde_json::json!({"symbol": page.symbol, "displayFrom": page.display_from}).to_string();
    rows.push(
        PriceWindowRow {
            company_key: Some(company_key),
            observed_at: Some(fetched_at),
            range_asked: Some(&range),
            asked_from: asked.map(|(surely, _)| surely),
            display_from: served_from,
            first_bar,
            bars: Some(bars as i64),
        },
        &raw,
    );
}

fn range_query(last_bar: Option<NaiveDate>, today: NaiveDate, params: &Params) -> String {
    format!("range={}", price_range(last_bar, today, params))
}

/// The time zone of the exchange a company's bars trade on, from its key: a
/// SEC CIK trades in New York, a platform key names its market (`TW:2330`).
/// `None` for a market not in the table.
pub fn exchange_zone(company_key: &str) -> Option<Tz> {
    use chrono_tz::{America, Asia, Europe};
    let market = company_key.split_once(':').map_or("US", |(market, _)| market);
    Some(match market {
        "US" => America::New_York,
        "JP" => Asia::Tokyo,
        "TW" => Asia::Taipei,
        "KR" => Asia::Seoul,
        "HK" => Asia::Hong_Kong,
        "CN" => Asia::Shanghai,
        "SA" => Asia::Riyadh,
        "AE" => Asia::Dubai,
        "QA" => Asia::Qatar,
        "KW" => Asia::Kuwait,
        "BH" => Asia::Bahrain,
        "OM" => Asia::Muscat,
        "GB" => Europe::London,
        "IE" => Europe::Dublin,
        "DE" => Europe::Berlin,
        "FR" => Europe::Paris,
        "NL" => Europe::Amsterdam,
        "BE" => Europe::Brussels,
        "CH" => Europe::Zurich,
        "IT" => Europe::Rome,
        "ES" => Europe::Madrid,
        "PT" => Europe::Lisbon,
        "SE" => Europe::Stockholm,
        "DK" => Europe::Copenhagen,
        "NO" => Europe::Oslo,
        "FI" => Europe::Helsinki,
        "AT" => Europe::Vienna,
        "PL" => Europe::Warsaw,
        _ => return None,
    })
}

/// A bar's trading day. `t` at a UTC midnight (the wire contract) is that
/// day; any other `t` (the exchange's local midnight, or its close) is the
/// calendar day on the exchange, which for Tokyo or Taipei is a day later
/// than the UTC date of their midnight.
///
/// # Errors
/// `t` is not a time, or it is not a UTC midnight and the company's market
/// has no known time zone: said, so the bar is quarantined, not misdated.
pub fn bar_date(t: i64, company_key: &str) -> Result<NaiveDate, String> {
    let at =
        DateTime::from_timestamp_millis(t).ok_or_else(|| format!("t={t} is not a valid epoch-millisecond time"))?;
    if t.rem_euclid(86_400_000) == 0 {
        return Ok(at.date_naive());
    }
    let zone = exchange_zone(company_key).ok_or_else(|| {
        format!(
            "t={t} ({at}) is not a UTC midnight, and {company_key}'s market has no known exchange time zone to date it by"
        )
    })?;
    Ok(at.with_timezone(&zone).date_naive())
}

fn read_page(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, BodyError> {
    let page: PricesPage = parse_envelope(rows, body)?;
    Ok(read(rows, &page, company_key))
}

/// `prices_daily` from one prices page; returns the newest bar's date.
pub fn read(rows: &mut Rows, page: &PricesPage<'_>, company_key: &str) -> Option<NaiveDate> {
    let (mut newest, mut oldest) = (None, None::<NaiveDate>);
    for raw in &page.bars {
        let Some(bar) = rows.parse::<Bar>(raw, "price bar") else {
            continue;
        };
        let date = match bar_date(bar.t, company_key) {
            Ok(date) => date,
            Err(why) => {
                rows.quarantine(raw.get(), format!("price bar: {why}"));
                continue;
            }
        };
        if !bar.c.is_finite() {
            rows.quarantine(raw.get(), "price bar: close is not a finite number".into());
            continue;
        }
        newest = newest.max(Some(date));
        oldest = Some(oldest.map_or(date, |o| o.min(date)));
        let row = PriceRow {
            company_key: Some(company_key),
            date: Some(date),
            symbol: page.symbol.as_deref(),
            t_ms: Some(bar.t),
            open: bar.o,
            high: bar.h,
            low: bar.l,
            close: Some(bar.c),
            volume: bar.v,
        };
        rows.push(row, raw.get());
    }
    check_window(rows, page, company_key, oldest, page.bars.len());
    newest
}

#[cfg(test)]
mod tests {
    use chrono::Utc;

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

    #[test]
    fn a_bar_is_dated_by_utc_midnight_or_else_by_its_exchange_s_day() {
        let day = d("2026-11-25");
        let utc_midnight = day.and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis();
        for key in ["0000789019", "JP:7203", "TW:2330", "XX:1"] {
            assert_eq!(bar_date(utc_midnight, key), Ok(day), "{key}");
        }
        // Local midnight: Tokyo's and Taipei's fall on the UTC day before,
        // New York's (EST) on the same one; 16:00 at the New York close too.
        let at = |zone: Tz, h: u32| {
            use chrono::TimeZone;
            zone.from_local_datetime(&day.and_hms_opt(h, 0, 0).unwrap())
                .unwrap()
                .timestamp_millis()
        };
        assert_eq!(bar_date(at(chrono_tz::Asia::Tokyo, 0), "JP:7203"), Ok(day));
        assert_eq!(bar_date(at(chrono_tz::Asia::Taipei, 0), "TW:2330"), Ok(day));
        assert_eq!(bar_date(at(chrono_tz::America::New_York, 0), "0000789019"), Ok(day));
        assert_eq!(bar_date(at(chrono_tz::America::New_York, 16), "0000789019"), Ok(day));
        assert_eq!(bar_date(at(chrono_tz::Europe::London, 0), "GB:BP."), Ok(day));
        let refused = bar_date(at(chrono_tz::Asia::Tokyo, 0), "XX:1").unwrap_err();
        assert!(refused.contains("no known exchange time zone"), "{refused}");
    }

    /// `displayFrom` against the range asked: within it is quiet, later than
    /// its start is a shorter history, far earlier is the parameter ignored.
    #[test]
    fn the_window_served_is_checked_against_the_range_asked() {
        let now = "2026-11-25T12:00:00Z".parse::<chrono::DateTime<Utc>>().unwrap();
        let served = |range: &str, from: &str| {
            let millis = d(from).and_hms_opt(0, 0, 0).unwrap().and_utc().timestamp_millis();
            let body = format!(r#"{{"symbol":"MSFT","displayFrom":{millis},"bars":[]}}"#);
            let page: PricesPage = serde_json::from_str(&body).unwrap();
            let mut rows = Rows::new("run", &format!("/api/v1/companies/MSFT/prices?range={range}"), now);
            read(&mut rows, &page, "0000789019");
            assert_eq!(rows.served_from, Some(d(from)));
            rows.reported.into_iter().map(|(what, ..)| what).collect::<Vec<_>>()
        };
        assert!(served("1M", "2026-10-25").is_empty());
        assert!(served("1Y", "2025-11-25").is_empty());
        assert!(served("YTD", "2026-01-01").is_empty());
        assert!(served("ALL", "1995-01-03").is_empty());
        assert_eq!(
            served("ALL", "2025-11-24"),
            [LOOKBACK_IGNORED],
            "a year back: the default window"
        );
        assert_eq!(served("5Y", "2025-11-25"), [SHORTER_THAN_ASKED]);
        assert_eq!(served("YTD", "2026-02-01"), [SHORTER_THAN_ASKED]);
        assert_eq!(served("1M", "2025-11-25"), [LOOKBACK_IGNORED]);
    }

    #[test]
    fn a_bad_bar_is_quarantined_and_the_rest_load() {
        let body = r#"{"symbol":"MSFT","displayFrom":0,"bars":[
            {"t":1764028800000,"o":1,"h":2,"l":0.5,"c":1.5,"v":10},
            {"t":"yesterday","c":1.5},
            {"o":1,"c":2},
            {"t":1764115200000,"c":1.7,"v":null,"extra":"kept in raw"}]}"#;
        let page: PricesPage = serde_json::from_str(body).unwrap();
        let mut rows = Rows::new("run", "/api/v1/companies/MSFT/prices?range=1M", Utc::now());
        let newest = read(&mut rows, &page, "0000789019");
        assert_eq!(newest, NaiveDate::from_ymd_opt(2025, 11, 26));
        assert_eq!(rows.row_count(), 3, "two bars and the window");
        assert_eq!(rows.quarantined.len(), 2);
        assert!(
            rows.quarantined[0].error.contains("price bar"),
            "{:?}",
            rows.quarantined[0]
        );
        assert_eq!(rows.quarantined[1].record, r#"{"o":1,"c":2}"#);
        let batches = rows.into_batches().unwrap();
        let names: Vec<&str> = batches.iter().map(|b| b.table.name).collect();
        assert_eq!(names, ["prices_daily", "price_windows", "_sync_quarantine"]);
    }
}
