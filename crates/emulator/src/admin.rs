//! The emulator's admin interface: key management, the clock, faults and
//! counters. It is not part of the upstream's public API, so it is served on
//! its own listener (`fdsync emulator --admin-addr`), never beside the data
//! routes, and it takes no credential: bind it to loopback.
//!
//! | Method | Path | Does |
//! |---|---|---|
//! | GET | /admin/accounts | accounts, plans, credits and keys (ids and prefixes, never secrets) |
//! | POST | /admin/accounts/{name}/keys | creates a key; the secret is in this response only (409 past ten active keys) |
//! | POST | /admin/accounts/{name}/tokens?ttl_s=N&shape=jwt\|opaque | issues an OAuth access token valid for N seconds (default 3600), a JWT by default |
//! | POST | /admin/keys/{id}/rotate | revokes the key and issues its replacement in one step |
//! | POST | /admin/keys/{id}/revoke | revokes the key; the data routes refuse it after the revoke delay |
//! | PUT | /admin/revoke-delay?secs=N | sets that delay |
//! | POST | /admin/clock/advance?secs=N | moves a simulated clock forward (409 on the system clock) |
//! | PUT | /admin/faults?spec=SPEC | sets injected faults, as `--faults` takes them |
//! | PUT | /admin/hostile?spec=SPEC | sets hostile behaviours, as `--hostile` takes them |
//! | PUT | /admin/shapes?shapes=contract\|other | which legal shapes the data routes serve, as `--shapes` |
//! | PUT | /admin/quirks?spec=SPEC | the service's other choices where the spec is open, as `--quirks` takes them |
//! | GET | /admin/stats | requests answered, by status, 429s and faults |
//! | POST | /admin/streams/drop | cuts every open news stream mid-flight, as a dropped link would |

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use serde_json::json;

use super::keys::{KeyError, TokenShape};
use super::{ApiError, Emulator, Faults, Hostile, Quirks, WireShapes};

type AdminResult = Result<Response, ApiError>;

fn key_error(e: KeyError) -> ApiError {
    let status = match e {
        KeyError::UnknownAccount(_) | KeyError::UnknownKey(_) => StatusCode::NOT_FOUND,
        KeyError::TooManyKeys { .. } | KeyError::AlreadyRevoked(_) => StatusCode::CONFLICT,
    };
    ApiError::new(status, e.to_string())
}

fn secs_param(query: &HashMap<String, String>) -> Result<f64, ApiError> {
    query
        .get("secs")
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "secs: a number of seconds, 0 or more, is required",
            )
        })
}

impl Emulator {
    /// The admin routes (see the module documentation), for a separate listener.
    pub fn admin_router(&self) -> Router {
        Router::new()
            .route("/admin/accounts", get(accounts))
            .route("/admin/accounts/{name}/keys", post(create_key))
            .route("/admin/accounts/{name}/tokens", post(issue_token))
            .route("/admin/keys/{id}/rotate", post(rotate_key))
            .route("/admin/keys/{id}/revoke", post(revoke_key))
            .route("/admin/revoke-delay", put(revoke_delay))
            .route("/admin/clock/advance", post(advance_clock))
            .route("/admin/faults", put(set_faults))
            .route("/admin/hostile", put(set_hostile))
            .route("/admin/shapes", put(set_shapes))
            .route("/admin/quirks", put(set_quirks))
            .route("/admin/stats", get(stats))
            .route("/admin/streams/drop", post(drop_streams))
            .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such admin route") })
            .with_state(Arc::new(self.clone()))
    }
}

async fn drop_streams(State(emulator): State<Arc<Emulator>>) -> Json<serde_json::Value> {
    Json(json!({"dropped": emulator.drop_streams()}))
}

async fn accounts(State(emulator): State<Arc<Emulator>>) -> Json<serde_json::Value> {
    let now = emulator.clock().now();
    let ring = emulator.keyring();
    let keys = ring.list(now);
    let accounts: Vec<_> = ring
        .accounts
        .iter()
        .map(|a| {
            json!({
                "name": a.name,
                "plan": a.plan.name,
                "perMinute": a.plan.per_minute,
                "quota": a.plan.quota.map(|(period, n)| json!({
                    "window": if period == super::QuotaPeriod::Day { "day" } else { "month" },
                    "limit": n,
                })),
                "creditsUsd": a.credits.map(|c| c.balance_usd()),
                "keys": keys.iter().filter(|k| k.account == a.name).collect::<Vec<_>>(),
            })
        })
        .collect();
    Json(json!({ "accounts": accounts }))
}

async fn create_key(State(emulator): State<Arc<Emulator>>, Path(name): Path<String>) -> AdminResult {
    let now = emulator.clock().now();
    let issued = emulator.keyring().create(&name, now).map_err(key_error)?;
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

async fn issue_token(
    State(emulator): State<Arc<Emulator>>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    let bad = |m: &str| ApiError::new(StatusCode::BAD_REQUEST, m);
    let ttl_s = match query.get("ttl_s") {
        Some(s) => s
            .parse::<i64>()
            .map_err(|_| bad("ttl_s: a whole number of seconds is required"))?,
        None => 3600,
    };
    let shape = match query.get("shape").map(String::as_str) {
        None | Some("jwt") => TokenShape::Jwt,
        Some("opaque") => TokenShape::Opaque,
        Some(_) => return Err(bad("shape: jwt or opaque")),
    };
    let issued = emulator
        .issue_token(&name, chrono::Duration::seconds(ttl_s), shape)
        .map_err(key_error)?;
    Ok((StatusCode::CREATED, Json(issued)).into_response())
}

async fn rotate_key(State(emulator): State<Arc<Emulator>>, Path(id): Path<String>) -> AdminResult {
    let now = emulator.clock().now();
    let issued = emulator.keyring().rotate(&id, now).map_err(key_error)?;
    Ok(Json(issued).into_response())
}

async fn revoke_key(State(emulator): State<Arc<Emulator>>, Path(id): Path<String>) -> AdminResult {
    let now = emulator.clock().now();
    let info = emulator.keyring().revoke(&id, now).map_err(key_error)?;
    Ok(Json(info).into_response())
}

async fn revoke_delay(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    let secs = secs_param(&query)?;
    emulator
        .keyring()
        .set_revoke_delay(chrono::Duration::milliseconds((secs * 1000.0) as i64));
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn advance_clock(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    let secs = secs_param(&query)?;
    let sim = emulator.clock().as_sim().ok_or_else(|| {
        ApiError::new(
            StatusCode::CONFLICT,
            "the emulator runs on the system clock: start it with --start or --speed to move time",
        )
    })?;
    sim.advance(std::time::Duration::from_secs_f64(secs));
    let now = sim.now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Ok(Json(json!({ "now": now })).into_response())
}

async fn set_faults(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    emulator.set_faults(parsed(&query, "spec", Faults::parse)?);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_hostile(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    emulator.set_hostile(parsed(&query, "spec", Hostile::parse)?);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_shapes(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    emulator.set_shapes(parsed(&query, "shapes", WireShapes::parse)?);
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn set_quirks(
    State(emulator): State<Arc<Emulator>>,
    Query(query): Query<HashMap<String, String>>,
) -> AdminResult {
    emulator.set_quirks(parsed(&query, "spec", Quirks::parse)?);
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Query parameter `name` (empty when absent) as `parse` reads it; a 400 naming it otherwise.
fn parsed<T>(
    query: &HashMap<String, String>,
    name: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<T, ApiError> {
    let value = query.get(name).map(String::as_str).unwrap_or("");
    parse(value).map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("{name}: {e}")))
}

async fn stats(State(emulator): State<Arc<Emulator>>) -> Json<serde_json::Value> {
    let s = emulator.stats();
    let by_status: HashMap<String, u64> = s.by_status.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    Json(json!({
        "requests": s.requests,
        "byStatus": by_status,
        "rateLimited": s.rate_limited,
        "quotaExceeded": s.quota_exceeded,
        "faultsInjected": s.faults_injected,
    }))
}
