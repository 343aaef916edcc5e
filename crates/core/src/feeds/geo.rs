//! `GET /geo/layers` and `GET /geo/countries?layers=...`: the layer list
//! and reviewed-asset counts per layer and country, one snapshot a day.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Feed, Fetch, Layers, Params, parse_envelope, route_param};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

/// `GET /geo/layers`.
#[derive(Debug, Deserialize)]
pub struct GeoLayersPage<'a> {
    #[serde(borrow)]
    pub layers: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeoLayer {
    pub code: String,
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub reviewed_assets: Option<i64>,
}

/// `GET /geo/countries?layers=...`.
#[derive(Debug, Deserialize)]
pub struct GeoCountriesPage<'a> {
    /// The layers asked, echoed: known, not stored (each count names its layer).
    #[serde(default, borrow, rename = "layers")]
    _layers: Option<&'a RawValue>,
    #[serde(borrow)]
    pub countries: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
pub struct GeoCountryCount {
    pub layer: String,
    pub country: String,
    #[serde(deserialize_with = "crate::wire::tolerant::integer")]
    pub count: i64,
}

table! {
    /// The layers the service lists, with their reviewed assets, by day; a
    /// layer no longer listed that day is withdrawn.
    pub const GEO_LAYERS: GeoLayerRow = "geo_layers" {
        /// The day (UTC) the snapshot was taken.
        observed_date: Date,
        /// Geo layer code, such as power_plants or data_centers.
        layer: Text,
        /// Name as served.
        name: Text,
        /// Reviewed assets in the layer.
        reviewed_assets: Int,
    }
    key: &["observed_date", "layer"],
    load: LoadRule::Replace,
    versions: true,
    lake_partition: Some(LakePartition::Year("observed_date")),
}

table! {
    /// Reviewed assets per layer and country, per day; a count no longer
    /// served that day (every layer asked) is withdrawn.
    pub const GEO_COUNTRY_COUNTS: GeoCountryCountRow = "geo_country_counts" {
        /// The day (UTC) the snapshot was taken.
        observed_date: Date,
        /// Geo layer code, such as power_plants or data_centers.
        layer: Text,
        /// ISO 3166-1 alpha-2 country code.
        country: Text,
        /// Number counted.
        count: Int,
    }
    key: &["observed_date", "layer", "country"],
    load: LoadRule::Replace,
    versions: true,
    lake_partition: Some(LakePartition::Year("observed_date")),
}

/// The layer list is read first: configured layers it does not know are
/// reported, not sent (the service would answer 400); no configured layers
/// means all of them.
pub static FEED: Feed = Feed {
    name: "geo",
    route: "/api/v1/geo/countries?layers={layers}",
    auth: true,
    tables: &[&GEO_LAYERS, &GEO_COUNTRY_COUNTS],
    fetch: Fetch::Layers(Layers {
        list: |rows, body, day| {
            let page = parse_envelope(rows, body)?;
            Ok(read_layers(rows, &page, day))
        },
        read: |rows, body, day| {
            let page = parse_envelope(rows, body)?;
            read_counts(rows, &page, day);
            Ok(())
        },
        counts: &GEO_COUNTRY_COUNTS,
        configured: |config| &config.universe.geo_layers,
        configured_key: "universe.geo_layers",
    }),
    params: &["layers_route"],
    check,
};

fn check(_route: &str, params: &Params) -> Result<(), String> {
    route_param(params.layers_route.as_deref(), "layers_route", &[])
}

/// `geo_layers` observed on `day`, the day's whole list; returns every
/// layer code listed.
pub fn read_layers(rows: &mut Rows, page: &GeoLayersPage<'_>, day: NaiveDate) -> Vec<String> {
    rows.replace_partition(&GEO_LAYERS, &day.to_string());
    let mut codes = Vec::new();
    for raw in &page.layers {
        let Some(l) = rows.parse::<GeoLayer>(raw, "geo layer") else {
            continue;
        };
        let row = GeoLayerRow {
            observed_date: Some(day),
            layer: Some(&l.code),
            name: l.name.as_deref(),
            reviewed_assets: l.reviewed_assets,
        };
        rows.push(row, raw.get());
        codes.push(l.code);
    }
    codes
}

/// `geo_country_counts` observed on `day`.
pub fn read_counts(rows: &mut Rows, page: &GeoCountriesPage<'_>, day: NaiveDate) {
    for raw in &page.countries {
        let Some(c) = rows.parse::<GeoCountryCount>(raw, "geo country count") else {
            continue;
        };
        let row = GeoCountryCountRow {
            observed_date: Some(day),
            layer: Some(&c.layer),
            country: Some(&c.country),
            count: Some(c.count),
        };
        rows.push(row, raw.get());
    }
}
