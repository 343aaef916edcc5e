//! Records to rows: each mapper turns one parsed response into table rows.
//!
//! A record that does not fit its table (a missing key field, a wrong type) is
//! quarantined with the reason instead of stopping the run or vanishing.

use chrono::{DateTime, NaiveDate, Utc};
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

use crate::batch::BatchBuilder;
use crate::sink::{SinkError, TableBatch};
use crate::tables::{self, TableDef};
use crate::wire;

/// A record that could not be loaded, kept for `_sync_quarantine`.
#[derive(Debug, Clone)]
pub struct Quarantined {
    pub route: String,
    pub record: String,
    pub error: String,
}

/// What one response maps to.
pub struct Rows {
    pub run_id: String,
    pub route: String,
    pub fetched_at: DateTime<Utc>,
    builders: Vec<BatchBuilder>,
    pub quarantined: Vec<Quarantined>,
}

impl Rows {
    pub fn new(run_id: &str, route: &str, fetched_at: DateTime<Utc>) -> Rows {
        Rows {
            run_id: run_id.into(),
            route: route.into(),
            fetched_at,
            builders: Vec::new(),
            quarantined: Vec::new(),
        }
    }

    /// The builder for `table`, created on first use.
    pub fn table(&mut self, table: &str) -> &mut BatchBuilder {
        let def: &'static TableDef = tables::table(table).expect("mappers name contract tables");
        match self.builders.iter().position(|b| b.table().name == def.name) {
            Some(i) => &mut self.builders[i],
            None => {
                self.builders
                    .push(BatchBuilder::new(def, &self.run_id, self.fetched_at));
                self.builders.last_mut().expect("just pushed")
            }
        }
    }

    /// Parses one record, or quarantines it with the reason.
    pub fn parse<T: DeserializeOwned>(&mut self, raw: &RawValue, what: &str) -> Option<T> {
        match serde_json::from_str(raw.get()) {
            Ok(v) => Some(v),
            Err(e) => {
                self.quarantine(raw.get(), format!("{what}: {e}"));
                None
            }
        }
    }

    pub fn quarantine(&mut self, record: &str, error: String) {
        tracing::warn!(message = "Record quarantined.", route = %self.route, %error);
        self.quarantined.push(Quarantined {
            route: self.route.clone(),
            record: record.to_owned(),
            error,
        });
    }

    pub fn row_count(&self) -> usize {
        self.builders.iter().map(BatchBuilder::len).sum()
    }

    /// Finished batches, the quarantine included.
    ///
    /// # Errors
    /// When a mapper wrote a misshapen row (a bug, reported with the table).
    pub fn into_batches(self) -> Result<Vec<TableBatch>, SinkError> {
        let mut out = Vec::with_capacity(self.builders.len() + 1);
        for b in self.builders {
            out.push(TableBatch::build(b)?);
        }
        if !self.quarantined.is_empty() {
            let def = tables::table("_sync_quarantine").expect("quarantine table");
            let mut b = BatchBuilder::new(def, &self.run_id, self.fetched_at);
            for q in &self.quarantined {
                b.row()
                    .text(Some(&self.run_id))
                    .text(Some(&q.route))
                    .text(Some(&q.record))
                    .text(Some(&q.error))
                    .timestamp(Some(self.fetched_at))
                    .end_bare();
            }
            out.push(TableBatch::build(b)?);
        }
        Ok(out)
    }
}

fn date_of_ms(t_ms: i64) -> Option<NaiveDate> {
    DateTime::from_timestamp_millis(t_ms).map(|d| d.date_naive())
}

/// `companies`: the company payload that fixes a configured identifier's `company_key`.
pub fn company(rows: &mut Rows, raw: &RawValue) -> Option<wire::Company> {
    let company: wire::Company = rows.parse(raw, "company")?;
    if company.cik.trim().is_empty() {
        rows.quarantine(raw.get(), "company: empty cik".into());
        return None;
    }
    let route = rows.route.clone();
    rows.table("companies")
        .row()
        .text(Some(&company.cik))
        .text(Some(&company.cik))
        .text(company.symbol.as_deref())
        .text(company.name.as_deref())
        .text(company.market.as_deref())
        .text(company.currency.as_deref())
        .text_list(company.predecessors.iter().map(String::as_str))
        .end(raw.get(), &route);
    Some(company)
}

/// `prices_daily` from one prices page; returns the newest bar's date.
pub fn prices(rows: &mut Rows, page: &wire::PricesPage<'_>, company_key: &str) -> Option<NaiveDate> {
    let route = rows.route.clone();
    let mut newest = None;
    for raw in &page.bars {
        let Some(bar) = rows.parse::<wire::Bar>(raw, "price bar") else {
            continue;
        };
        let Some(date) = date_of_ms(bar.t) else {
            rows.quarantine(
                raw.get(),
                format!("price bar: t={} is not a valid epoch-millisecond time", bar.t),
            );
            continue;
        };
        if !bar.c.is_finite() {
            rows.quarantine(raw.get(), "price bar: close is not a finite number".into());
            continue;
        }
        newest = newest.max(Some(date));
        rows.table("prices_daily")
            .row()
            .text(Some(company_key))
            .date(Some(date))
            .text(page.symbol.as_deref())
            .int(Some(bar.t))
            .float(bar.o)
            .float(bar.h)
            .float(bar.l)
            .float(Some(bar.c))
            .int(bar.v)
            .end(raw.get(), &route);
    }
    newest
}

/// `dividends` and `dividend_summaries` from one dividends page; returns the latest ex-date.
pub fn dividends(
    rows: &mut Rows,
    page: &wire::DividendsPage<'_>,
    company_key: &str,
    as_of: NaiveDate,
) -> Option<NaiveDate> {
    let route = rows.route.clone();
    let (cik, symbol, currency) = (page.cik.as_deref(), page.symbol.as_deref(), page.currency.as_deref());
    let mut latest = None;
    for raw in &page.events {
        let Some(e) = rows.parse::<wire::DividendEvent>(raw, "dividend event") else {
            continue;
        };
        latest = latest.max(Some(e.ex_date));
        rows.table("dividends")
            .row()
            .text(Some(company_key))
            .date(Some(e.ex_date))
            .text(Some(&e.kind))
            .text(cik)
            .text(symbol)
            .text(currency)
            .float(Some(e.amount))
            .float(e.amount_split_adj)
            .float(e.ttm)
            .float(e.change_pct)
            .float(e.yield_at_ex_date_pct)
            .float(e.yield_period_avg_pct)
            .end(raw.get(), &route);
    }
    if let Some(raw) = page.summary
        && let Some(s) = rows.parse::<wire::DividendSummary>(raw, "dividend summary")
    {
        rows.table("dividend_summaries")
            .row()
            .text(Some(company_key))
            .date(Some(as_of))
            .text(cik)
            .text(symbol)
            .text(currency)
            .int(Some(s.count))
            .float(s.latest_amount)
            .date(s.latest_ex_date)
            .float(s.ttm_total)
            .float(s.last_price)
            .float(s.trailing_yield_pct)
            .float(s.indicated_yield_pct)
            .float(s.growth_1y)
            .float(s.growth_3y)
            .text(s.cadence.as_deref())
            .end(raw.get(), &route);
    }
    latest
}

/// `index_snapshots` from the indices page.
pub fn indices(rows: &mut Rows, page: &wire::IndicesPage<'_>) {
    let route = rows.route.clone();
    for raw in &page.indices {
        let Some(i) = rows.parse::<wire::IndexEntry>(raw, "index entry") else {
            continue;
        };
        rows.table("index_snapshots")
            .row()
            .text(Some(&i.symbol))
            .date(Some(i.last_price_date))
            .text(i.name.as_deref())
            .text(i.short_name.as_deref())
            .text(i.category.as_deref())
            .text(i.benchmark_role.as_deref())
            .text(i.sector_key.as_deref())
            .text(i.index_family.as_deref())
            .text(i.issuer.as_deref())
            .float(i.expense_ratio)
            .date(i.inception_date)
            .float(i.last_price)
            .float(i.return_1d)
            .float(i.return_1w)
            .float(i.return_1m)
            .float(i.return_ytd)
            .float(i.return_1y)
            .float(i.return_5y)
            .float(i.low_52w)
            .float(i.high_52w)
            .float(i.volatility_30d)
            .int(i.price_rows)
            .int(i.days_stale)
            .end(raw.get(), &route);
    }
}

/// `coverage_snapshots`, observed on the day the service generated the page.
pub fn coverage(rows: &mut Rows, page: &wire::CoveragePage<'_>) {
    let route = rows.route.clone();
    let observed = page.generated_at.date_naive();
    for market in &page.markets {
        for raw in &market.data_types {
            let Some(d) = rows.parse::<wire::CoverageDataType>(raw, "coverage data type") else {
                continue;
            };
            rows.table("coverage_snapshots")
                .row()
                .date(Some(observed))
                .text(Some(&market.market))
                .text(Some(&d.data_type))
                .int(market.companies)
                .date(d.history_from)
                .float(d.completeness_pct)
                .int(d.periods)
                .end(raw.get(), &route);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_bar_is_quarantined_and_the_rest_load() {
        let body = r#"{"symbol":"MSFT","displayFrom":0,"bars":[
            {"t":1764028800000,"o":1,"h":2,"l":0.5,"c":1.5,"v":10},
            {"t":"yesterday","c":1.5},
            {"o":1,"c":2},
            {"t":1764115200000,"c":1.7,"v":null,"extra":"kept in raw"}]}"#;
        let page: wire::PricesPage = serde_json::from_str(body).unwrap();
        let mut rows = Rows::new("run", "/api/v1/companies/MSFT/prices?range=1M", Utc::now());
        let newest = prices(&mut rows, &page, "0000789019");
        assert_eq!(newest, NaiveDate::from_ymd_opt(2025, 11, 26));
        assert_eq!(rows.row_count(), 2);
        assert_eq!(rows.quarantined.len(), 2);
        assert!(
            rows.quarantined[0].error.contains("price bar"),
            "{:?}",
            rows.quarantined[0]
        );
        assert_eq!(rows.quarantined[1].record, r#"{"o":1,"c":2}"#);
        let batches = rows.into_batches().unwrap();
        let names: Vec<&str> = batches.iter().map(|b| b.table.name).collect();
        assert_eq!(names, ["prices_daily", "_sync_quarantine"]);
    }
}

/// `macro_series` from one series page, with the list entry it was found under.
pub fn macro_series(
    rows: &mut Rows,
    country: &str,
    entry_raw: &RawValue,
    entry: &wire::SeriesRef,
    page: &wire::SeriesPage<'_>,
) {
    let route = rows.route.clone();
    rows.table("macro_series")
        .row()
        .text(Some(country))
        .text(Some(&entry.key))
        .text(entry.name.as_deref())
        .text(page.frequency.as_deref().or(entry.frequency.as_deref()))
        .text(page.description.as_deref())
        .text(page.source_name.as_deref())
        .text(page.source_link.as_deref())
        .end(entry_raw.get(), &route);
}

/// `macro_observations` from one series page: every point as seen now. The
/// sink keeps what was seen before (point-in-time history); returns the newest vintage.
pub fn macro_observations(
    rows: &mut Rows,
    country: &str,
    series_key: &str,
    page: &wire::SeriesPage<'_>,
) -> Option<NaiveDate> {
    let route = rows.route.clone();
    let seen = rows.fetched_at;
    let mut newest = None;
    for raw in &page.history {
        let Some(point) = rows.parse::<wire::MacroPoint>(raw, "macro history point") else {
            continue;
        };
        if !point.value.is_finite() {
            rows.quarantine(raw.get(), "macro history point: value is not a finite number".into());
            continue;
        }
        newest = newest.max(Some(point.vintage));
        rows.table("macro_observations")
            .row()
            .text(Some(country))
            .text(Some(series_key))
            .date(Some(point.period))
            .date(Some(point.vintage))
            .float(Some(point.value))
            .timestamp(Some(seen))
            .timestamp(Some(seen))
            .end(raw.get(), &route);
    }
    newest
}
