//! `GET /companies/{id}/monthly-revenue`: Taiwan monthly revenue. A company
//! without a mandate (404) is remembered and asked again after
//! `recheck_days`.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, PerCompany, nothing_more, parse_envelope};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

#[derive(Debug, Deserialize)]
pub struct MonthlyRevenuePage<'a> {
    /// The company asked, echoed: known, not stored (rows carry the key asked).
    #[serde(default, borrow, rename = "cik")]
    _cik: Option<&'a RawValue>,
    pub symbol: Option<String>,
    pub currency: Option<String>,
    pub licence: Option<String>,
    #[serde(borrow)]
    pub months: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevenueMonth {
    /// `YYYY-MM`.
    pub month: String,
    pub revenue: Option<f64>,
    pub yoy_pct: Option<f64>,
    pub mom_pct: Option<f64>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_date")]
    pub filed_at: Option<NaiveDate>,
}

table! {
    /// Taiwan monthly revenue; `month` is the first day of the month.
    pub const MONTHLY_REVENUE: MonthlyRevenueRow = "monthly_revenue" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The month (first day) the figure is for.
        month: Date,
        /// Ticker symbol.
        symbol: Text,
        /// Revenue for the month, in `currency`.
        revenue: Float,
        /// Change against the same month a year earlier, in percent.
        yoy_pct: Float,
        /// Change against the prior month, in percent.
        mom_pct: Float,
        /// When the document was filed (UTC).
        filed_at: Date,
        /// ISO 4217 currency code.
        currency: Text,
        /// The open-data licence the figures are published under.
        licence: Text,
    }
    key: &["company_key", "month"],
    load: LoadRule::Replace,
    versions: true,
    lake_partition: Some(LakePartition::Year("month")),
}

pub static FEED: Feed = Feed {
    name: "monthly_revenue",
    route: "/api/v1/companies/{company}/monthly-revenue",
    auth: true,
    tables: &[&MONTHLY_REVENUE],
    fetch: Fetch::PerCompany(PerCompany {
        query: None,
        read: read_page,
        absent_on_404: true,
        restates: None,
    }),
    params: &["recheck_days"],
    check: nothing_more,
};

/// The first day of the month `text` names: `YYYY-MM` (the wire contract),
/// or any day of it as a date or timestamp (another service's choice).
fn month_of(text: &str) -> Option<NaiveDate> {
    use chrono::Datelike;
    NaiveDate::parse_from_str(&format!("{}-01", text.trim()), "%Y-%m-%d")
        .ok()
        .or_else(|| crate::wire::tolerant::parse_date(text.trim()).ok())
        .and_then(|d| d.with_day(1))
}

/// `monthly_revenue`; returns the newest month.
fn read_page(rows: &mut Rows, body: &[u8], company_key: &str) -> Result<Option<NaiveDate>, BodyError> {
    let page: MonthlyRevenuePage = parse_envelope(rows, body)?;
    let mut newest = None;
    // The route lists every month the company filed: a month it no longer
    // lists is withdrawn.
    rows.replace_partition(&MONTHLY_REVENUE, company_key);
    for raw in &page.months {
        let Some(m) = rows.parse::<RevenueMonth>(raw, "monthly revenue") else {
            continue;
        };
        let Some(month) = month_of(&m.month) else {
            rows.quarantine(
                raw.get(),
                format!(
                    "monthly revenue: month {:?} is not YYYY-MM (nor a date in the month)",
                    m.month
                ),
            );
            continue;
        };
        newest = newest.max(Some(month));
        let row = MonthlyRevenueRow {
            company_key: Some(company_key),
            month: Some(month),
            symbol: page.symbol.as_deref(),
            revenue: m.revenue,
            yoy_pct: m.yoy_pct,
            mom_pct: m.mom_pct,
            filed_at: m.filed_at,
            currency: page.currency.as_deref(),
            licence: page.licence.as_deref(),
        };
        rows.push(row, raw.get());
    }
    Ok(newest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_month_is_read_as_a_month_or_any_day_of_it() {
        let first = NaiveDate::from_ymd_opt(2026, 10, 1);
        for text in [
            "2026-10",
            "2026-10-01",
            "2026-10-31",
            "2026-10-01T00:00:00Z",
            " 2026-10 ",
        ] {
            assert_eq!(month_of(text), first, "{text}");
        }
        for text in ["October 2026", "2026-13", ""] {
            assert_eq!(month_of(text), None, "{text}");
        }
    }
}
