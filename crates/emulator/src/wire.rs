//! The shapes the emulator serves, written from the wire contract rather than
//! borrowed from fdsync's readers, so that a habit of fdsync's readers is never
//! the emulator's too.

use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
use serde::{Deserialize, Serialize};

/// The prefix of every API key the service issues.
pub const KEY_PREFIX: &str = "pk_live_";

/// Error body of every non-2xx JSON response.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sales_email: Option<String>,
    /// On a 400 for an 8-K filing with several coded items: the items it carries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub items: Option<Vec<String>>,
}

/// A daily bar of `/prices/{id}`: `t` in epoch milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    pub t: i64,
    pub o: Option<f64>,
    pub h: Option<f64>,
    pub l: Option<f64>,
    pub c: f64,
    pub v: Option<i64>,
}

/// One element of a company's `dividends` list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DividendEvent {
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

/// A company's dividend `summary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DividendSummary {
    pub count: i64,
    pub latest_amount: Option<f64>,
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
    pub date: NaiveDate,
    pub trailing_yield_pct: f64,
}

/// A company of `/companies`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Company {
    pub cik: String,
    pub symbol: Option<String>,
    pub name: Option<String>,
    pub market: Option<String>,
    pub currency: Option<String>,
    #[serde(default)]
    pub predecessors: Vec<String>,
}

/// One data type of a coverage market.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoverageDataType {
    #[serde(rename = "type")]
    pub data_type: String,
    pub history_from: Option<NaiveDate>,
    pub completeness_pct: Option<f64>,
    pub periods: Option<i64>,
}

/// A market of `/landing/coverage`.
#[derive(Debug, Clone, Serialize)]
pub struct CoverageMarket {
    pub market: String,
    pub companies: i64,
    #[serde(rename = "dataTypes")]
    pub data_types: Vec<CoverageDataType>,
}

/// An index snapshot of `/indices`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub symbol: String,
    pub name: Option<String>,
    pub short_name: Option<String>,
    pub category: Option<String>,
    pub benchmark_role: Option<String>,
    pub sector_key: Option<String>,
    pub index_family: Option<String>,
    pub issuer: Option<String>,
    pub expense_ratio: Option<f64>,
    pub inception_date: Option<NaiveDate>,
    pub last_price: Option<f64>,
    pub last_price_date: NaiveDate,
    pub return_1d: Option<f64>,
    pub return_1w: Option<f64>,
    pub return_1m: Option<f64>,
    pub return_ytd: Option<f64>,
    pub return_1y: Option<f64>,
    pub return_5y: Option<f64>,
    pub low_52w: Option<f64>,
    pub high_52w: Option<f64>,
    pub volatility_30d: Option<f64>,
    pub price_rows: Option<i64>,
    pub days_stale: Option<i64>,
}

/// A time a client sends (`changedSince`): RFC 3339 in any offset, or, as a
/// lenient server reads it, a date and time without one taken as UTC.
pub fn parse_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s).map(|t| t.to_utc()).ok().or_else(|| {
        ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M"]
            .iter()
            .find_map(|format| NaiveDateTime::parse_from_str(s, format).ok())
            .map(|t| t.and_utc())
            .or_else(|| {
                NaiveDate::parse_from_str(s, "%Y-%m-%d")
                    .ok()
                    .map(|d| d.and_time(NaiveTime::MIN).and_utc())
            })
    })
}
