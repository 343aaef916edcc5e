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
    /// Partitions of `replace` tables this response holds in full.
    replaced: Vec<(&'static str, String)>,
    pub quarantined: Vec<Quarantined>,
    /// The `news_sources` rows already made from this response's items, or
    /// from every page of a tape ([`Rows::share_news_sources`]): a page of
    /// 200 items names a handful of sources, and each row more is one more
    /// for the commit to stage and merge.
    news_sources_made: NewsSourcesMade,
}

/// The `news_sources` rows made so far, by their JSON: shared by the pages
/// of a tape, which are mapped on blocking threads.
pub type NewsSourcesMade = std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>;

impl Rows {
    pub fn new(run_id: &str, route: &str, fetched_at: DateTime<Utc>) -> Rows {
        Rows {
            run_id: run_id.into(),
            route: route.into(),
            fetched_at,
            builders: Vec::new(),
            replaced: Vec::new(),
            quarantined: Vec::new(),
            news_sources_made: NewsSourcesMade::default(),
        }
    }

    /// Makes `news_sources` rows only for sources `made` has not seen: the
    /// pages of one tape share it, so an unchanged source is loaded once a
    /// run rather than once a page (a merge each, about 5 ms). A source
    /// whose fields change is a new row.
    pub fn share_news_sources(&mut self, made: NewsSourcesMade) {
        self.news_sources_made = made;
    }

    /// Declares that these rows hold all of `partition` in `table` (a
    /// [`crate::tables::LoadRule::Replace`] table): stored rows not among them go.
    pub fn replace_partition(&mut self, table: &str, partition: &str) {
        self.table(table);
        let name = tables::table(table).expect("mappers name contract tables").name;
        self.replaced.push((name, partition.to_owned()));
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

    /// About the bytes these rows hold, quarantined records included.
    pub fn value_bytes(&self) -> usize {
        let quarantined: usize = self.quarantined.iter().map(|q| q.record.len() + q.error.len()).sum();
        self.builders.iter().map(BatchBuilder::value_bytes).sum::<usize>() + quarantined
    }

    /// Finished batches, the quarantine included.
    ///
    /// # Errors
    /// When a mapper wrote a misshapen row (a bug, reported with the table).
    pub fn into_batches(self) -> Result<Vec<TableBatch>, SinkError> {
        let mut out = Vec::with_capacity(self.builders.len() + 1);
        for b in self.builders {
            let mut batch = TableBatch::build(b)?;
            batch.partitions = self
                .replaced
                .iter()
                .filter(|(t, _)| *t == batch.table.name)
                .map(|(_, p)| p.clone())
                .collect();
            out.push(batch);
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

fn json_text<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// What the sync needs to know about a news item it loaded.
#[derive(Debug, Clone)]
pub struct NewsSeen {
    pub id: String,
    pub first_seen_at: Option<DateTime<Utc>>,
    /// Sent again for a rewritten headline, not as a new arrival.
    pub rewritten: bool,
}

/// `news_items`, `news_headline_revisions` and the item's `news_sources` row.
pub fn news_item(rows: &mut Rows, raw: &RawValue) -> Option<NewsSeen> {
    let item: wire::NewsItem = rows.parse(raw, "news item")?;
    let Some(version) = item.updated_at.or(item.first_seen_at) else {
        rows.quarantine(raw.get(), "news item: neither updatedAt nor firstSeenAt".into());
        return None;
    };
    if item.id.is_empty() {
        rows.quarantine(raw.get(), "news item: empty id".into());
        return None;
    }
    let route = rows.route.clone();
    let source = item.source.as_ref();
    rows.table("news_items")
        .row()
        .text(Some(&item.id))
        .timestamp(item.published_at)
        .timestamp(item.first_seen_at)
        .timestamp(Some(version))
        .text(item.headline.as_deref())
        .text(item.snippet.as_deref())
        .text(item.body.as_deref())
        .text(item.url.as_deref())
        .text(source.map(|s| s.id.as_str()))
        .text(source.and_then(|s| s.name.as_deref()))
        .text(source.and_then(|s| s.licence_class.as_deref()))
        .text(source.and_then(|s| s.attribution.as_deref()))
        .text(source.and_then(|s| s.display_policy.as_deref()))
        .text_list(item.tickers.iter().map(String::as_str))
        .text_list(item.ciks.iter().map(String::as_str))
        .text_list(item.people.iter().map(String::as_str))
        .text_list(item.indicators.iter().map(String::as_str))
        .text_list(item.topics.iter().map(String::as_str))
        .text(item.storyline_id.as_deref())
        .int(item.importance)
        .bool(item.flash)
        .text(item.form.as_deref())
        .end(raw.get(), &route);
    if let Some(headline) = item.headline.as_deref() {
        rows.table("news_headline_revisions")
            .row()
            .text(Some(&item.id))
            .timestamp(Some(version))
            .text(Some(headline))
            .end(raw.get(), &route);
    }
    if let Some(s) = source {
        let source_raw = json_text(
            &serde_json::json!({"id": s.id, "name": s.name, "licenceClass": s.licence_class,
            "attribution": s.attribution, "displayPolicy": s.display_policy}),
        );
        let new = rows
            .news_sources_made
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(source_raw.clone());
        if new {
            news_source(rows, s, &source_raw, &route);
        }
    }
    Some(NewsSeen {
        id: item.id,
        first_seen_at: item.first_seen_at,
        rewritten: item.rewritten,
    })
}

/// `news_sources` from the sources route.
pub fn news_sources(rows: &mut Rows, page: &wire::NewsSourcesPage<'_>) {
    let route = rows.route.clone();
    for raw in &page.sources {
        let Some(s) = rows.parse::<wire::NewsSource>(raw, "news source") else {
            continue;
        };
        news_source(rows, &s, raw.get(), &route);
    }
}

/// One `news_sources` row, from an item's source object or the sources route.
fn news_source(rows: &mut Rows, s: &wire::NewsSource, raw: &str, route: &str) {
    rows.table("news_sources")
        .row()
        .text(Some(&s.id))
        .text(s.name.as_deref())
        .text(s.licence_class.as_deref())
        .text(s.attribution.as_deref())
        .text(s.display_policy.as_deref())
        .int(s.count_24h)
        .end(raw, route);
}

/// `news_topics` from the topic taxonomy.
pub fn news_topics(rows: &mut Rows, page: &wire::NewsTopicsPage<'_>) {
    let route = rows.route.clone();
    for raw in &page.topics {
        let Some(t) = rows.parse::<wire::NewsTopic>(raw, "news topic") else {
            continue;
        };
        rows.table("news_topics")
            .row()
            .text(Some(&t.key))
            .text(t.name.as_deref())
            .text(t.parent.as_deref())
            .end(raw.get(), &route);
    }
}

/// An `events` row; returns the entry. The filer is `company_key` when the
/// route names it (the per-company index), else the entry's own `cik`.
pub fn event(
    rows: &mut Rows,
    raw: &RawValue,
    company_key: Option<&str>,
    symbol: Option<&str>,
) -> Option<wire::EventEntry> {
    let e: wire::EventEntry = rows.parse(raw, "8-K event")?;
    let Some(key) = company_key.or(e.cik.as_deref()).map(str::to_owned) else {
        rows.quarantine(raw.get(), "8-K event: no cik names the filer".into());
        return None;
    };
    let route = rows.route.clone();
    rows.table("events")
        .row()
        .text(Some(&e.accession))
        .text(Some(&key))
        .text(Some(e.cik.as_deref().unwrap_or(&key)))
        .text(e.symbol.as_deref().or(symbol))
        .text(e.name.as_deref())
        .text(e.family.as_deref())
        .text_list(e.items.iter().map(String::as_str))
        .date(e.filing_date.or(e.accepted_at.map(|t| t.date_naive())))
        .timestamp(e.accepted_at)
        .text(e.headline.as_deref())
        .end(raw.get(), &route);
    Some(e)
}

/// An `event_item_texts` row; the plain-text body is kept as a JSON string in `raw`.
pub fn event_item_text(rows: &mut Rows, accession: &str, item: &str, company_key: &str, text: &str) {
    let route = rows.route.clone();
    rows.table("event_item_texts")
        .row()
        .text(Some(accession))
        .text(Some(item))
        .text(Some(company_key))
        .text(Some(text))
        .end(&json_text(&text), &route);
}

/// `regulation_actions` (the company's whole set, replacing what was stored)
/// and a `regulation_coverage` observation.
pub fn regulation(rows: &mut Rows, page: &wire::RegulationPage<'_>, company_key: &str) {
    let route = rows.route.clone();
    rows.replace_partition("regulation_actions", company_key);
    for raw in &page.executive_actions {
        let Some(a) = rows.parse::<wire::ExecutiveAction>(raw, "executive action") else {
            continue;
        };
        for (rank, link) in a.links.iter().enumerate() {
            rows.table("regulation_actions")
                .row()
                .text(Some(company_key))
                .text(Some(&a.document_id))
                .text(Some(&link.basis))
                .text(a.title.as_deref())
                .date(a.published_at)
                .int(Some(rank as i64 + 1))
                .text(link.evidence.as_deref())
                .text(link.accession.as_deref())
                .end(raw.get(), &route);
        }
    }
    if let Some(raw) = page.coverage
        && let Some(c) = rows.parse::<wire::RegulationCoverage>(raw, "regulation coverage")
    {
        let observed = rows.fetched_at;
        rows.table("regulation_coverage")
            .row()
            .text(Some(company_key))
            .timestamp(Some(observed))
            .int(c.documents_read)
            .int(c.documents_total)
            .bool(c.complete)
            .bool(c.pilot)
            .end(raw.get(), &route);
    }
}

/// `monthly_revenue`; returns the newest month.
pub fn monthly_revenue(rows: &mut Rows, page: &wire::MonthlyRevenuePage<'_>, company_key: &str) -> Option<NaiveDate> {
    let route = rows.route.clone();
    let mut newest = None;
    for raw in &page.months {
        let Some(m) = rows.parse::<wire::RevenueMonth>(raw, "monthly revenue") else {
            continue;
        };
        let Ok(month) = NaiveDate::parse_from_str(&format!("{}-01", m.month), "%Y-%m-%d") else {
            rows.quarantine(
                raw.get(),
                format!("monthly revenue: month {:?} is not YYYY-MM", m.month),
            );
            continue;
        };
        newest = newest.max(Some(month));
        rows.table("monthly_revenue")
            .row()
            .text(Some(company_key))
            .date(Some(month))
            .text(page.symbol.as_deref())
            .float(m.revenue)
            .float(m.yoy_pct)
            .float(m.mom_pct)
            .date(m.filed_at)
            .text(page.currency.as_deref())
            .text(page.licence.as_deref())
            .end(raw.get(), &route);
    }
    newest
}

/// `filings` from the filing-notes list; returns each filing with its sections, newest first.
pub fn filings(rows: &mut Rows, page: &wire::FilingNotesPage<'_>, company_key: &str) -> Vec<wire::FilingNote> {
    let route = rows.route.clone();
    let mut out = Vec::new();
    for raw in &page.filings {
        let Some(f) = rows.parse::<wire::FilingNote>(raw, "filing") else {
            continue;
        };
        rows.table("filings")
            .row()
            .text(Some(&f.accession))
            .text(Some(company_key))
            .text(f.form.as_deref())
            .date(f.filed_at)
            .date(f.period_end)
            .text_list(f.sections.iter().map(|s| s.key.as_str()))
            .end(raw.get(), &route);
        out.push(f);
    }
    out
}

/// One `filing_sections` row.
pub fn filing_section(
    rows: &mut Rows,
    raw: &RawValue,
    company_key: &str,
    accession: &str,
    section: &wire::SectionRef,
) -> bool {
    let Some(t) = rows.parse::<wire::SectionText>(raw, "filing section") else {
        return false;
    };
    let route = rows.route.clone();
    rows.table("filing_sections")
        .row()
        .text(Some(t.accession.as_deref().unwrap_or(accession)))
        .text(Some(t.key.as_deref().unwrap_or(&section.key)))
        .text(Some(company_key))
        .text(t.title.as_deref().or(section.title.as_deref()))
        .text(Some(&t.text))
        .end(raw.get(), &route);
    true
}

/// `geo_country_counts` observed on `day`.
pub fn geo_country_counts(rows: &mut Rows, page: &wire::GeoCountriesPage<'_>, day: NaiveDate) {
    let route = rows.route.clone();
    for raw in &page.countries {
        let Some(c) = rows.parse::<wire::GeoCountryCount>(raw, "geo country count") else {
            continue;
        };
        rows.table("geo_country_counts")
            .row()
            .date(Some(day))
            .text(Some(&c.layer))
            .text(Some(&c.country))
            .int(Some(c.count))
            .end(raw.get(), &route);
    }
}
