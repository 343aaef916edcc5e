//! `GET /landing/coverage` (public): coverage by market and data type,
//! observed on the day the service generated the page.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, nothing_more, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

#[derive(Debug, Deserialize)]
pub struct CoveragePage<'a> {
    #[serde(rename = "generatedAt", deserialize_with = "crate::wire::tolerant::timestamp")]
    pub generated_at: DateTime<Utc>,
    #[serde(borrow)]
    pub markets: Vec<CoverageMarketRaw<'a>>,
}

#[derive(Debug, Deserialize)]
pub struct CoverageMarketRaw<'a> {
    pub market: String,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub companies: Option<i64>,
    #[serde(borrow, rename = "dataTypes")]
    pub data_types: Vec<&'a RawValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoverageDataType {
    #[serde(rename = "type")]
    pub data_type: String,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub history_from: Option<NaiveDate>,
    pub completeness_pct: Option<f64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub periods: Option<i64>,
}

table! {
    /// The service's coverage statistics per market and data type, per day.
    pub const COVERAGE_SNAPSHOTS: CoverageRow = "coverage_snapshots" {
        /// The day (UTC) the snapshot was taken.
        observed_date: Date,
        /// Market or exchange lane.
        market: Text,
        /// The kind of data covered, such as prices or filings.
        data_type: Text,
        /// Companies covered in the market for this data type.
        companies: Int,
        /// The earliest period covered.
        history_from: Date,
        /// Share of the expected data present, in percent.
        completeness_pct: Float,
        /// Periods covered.
        periods: Int,
        /// When the service generated the snapshot (UTC).
        generated_at: Timestamp,
    }
    key: &["observed_date", "market", "data_type"],
    load: LoadRule::Upsert,
    versions: true,
    lake_partition: Some(LakePartition::Year("observed_date")),
}

pub static FEED: Feed = Feed {
    name: "coverage",
    route: "/api/v1/landing/coverage",
    auth: false,
    tables: &[&COVERAGE_SNAPSHOTS],
    fetch: Fetch::Single(read),
    params: &[],
    check: nothing_more,
};

/// `coverage_snapshots`; the checkpoint is the page's generation time.
fn read(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: CoveragePage = parse_envelope(rows, body)?;
    let observed = page.generated_at.date_naive();
    for market in &page.markets {
        for raw in &market.data_types {
            let Some(d) = rows.parse::<CoverageDataType>(raw, "coverage data type") else {
                continue;
            };
            let row = CoverageRow {
                observed_date: Some(observed),
                market: Some(&market.market),
                data_type: Some(&d.data_type),
                companies: market.companies,
                history_from: d.history_from,
                completeness_pct: d.completeness_pct,
                periods: d.periods,
                generated_at: Some(page.generated_at),
            };
            rows.push(row, raw.get());
        }
    }
    Ok(page.generated_at.to_rfc3339())
}
