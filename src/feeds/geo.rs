//! `GET /geo/layers` and `GET /geo/countries?layers=...`: reviewed-asset
//! counts per layer and country, one snapshot a day, of the layers the
//! service lists.

use chrono::NaiveDate;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Feed, Fetch, Params, route_param};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::{LakePartition, LoadRule};

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

table! {
    pub const GEO_COUNTRY_COUNTS: GeoCountryCountRow = "geo_country_counts" {
        observed_date: Date,
        layer: Text,
        country: Text,
        count: Int,
    }
    key: &["observed_date", "layer", "country"],
    load: LoadRule::Upsert,
    lake_partition: Some(LakePartition::Year("observed_date")),
}

/// The layer list is read first: configured layers it does not know are
/// reported, not sent (the service would answer 400); no configured layers
/// means all of them.
pub static FEED: Feed = Feed {
    name: "geo",
    route: "/api/v1/geo/countries?layers={layers}",
    auth: true,
    tables: &[&GEO_COUNTRY_COUNTS],
    fetch: Fetch::Layers,
    params: &["layers_route"],
    check,
};

fn check(_route: &str, params: &Params) -> Result<(), String> {
    route_param(params.layers_route.as_deref(), "layers_route", &[])
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
