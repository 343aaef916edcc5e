//! Geo asset layers and reviewed-asset counts per country, growing by day as
//! reviews complete: what `families::geo` serves.

use chrono::NaiveDate;
use serde::Serialize;

use super::world::{mix_str, unit};

pub struct LayerDef {
    pub code: &'static str,
    pub name: &'static str,
}

pub const LAYERS: &[LayerDef] = &[
    LayerDef {
        code: "power_plants",
        name: "Power plants",
    },
    LayerDef {
        code: "data_centers",
        name: "Data centers",
    },
    LayerDef {
        code: "ports",
        name: "Ports",
    },
    LayerDef {
        code: "mines",
        name: "Mines",
    },
    LayerDef {
        code: "lng_terminals",
        name: "LNG terminals",
    },
    LayerDef {
        code: "refineries",
        name: "Refineries",
    },
];

const COUNTRIES: &[&str] = &[
    "US", "CN", "JP", "DE", "GB", "IN", "BR", "AU", "SA", "AE", "TW", "KR", "CA", "MX", "ZA",
];

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CountryCount {
    pub layer: String,
    pub country: String,
    pub count: u64,
}

/// Reviewed assets of `layer` in `country` on `day`: a base, plus reviews that
/// finish every few days.
fn count(seed: u64, layer: &str, country: &str, day: NaiveDate) -> u64 {
    let h = mix_str(layer) ^ mix_str(country).rotate_left(29);
    let base = (unit(seed, h, 1) * 400.0) as u64;
    let days = (day - NaiveDate::from_ymd_opt(2024, 1, 1).expect("valid"))
        .num_days()
        .max(0) as u64;
    let every = 3 + (unit(seed, h, 2) * 20.0) as u64;
    base + days / every
}

pub fn layer(code: &str) -> Option<&'static LayerDef> {
    LAYERS.iter().find(|l| l.code == code)
}

pub fn reviewed_assets(seed: u64, layer: &str, day: NaiveDate) -> u64 {
    COUNTRIES.iter().map(|c| count(seed, layer, c, day)).sum()
}

pub fn country_counts(seed: u64, layers: &[&str], day: NaiveDate) -> Vec<CountryCount> {
    layers
        .iter()
        .flat_map(|l| {
            COUNTRIES.iter().filter_map(move |c| {
                let n = count(seed, l, c, day);
                (n > 0).then(|| CountryCount {
                    layer: (*l).to_owned(),
                    country: (*c).to_owned(),
                    count: n,
                })
            })
        })
        .collect()
}
