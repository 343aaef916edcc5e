//! Market indices and macro series by country.

use super::{Family, Named};
use crate::*;

pub(crate) const FAMILY: Family = Family {
    routes,
    named: &[
        Named::list("indices", &["/api/v1/indices"], "indices"),
        Named::list("countries", &["/api/v1/countries/{iso}"], "macroSeries"),
        Named::list("macro", &["/api/v1/countries/{iso}/series"], "history"),
    ],
};

/// Market indices and macro series by country.
fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/indices", get(indices))
        .route("/api/v1/countries/{iso}", get(country))
        .route("/api/v1/countries/{iso}/series", get(country_series))
}

async fn indices(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(json!({"indices": state.world.indices(state.clock.now())}))
}

fn country_or_error(iso: &str) -> Result<&'static macro_series::CountryDef, ApiError> {
    if iso.len() != 2 || !iso.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid country '{iso}': use an ISO 3166-1 alpha-2 code such as US"),
        ));
    }
    macro_series::country(iso).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown country '{iso}'")))
}

async fn country(Path(iso): Path<String>) -> ApiResult {
    let c = country_or_error(&iso)?;
    let series: Vec<serde_json::Value> = macro_series::SERIES
        .iter()
        .map(|s| {
            let frequency = match s.frequency {
                macro_series::Frequency::Monthly => "monthly",
                macro_series::Frequency::Quarterly => "quarterly",
            };
            json!({"key": s.key, "name": s.name, "frequency": frequency})
        })
        .collect();
    Ok(Json(json!({"iso": c.iso, "name": c.name, "macroSeries": series})).into_response())
}

async fn country_series(
    State(state): State<Arc<AppState>>,
    Path(iso): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let c = country_or_error(&iso)?;
    let key = query.get("key").ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing parameter 'key': a series key from macroSeries[].key",
        )
    })?;
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid series key '{key}': characters A-Z, 0-9 and _ only"),
        ));
    }
    let s = macro_series::series(key)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown series '{key}' for {iso}")))?;
    let history = macro_series::history(state.world.seed, c, s, state.clock.now());
    let frequency = match s.frequency {
        macro_series::Frequency::Monthly => "monthly",
        macro_series::Frequency::Quarterly => "quarterly",
    };
    Ok(Json(json!({
        "history": history,
        "frequency": frequency,
        "description": s.name,
        "sourceName": format!("{} national statistics (synthetic)", c.name),
        "sourceLink": null,
    }))
    .into_response())
}
