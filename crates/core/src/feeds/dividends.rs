//! `GET /companies/{id}/dividends`: dividend events, the day's summary, and
//! the month-end trailing-yield series, all from one response.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, PerCompany, nothing_more, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

#[derive(Debug, Deserialize)]
pub struct DividendsPage<'a> {
    pub cik: Option<String>,
    pub symbol: Option<String>,
    pub currency: Option<String>,
    #[serde(borrow)]
    pub events: Vec<&'a RawValue>,
    #[serde(borrow)]
    pub summary: Option<&'a RawValue>,
    #[serde(borrow, rename = "yieldSeries")]
    pub yield_series: Vec<&'a RawValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DividendEvent {
    #[serde(deserialize_with = "crate::wire::tolerant::date")]
    pub ex_date: NaiveDate,
    #[serde(rename = "type")]
    pub kind: String,
    pub amount: f64,
    pub amount_split_adj: Option<f64>,
    pub ttm: Option<f64>,
    pub change_pct: Option<f64>,
    pub yield_at_ex_date_pct: Option<f64>,
    pub yield_period_avg_pct: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DividendSummary {
    #[serde(deserialize_with = "crate::wire::tolerant::integer")]
    pub count: i64,
    pub latest_amount: Option<f64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub latest_ex_date: Option<NaiveDate>,
    pub ttm_total: Option<f64>,
    pub last_price: Option<f64>,
    pub trailing_yield_pct: Option<f64>,
    pub indicated_yield_pct: Option<f64>,
    #[serde(rename = "growth1y")]
    pub growth_1y: Option<f64>,
    #[serde(rename = "growth3y")]
    pub growth_3y: Option<f64>,
    pub cadence: Option<String>,
}

/// One element of `yieldSeries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct YieldPoint {
    #[serde(deserialize_with = "crate::wire::tolerant::date")]
    pub date: NaiveDate,
    pub trailing_yield_pct: f64,
}

table! {
    /// Dividend events per company, one per ex-date and type.
    pub const DIVIDENDS: DividendRow = "dividends" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// Ex-dividend date.
        ex_date: Date,
        /// Kind of dividend; a cash dividend is Cash.
        kind as "type": Text,
        /// SEC CIK, zero-padded to 10 digits, or the platform key for non-SEC issuers.
        cik: Text,
        /// Ticker symbol.
        symbol: Text,
        /// ISO 4217 currency code.
        currency: Text,
        /// Dividend per share as paid, in `currency`.
        amount: Float,
        /// Dividend per share adjusted for later splits.
        amount_split_adj: Float,
        /// Trailing-twelve-month dividend total at this payment.
        ttm: Float,
        /// Change against the prior payment, in percent; NULL for the first payment.
        change_pct: Float,
        /// `ttm` over the last split-adjusted close before the ex-date, in percent.
        yield_at_ex_date_pct: Float,
        /// `ttm` over the average close since the previous ex-date, in percent.
        yield_period_avg_pct: Float,
    }
    key: &["company_key", "ex_date", "type"],
    load: LoadRule::Replace,
    versions: true,
    lake_partition: Some(LakePartition::Year("ex_date")),
}

table! {
    /// The dividend summary per company, as served each day.
    pub const DIVIDEND_SUMMARIES: DividendSummaryRow = "dividend_summaries" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The day (UTC) this summary was served.
        as_of_date: Date,
        /// SEC CIK, zero-padded to 10 digits, or the platform key for non-SEC issuers.
        cik: Text,
        /// Ticker symbol.
        symbol: Text,
        /// ISO 4217 currency code.
        currency: Text,
        /// Number counted.
        count: Int,
        /// The latest dividend per share.
        latest_amount: Float,
        /// The latest ex-dividend date.
        latest_ex_date: Date,
        /// Trailing-twelve-month dividend total.
        ttm_total: Float,
        /// Last price.
        last_price: Float,
        /// Trailing-twelve-month dividends over the price, in percent.
        trailing_yield_pct: Float,
        /// Indicated yield from the latest payment annualised, in percent.
        indicated_yield_pct: Float,
        /// Dividend-per-share growth over one year, as a fraction.
        growth_1y: Float,
        /// Dividend-per-share growth over three years, as a fraction.
        growth_3y: Float,
        /// Payment cadence, such as Quarterly or Monthly.
        cadence: Text,
    }
    key: &["company_key", "as_of_date"],
    load: LoadRule::Upsert,
    versions: true,
    lake_partition: Some(LakePartition::Year("as_of_date")),
}

table! {
    /// The month-end trailing-yield history the dividends route serves with
    /// every answer; a restated month replaces the stored one.
    pub const DIVIDEND_YIELDS: DividendYieldRow = "dividend_yields" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The day (UTC) the row is for.
        date: Date,
        /// Trailing-twelve-month dividends over the price, in percent.
        trailing_yield_pct: Float,
    }
    key: &["company_key", "date"],
    load: LoadRule::Upsert,
    versions: true,
    lake_partition: Some(LakePartition::Year("date")),
}

pub static FEED: Feed = Feed {
    name: "dividends",
    route: "/api/v1/companies/{company}/dividends",
    auth: true,
    tables: &[&DIVIDENDS, &DIVIDEND_SUMMARIES, &DIVIDEND_YIELDS],
    fetch: Fetch::PerCompany(PerCompany::plain(read_page)),
    params: &[],
    check: nothing_more,
};

fn read_page(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, BodyError> {
    let page: DividendsPage = parse_envelope(rows, body)?;
    let as_of = rows.fetched_at.date_naive();
    Ok(read(rows, &page, company_key, as_of))
}

/// `dividends`, `dividend_summaries` and `dividend_yields` from one
/// dividends page; returns the latest ex-date.
pub fn read(rows: &mut Rows, page: &DividendsPage<'_>, company_key: &str, as_of: NaiveDate) -> Option<NaiveDate> {
    let cik = page.cik.as_deref().map(crate::wire::company_key);
    let (cik, symbol, currency) = (cik.as_deref(), page.symbol.as_deref(), page.currency.as_deref());
    let mut latest = None;
    // The route lists every event of the company: an event it no longer
    // lists is withdrawn. Its yield series is a trailing window, whose
    // months leave it without being withdrawn.
    rows.replace_partition(&DIVIDENDS, company_key);
    for raw in &page.events {
        let Some(e) = rows.parse::<DividendEvent>(raw, "dividend event") else {
            continue;
        };
        latest = latest.max(Some(e.ex_date));
        let row = DividendRow {
            company_key: Some(company_key),
            ex_date: Some(e.ex_date),
            kind: Some(&e.kind),
            cik,
            symbol,
            currency,
            amount: Some(e.amount),
            amount_split_adj: e.amount_split_adj,
            ttm: e.ttm,
            change_pct: e.change_pct,
            yield_at_ex_date_pct: e.yield_at_ex_date_pct,
            yield_period_avg_pct: e.yield_period_avg_pct,
        };
        rows.push(row, raw.get());
    }
    if let Some(raw) = page.summary
        && let Some(s) = rows.parse::<DividendSummary>(raw, "dividend summary")
    {
        let row = DividendSummaryRow {
            company_key: Some(company_key),
            as_of_date: Some(as_of),
            cik,
            symbol,
            currency,
            count: Some(s.count),
            latest_amount: s.latest_amount,
            latest_ex_date: s.latest_ex_date,
            ttm_total: s.ttm_total,
            last_price: s.last_price,
            trailing_yield_pct: s.trailing_yield_pct,
            indicated_yield_pct: s.indicated_yield_pct,
            growth_1y: s.growth_1y,
            growth_3y: s.growth_3y,
            cadence: s.cadence.as_deref(),
        };
        rows.push(row, raw.get());
    }
    for raw in &page.yield_series {
        let Some(point) = rows.parse::<YieldPoint>(raw, "dividend yield point") else {
            continue;
        };
        if !point.trailing_yield_pct.is_finite() {
            rows.quarantine(
                raw.get(),
                "dividend yield point: trailingYieldPct is not a finite number".into(),
            );
            continue;
        }
        let row = DividendYieldRow {
            company_key: Some(company_key),
            date: Some(point.date),
            trailing_yield_pct: Some(point.trailing_yield_pct),
        };
        rows.push(row, raw.get());
    }
    latest
}
