//! Geo asset layers and reviewed-asset counts per country:
//! `/api/v1/geo/layers` and `/api/v1/geo/countries`.

use super::{Family, Named};
use crate::geo::{LAYERS, country_counts, layer, reviewed_assets};
use crate::*;

pub(crate) const FAMILY: Family = Family {
    routes,
    named: &[
        Named::list("geo", &["/api/v1/geo/countries"], "countries"),
        Named::list("geo_layers", &["/api/v1/geo/layers"], "layers"),
    ],
};

fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/geo/layers", get(layers))
        .route("/api/v1/geo/countries", get(countries))
}

async fn layers(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let day = state.clock.now().date_naive();
    let layers: Vec<serde_json::Value> = LAYERS
        .iter()
        .map(|l| json!({"code": l.code, "name": l.name, "reviewedAssets": reviewed_assets(state.world.seed, l.code, day)}))
        .collect();
    Json(json!({"layers": layers}))
}

async fn countries(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    let raw = query.get("layers").map(String::as_str).unwrap_or_default();
    let codes: Vec<&str> = raw.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if codes.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing parameter 'layers': comma-separated codes from /geo/layers",
        ));
    }
    if let Some(bad) = codes.iter().find(|c| layer(c).is_none()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown layer '{bad}': see /api/v1/geo/layers"),
        ));
    }
    let counts = country_counts(state.world.seed, &codes, state.clock.now().date_naive());
    Ok(Json(json!({"layers": codes, "countries": counts})).into_response())
}
