//! The account surfaces, which refuse data credentials, and the public
//! ones beside the data routes: coverage and the MCP endpoint's metadata.

use super::{Family, base_url};
use crate::*;

pub(crate) const FAMILY: Family = Family { routes, named: &[] };

/// The account surfaces, which refuse data credentials.
fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/keys", get(account_surface))
        .route("/api/v1/billing", get(account_surface))
        .route("/api/v1/watchlists", get(account_surface))
        .route("/api/v1/workspace", get(account_surface))
}

async fn account_surface() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "account surfaces do not accept data credentials",
    )
    .code("unauthenticated")
}

/// RFC 9728 protected-resource metadata for the MCP endpoint (spec section 5).
pub(crate) async fn oauth_metadata(headers: HeaderMap) -> Json<serde_json::Value> {
    let base = base_url(&headers);
    Json(json!({
        "resource": format!("{base}/api/mcp"),
        "authorization_servers": [format!("{base}/oauth")],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["data:read"],
        "resource_name": "fdsync emulator (financial disclosure data)",
    }))
}

/// The MCP protocol itself is not modelled: an MCP client without a token is
/// pointed at the metadata, as RFC 9728 section 5.1 describes.
pub(crate) async fn mcp_unauthorized(headers: HeaderMap) -> Response {
    let metadata = format!("{}/.well-known/oauth-protected-resource/api/mcp", base_url(&headers));
    let mut r = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "the MCP endpoint needs an OAuth access token (not modelled by the emulator)",
    )
    .code("unauthenticated")
    .into_response();
    if let Ok(v) = HeaderValue::from_str(&format!("Bearer resource_metadata=\"{metadata}\"")) {
        r.headers_mut().insert("www-authenticate", v);
    }
    r
}

pub(crate) async fn coverage(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let (generated_at, markets) = state.world.coverage(state.clock.now());
    Json(json!({"generatedAt": generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), "markets": markets}))
}
