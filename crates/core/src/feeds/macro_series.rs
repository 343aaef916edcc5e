//! `GET /countries/{iso}` and `GET /countries/{iso}/series?key=K`: macro
//! series and every vintage of their history, kept point in time.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{BodyError, Feed, Fetch, Listed, Params, PerCountry, parse_body, parse_envelope, route_param};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

/// `GET /countries/{iso}`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CountryPage<'a> {
    pub iso: Option<String>,
    pub name: Option<String>,
    #[serde(borrow)]
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
    #[serde(borrow)]
    pub history: Vec<&'a RawValue>,
    pub frequency: Option<String>,
    pub description: Option<String>,
    pub source_name: Option<String>,
    pub source_link: Option<String>,
}

/// One history point: the value of `period` as published on `vintage`.
#[derive(Debug, Deserialize)]
pub struct MacroPoint {
    #[serde(deserialize_with = "crate::wire::tolerant::date")]
    pub period: NaiveDate,
    pub value: f64,
    #[serde(deserialize_with = "crate::wire::tolerant::date")]
    pub vintage: NaiveDate,
}

table! {
    /// Each configured country as its page names it; `raw` is the page.
    pub const MACRO_COUNTRIES: MacroCountryRow = "macro_countries" {
        /// ISO 3166-1 alpha-2 country code.
        country: Text,
        /// Name as served.
        name: Text,
    }
    key: &["country"],
    load: LoadRule::Upsert,
    versions: true,
}

table! {
    /// Macro series per country: name, frequency and source.
    pub const MACRO_SERIES: MacroSeriesRow = "macro_series" {
        /// ISO 3166-1 alpha-2 country code.
        country: Text,
        /// The macro series key (macroSeries[].key of the country payload).
        series_key: Text,
        /// Name as served.
        name: Text,
        /// Observation frequency, such as monthly or quarterly.
        frequency: Text,
        /// Description as served.
        description: Text,
        /// Name of the original source.
        source_name: Text,
        /// Link to the original source.
        source_link: Text,
    }
    key: &["country", "series_key"],
    load: LoadRule::Upsert,
    versions: true,
}

table! {
    /// Every (period, vintage, value) ever served. `raw`, `_fetched_at`, `_run_id`
    /// and `_route` are those of the first sighting.
    pub const MACRO_OBSERVATIONS: MacroObservationRow = "macro_observations" {
        /// ISO 3166-1 alpha-2 country code.
        country: Text,
        /// The macro series key (macroSeries[].key of the country payload).
        series_key: Text,
        /// The period the observation is for, as served.
        period: Date,
        /// When the value was published or revised (point-in-time).
        vintage: Date,
        /// The observed value.
        value: Float,
        /// When fdsync (or the service, for news) first saw this value (UTC).
        first_seen_at: Timestamp,
        /// When fdsync last saw this value served (UTC).
        last_seen_at: Timestamp,
    }
    key: &["country", "series_key", "period", "vintage", "value"],
    load: LoadRule::History,
    lake_partition: Some(LakePartition::Year("vintage")),
}

pub static FEED: Feed = Feed {
    name: "macro",
    route: "/api/v1/countries/{country}",
    auth: true,
    tables: &[&MACRO_SERIES, &MACRO_OBSERVATIONS, &MACRO_COUNTRIES],
    fetch: Fetch::PerCountry(PerCountry {
        list: read_list,
        read: read_history,
    }),
    params: &["series_route"],
    check,
};

fn check(_route: &str, params: &Params) -> Result<(), String> {
    route_param(
        params.series_route.as_deref(),
        "series_route",
        &["{country}", "{series}"],
    )
}

/// A country's `macro_countries` row and its series list: each series whose
/// key the history route takes.
fn read_list(rows: &mut Rows, body: &[u8]) -> Result<Vec<Listed>, BodyError> {
    let page: CountryPage = parse_envelope(rows, body)?;
    if let (Some(iso), Ok(text)) = (&page.iso, std::str::from_utf8(body)) {
        let row = MacroCountryRow {
            country: Some(iso),
            name: page.name.as_deref(),
        };
        rows.push(row, text.trim());
    }
    let mut listed = Vec::new();
    for raw in page.macro_series {
        let Some(entry) = rows.parse::<SeriesRef>(raw, "series list entry") else {
            continue;
        };
        if is_series_key(&entry.key) {
            listed.push(Listed {
                key: entry.key,
                raw: raw.to_owned(),
            });
        } else {
            rows.quarantine(
                raw.get(),
                format!("series list entry: field `key`: {:?} is not [A-Z0-9_]+", entry.key),
            );
        }
    }
    Ok(listed)
}

/// The wire contract's series key alphabet; anything else would be a 400.
fn is_series_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// One series' page: its `macro_series` row and every observation; the
/// cursor is the newest vintage.
fn read_history(rows: &mut Rows, body: &[u8], country: &str, listed: &Listed) -> Result<String, BodyError> {
    let page: SeriesPage = parse_envelope(rows, body)?;
    let entry: SeriesRef = parse_body(listed.raw.get().as_bytes())?;
    read_series(rows, country, &listed.raw, &entry, &page);
    let newest_vintage = read_observations(rows, country, &listed.key, &page);
    Ok(newest_vintage.map(|d| d.to_string()).unwrap_or_default())
}

/// `macro_series` from one series page, with the list entry it was found under.
pub fn read_series(rows: &mut Rows, country: &str, entry_raw: &RawValue, entry: &SeriesRef, page: &SeriesPage<'_>) {
    let row = MacroSeriesRow {
        country: Some(country),
        series_key: Some(&entry.key),
        name: entry.name.as_deref(),
        frequency: page.frequency.as_deref().or(entry.frequency.as_deref()),
        description: page.description.as_deref(),
        source_name: page.source_name.as_deref(),
        source_link: page.source_link.as_deref(),
    };
    rows.push(row, entry_raw.get());
}

/// `macro_observations` from one series page: every point as seen now. The
/// sink keeps what was seen before (point-in-time history); returns the newest vintage.
pub fn read_observations(rows: &mut Rows, country: &str, series_key: &str, page: &SeriesPage<'_>) -> Option<NaiveDate> {
    let seen = rows.fetched_at;
    let mut newest = None;
    for raw in &page.history {
        let Some(point) = rows.parse::<MacroPoint>(raw, "macro history point") else {
            continue;
        };
        if !point.value.is_finite() {
            rows.quarantine(raw.get(), "macro history point: value is not a finite number".into());
            continue;
        }
        newest = newest.max(Some(point.vintage));
        let row = MacroObservationRow {
            country: Some(country),
            series_key: Some(series_key),
            period: Some(point.period),
            vintage: Some(point.vintage),
            value: Some(point.value),
            first_seen_at: Some(seen),
            last_seen_at: Some(seen),
        };
        rows.push(row, raw.get());
    }
    newest
}
