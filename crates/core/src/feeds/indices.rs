//! `GET /indices`: benchmark and sector index snapshots.

use chrono::NaiveDate;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, nothing_more, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::LoadRule;

#[derive(Debug, Deserialize)]
pub struct IndicesPage<'a> {
    #[serde(borrow)]
    pub indices: Vec<&'a RawValue>,
}

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
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub inception_date: Option<NaiveDate>,
    pub last_price: Option<f64>,
    #[serde(deserialize_with = "crate::wire::tolerant::date")]
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
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub price_rows: Option<i64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub days_stale: Option<i64>,
}

table! {
    /// Benchmark indices and sector ETFs, one row per index and last price date.
    pub const INDEX_SNAPSHOTS: IndexRow = "index_snapshots" {
        /// Ticker symbol.
        symbol: Text,
        /// Date of the last price.
        last_price_date: Date,
        /// Name as served.
        name: Text,
        /// Short name.
        short_name: Text,
        /// Index category, such as broad_market.
        category: Text,
        /// The index's role as a benchmark (market, none).
        benchmark_role: Text,
        /// The sector the index tracks; NULL for a broad index.
        sector_key: Text,
        /// The index family.
        index_family: Text,
        /// Issuer of the fund tracking the index.
        issuer: Text,
        /// Annual expense ratio of the fund tracking the index, as a fraction.
        expense_ratio: Float,
        /// The index's inception date.
        inception_date: Date,
        /// Last price.
        last_price: Float,
        /// One-day return, as a fraction (0.01 is 1%).
        return_1d: Float,
        /// One-week return, as a fraction.
        return_1w: Float,
        /// One-month return, as a fraction.
        return_1m: Float,
        /// Year-to-date return, as a fraction.
        return_ytd: Float,
        /// One-year return, as a fraction.
        return_1y: Float,
        /// Five-year return, as a fraction.
        return_5y: Float,
        /// 52-week low.
        low_52w: Float,
        /// 52-week high.
        high_52w: Float,
        /// 30-day volatility.
        volatility_30d: Float,
        /// Daily prices held for the index.
        price_rows: Int,
        /// Days since the index's last price.
        days_stale: Int,
    }
    key: &["symbol", "last_price_date"],
    load: LoadRule::Upsert,
    versions: true,
}

pub static FEED: Feed = Feed {
    name: "indices",
    route: "/api/v1/indices",
    auth: true,
    tables: &[&INDEX_SNAPSHOTS],
    fetch: Fetch::Single(read),
    params: &[],
    check: nothing_more,
};

/// `index_snapshots` from the indices page.
fn read(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: IndicesPage = parse_envelope(rows, body)?;
    for raw in &page.indices {
        let Some(i) = rows.parse::<IndexEntry>(raw, "index entry") else {
            continue;
        };
        let row = IndexRow {
            symbol: Some(&i.symbol),
            last_price_date: Some(i.last_price_date),
            name: i.name.as_deref(),
            short_name: i.short_name.as_deref(),
            category: i.category.as_deref(),
            benchmark_role: i.benchmark_role.as_deref(),
            sector_key: i.sector_key.as_deref(),
            index_family: i.index_family.as_deref(),
            issuer: i.issuer.as_deref(),
            expense_ratio: i.expense_ratio,
            inception_date: i.inception_date,
            last_price: i.last_price,
            return_1d: i.return_1d,
            return_1w: i.return_1w,
            return_1m: i.return_1m,
            return_ytd: i.return_ytd,
            return_1y: i.return_1y,
            return_5y: i.return_5y,
            low_52w: i.low_52w,
            high_52w: i.high_52w,
            volatility_30d: i.volatility_30d,
            price_rows: i.price_rows,
            days_stale: i.days_stale,
        };
        rows.push(row, raw.get());
    }
    Ok(rows.fetched_at.to_rfc3339())
}
