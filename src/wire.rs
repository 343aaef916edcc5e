//! Payload shapes of the upstream service (`../shared/spec/wire-contract.md`).
//!
//! Record types are shared by the emulator (which serializes them) and the
//! client (which reads them leniently: optional fields are `Option`, unknown
//! fields are ignored here and kept whole in the `raw` column). Page envelopes
//! borrow each record as a [`RawValue`] so the text as served reaches the
//! warehouse unchanged, and one bad record can be quarantined alone.

use chrono::{DateTime, NaiveDate, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

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

/// `GET /companies/{id}/prices`.
#[derive(Debug, Deserialize)]
pub struct PricesPage<'a> {
    pub symbol: Option<String>,
    #[serde(borrow)]
    pub bars: Vec<&'a RawValue>,
    #[serde(rename = "displayFrom")]
    pub display_from: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bar {
    pub t: i64,
    pub o: Option<f64>,
    pub h: Option<f64>,
    pub l: Option<f64>,
    pub c: f64,
    pub v: Option<i64>,
}

/// `GET /companies/{id}/dividends`.
#[derive(Debug, Deserialize)]
pub struct DividendsPage<'a> {
    pub cik: Option<String>,
    pub symbol: Option<String>,
    pub currency: Option<String>,
    #[serde(borrow)]
    pub events: Vec<&'a RawValue>,
    #[serde(borrow)]
    pub summary: Option<&'a RawValue>,
}

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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct YieldPoint {
    pub date: NaiveDate,
    pub trailing_yield_pct: f64,
}

/// `GET /indices`.
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

/// `GET /landing/coverage` (public).
#[derive(Debug, Deserialize)]
pub struct CoveragePage<'a> {
    #[serde(rename = "generatedAt")]
    pub generated_at: DateTime<Utc>,
    #[serde(borrow)]
    pub markets: Vec<CoverageMarketRaw<'a>>,
}

#[derive(Debug, Deserialize)]
pub struct CoverageMarketRaw<'a> {
    pub market: String,
    pub companies: Option<i64>,
    #[serde(borrow, rename = "dataTypes")]
    pub data_types: Vec<&'a RawValue>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CoverageDataType {
    #[serde(rename = "type")]
    pub data_type: String,
    pub history_from: Option<NaiveDate>,
    pub completeness_pct: Option<f64>,
    pub periods: Option<i64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CoverageMarket {
    pub market: String,
    pub companies: i64,
    #[serde(rename = "dataTypes")]
    pub data_types: Vec<CoverageDataType>,
}

/// `GET /countries/{iso}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountryPage<'a> {
    pub iso: Option<String>,
    #[serde(borrow, default)]
    pub macro_series: Vec<&'a RawValue>,
}

/// One entry of `macroSeries`.
#[derive(Debug, Deserialize)]
pub struct SeriesRef {
    pub key: String,
    pub name: Option<String>,
    pub frequency: Option<String>,
}

/// `GET /countries/{iso}/series?key=K`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SeriesPage<'a> {
    #[serde(borrow, default)]
    pub history: Vec<&'a RawValue>,
    pub frequency: Option<String>,
    pub description: Option<String>,
    pub source_name: Option<String>,
    pub source_link: Option<String>,
}

/// One history point: the value of `period` as published on `vintage`.
#[derive(Debug, Deserialize)]
pub struct MacroPoint {
    pub period: NaiveDate,
    pub value: f64,
    pub vintage: NaiveDate,
}

/// A news feed page (`/news/feed`, `/companies/{id}/news`, `/news/search`, stream frames).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsPage<'a> {
    #[serde(borrow, default)]
    pub items: Vec<&'a RawValue>,
    pub latest_id: Option<String>,
    pub next_cursor: Option<String>,
    #[serde(default)]
    pub has_more: bool,
    pub server_time: Option<String>,
}

/// A news item. Fields a licence withholds are absent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsItem {
    pub id: String,
    /// Set on an item sent again because its headline was rewritten (`changedSince`).
    #[serde(default)]
    pub rewritten: bool,
    pub published_at: Option<DateTime<Utc>>,
    pub first_seen_at: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
    pub headline: Option<String>,
    pub snippet: Option<String>,
    pub body: Option<String>,
    pub url: Option<String>,
    pub source: Option<NewsSource>,
    #[serde(default)]
    pub tickers: Vec<String>,
    #[serde(default)]
    pub ciks: Vec<String>,
    #[serde(default)]
    pub people: Vec<String>,
    #[serde(default)]
    pub indicators: Vec<String>,
    #[serde(default)]
    pub topics: Vec<String>,
    pub storyline_id: Option<String>,
    pub importance: Option<i64>,
    pub flash: Option<bool>,
    pub form: Option<String>,
}

/// A news item's `firstSeenAt` alone: what decides whether a backfill goes
/// on, read before the item is mapped.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsItemSeen {
    pub first_seen_at: Option<DateTime<Utc>>,
}

/// A news source, as an item carries it or as `/news/sources` lists it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsSource {
    pub id: String,
    pub name: Option<String>,
    pub licence_class: Option<String>,
    pub attribution: Option<String>,
    pub display_policy: Option<String>,
    #[serde(rename = "count24h")]
    pub count_24h: Option<i64>,
}

/// `GET /news/sources`.
#[derive(Debug, Deserialize)]
pub struct NewsSourcesPage<'a> {
    #[serde(borrow, default)]
    pub sources: Vec<&'a RawValue>,
}

/// `GET /news/topics`.
#[derive(Debug, Deserialize)]
pub struct NewsTopicsPage<'a> {
    #[serde(borrow, default)]
    pub topics: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
pub struct NewsTopic {
    pub key: String,
    pub name: Option<String>,
    pub parent: Option<String>,
}

/// `GET /companies/{id}/events` (newest first), `/events/wire` and `/events/latest`.
#[derive(Debug, Deserialize)]
pub struct EventsPage<'a> {
    pub cik: Option<String>,
    pub symbol: Option<String>,
    #[serde(borrow, default)]
    pub events: Vec<&'a RawValue>,
    /// The wire only: rows matching the query, and where this page starts.
    pub total: Option<u64>,
    pub offset: Option<u64>,
}

/// An 8-K event entry; the wire and latest add who filed it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventEntry {
    pub accession: String,
    pub family: Option<String>,
    #[serde(default)]
    pub items: Vec<String>,
    pub filing_date: Option<NaiveDate>,
    pub accepted_at: Option<DateTime<Utc>>,
    pub headline: Option<String>,
    pub cik: Option<String>,
    pub symbol: Option<String>,
    pub name: Option<String>,
}

/// `GET /companies/{id}/regulation`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegulationPage<'a> {
    #[serde(borrow, default)]
    pub executive_actions: Vec<&'a RawValue>,
    pub coverage: Option<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutiveAction {
    pub document_id: String,
    pub title: Option<String>,
    pub published_at: Option<NaiveDate>,
    #[serde(default)]
    pub links: Vec<RegulationLink>,
}

#[derive(Debug, Deserialize)]
pub struct RegulationLink {
    pub basis: String,
    pub evidence: Option<String>,
    pub accession: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RegulationCoverage {
    pub documents_read: Option<i64>,
    pub documents_total: Option<i64>,
    pub complete: Option<bool>,
    pub pilot: Option<bool>,
}

/// `GET /companies/{id}/monthly-revenue`.
#[derive(Debug, Deserialize)]
pub struct MonthlyRevenuePage<'a> {
    pub symbol: Option<String>,
    pub currency: Option<String>,
    pub licence: Option<String>,
    #[serde(borrow, default)]
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
    pub filed_at: Option<NaiveDate>,
}

/// `GET /companies/{id}/filing-notes`, newest first.
#[derive(Debug, Deserialize)]
pub struct FilingNotesPage<'a> {
    #[serde(borrow, default)]
    pub filings: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilingNote {
    pub accession: String,
    pub form: Option<String>,
    pub filed_at: Option<NaiveDate>,
    pub period_end: Option<NaiveDate>,
    #[serde(default)]
    pub sections: Vec<SectionRef>,
}

#[derive(Debug, Deserialize)]
pub struct SectionRef {
    pub key: String,
    pub title: Option<String>,
}

/// `GET /companies/{id}/filing-notes/{accession}/{sectionKey}`.
#[derive(Debug, Deserialize)]
pub struct SectionText {
    pub accession: Option<String>,
    pub key: Option<String>,
    pub title: Option<String>,
    pub text: String,
}

/// `GET /geo/layers`.
#[derive(Debug, Deserialize)]
pub struct GeoLayersPage {
    #[serde(default)]
    pub layers: Vec<GeoLayer>,
}

#[derive(Debug, Deserialize)]
pub struct GeoLayer {
    pub code: String,
}

/// `GET /geo/countries?layers=...`.
#[derive(Debug, Deserialize)]
pub struct GeoCountriesPage<'a> {
    #[serde(borrow, default)]
    pub countries: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
pub struct GeoCountryCount {
    pub layer: String,
    pub country: String,
    pub count: i64,
}
