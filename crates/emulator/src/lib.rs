//! `fdsync emulator`: the upstream service, served from a seeded synthetic world.
//!
//! As strict as the published spec and the wire contract: authentication as in
//! spec section 5, per-minute and per-day/month limits in fixed UTC windows, the
//! rate-limit and quota headers on every response, 429s with `Retry-After`, and
//! 400/404 bodies as the spec lists them. [`Emulator::router`] serves tests with
//! no socket; [`spawn`] binds loopback.

pub mod admin;
pub mod company_docs;
mod config;
pub mod events;
mod families;
mod gate;
pub mod geo;
mod hostile;
pub mod keys;
pub mod macro_series;
mod market;
pub mod news;
mod quirks;
mod shapes;
pub mod wire;
pub mod world;
/// The route families: every data route (behind the key, the limits and the
/// fault layers) is added by one of these modules, which also names its
/// routes for the quirks. A new family is one module and a line here.
const FAMILIES: &[families::Family] = &[
    families::companies::FAMILY,
    families::events::FAMILY,
    families::market::FAMILY,
    families::account::FAMILY,
    families::news::FAMILY,
    families::geo::FAMILY,
];

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use chrono::{DateTime, Datelike, DurationRound, NaiveDate, TimeZone, Utc};
use serde_json::json;

use crate::wire::KEY_PREFIX;
pub use config::{
    DEMO_BUILD_KEY, DEMO_FREE_KEY, EmulatorConfig, Faults, HeaderForm, PlanLimits, QuotaPeriod, StreamTiming,
};
pub use families::Named;
use families::account::{coverage, mcp_unauthorized, oauth_metadata};
use fdsync_clock::Clock;
use gate::{count, gate, inject_faults};
pub use hostile::Hostile;
pub use keys::{Account, Credits};
use keys::{Keyring, Refusal};
pub use quirks::{QUIRK_NAMES, Quirks, RENAMED_LIST, inner_families, list_families};
pub use shapes::{EXTRA_FIELD, Served, WireShapes};
use wire::ErrorBody;
use world::World;

/// What the emulator has answered, for tests and the demo.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub requests: u64,
    pub by_status: HashMap<u16, u64>,
    pub rate_limited: u64,
    pub quota_exceeded: u64,
    pub faults_injected: u64,
}

#[derive(Default)]
struct Usage {
    minute: Option<(DateTime<Utc>, u64)>,
    quota: Option<(DateTime<Utc>, u64)>,
}

struct AppState {
    world: World,
    clock: Clock,
    header_form: HeaderForm,
    sales_email: String,
    keyring: Mutex<Keyring>,
    usage: Mutex<HashMap<String, Usage>>,
    stats: Mutex<Stats>,
    faults: Mutex<Faults>,
    hostile: Mutex<Hostile>,
    shapes: Mutex<WireShapes>,
    quirks: Mutex<Quirks>,
    quirk_state: Mutex<quirks::QuirkState>,
    /// Bodies served, while a test records them.
    served: Mutex<Option<Vec<Served>>>,
    stream: StreamTiming,
    fault_seq: std::sync::atomic::AtomicU64,
    /// Bumped to cut every open stream mid-flight, as a dropped link would.
    stream_cuts: tokio::sync::watch::Sender<u64>,
}

#[derive(Clone)]
pub struct Emulator {
    state: Arc<AppState>,
}

/// An error response with the spec's body.
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: message.into(),
                ..Default::default()
            },
        }
    }
    fn code(mut self, code: &str) -> ApiError {
        self.body.code = Some(code.into());
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

/// The data routes before the state is given: what a route family module's
/// `routes` adds to.
type DataRouter = Router<Arc<AppState>>;

impl Emulator {
    pub fn new(config: EmulatorConfig) -> Emulator {
        let keyring = Keyring::new(config.seed, config.accounts, config.revoke_delay, config.clock.now());
        Emulator {
            state: Arc::new(AppState {
                world: World {
                    filing_spacing_minutes: config.filing_spacing_minutes,
                    ..World::new(config.seed, config.generated_companies)
                },
                clock: config.clock,
                header_form: config.header_form,
                sales_email: config.sales_email,
                keyring: Mutex::new(keyring),
                usage: Mutex::new(HashMap::new()),
                stats: Mutex::new(Stats::default()),
                faults: Mutex::new(config.faults),
                hostile: Mutex::new(config.hostile),
                shapes: Mutex::new(config.shapes),
                quirks: Mutex::new(config.quirks),
                quirk_state: Mutex::new(quirks::QuirkState::default()),
                served: Mutex::new(None),
                stream: config.stream,
                fault_seq: Default::default(),
                stream_cuts: tokio::sync::watch::Sender::new(0),
            }),
        }
    }

    /// Cuts every open news stream without a clean end, as a dropped
    /// connection would; returns how many were open.
    pub fn drop_streams(&self) -> usize {
        let open = self.state.stream_cuts.receiver_count();
        self.state.stream_cuts.send_modify(|n| *n += 1);
        open
    }

    /// Serves the contract's shapes, or the other legal ones, from now on.
    pub fn set_shapes(&self, shapes: WireShapes) {
        *self.state.shapes.lock().unwrap_or_else(|e| e.into_inner()) = shapes;
    }

    /// Switches quirks on or off from now on; what they remembered (texts
    /// served empty, the page withheld) is forgotten.
    pub fn set_quirks(&self, quirks: Quirks) {
        *self.state.quirks.lock().unwrap_or_else(|e| e.into_inner()) = quirks;
        *self.state.quirk_state.lock().unwrap_or_else(|e| e.into_inner()) = quirks::QuirkState::default();
    }

    /// Keeps every JSON body served from now on.
    pub fn record_served(&self) {
        *self.state.served.lock().unwrap_or_else(|e| e.into_inner()) = Some(Vec::new());
    }

    /// The JSON bodies served since [`Emulator::record_served`], in order.
    pub fn served(&self) -> Vec<Served> {
        self.state
            .served
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .unwrap_or_default()
    }

    /// Switches hostile behaviours on or off from now on.
    pub fn set_hostile(&self, hostile: Hostile) {
        *self.state.hostile.lock().unwrap_or_else(|e| e.into_inner()) = hostile;
    }

    /// Changes the injected faults from now on.
    pub fn set_faults(&self, faults: Faults) {
        *self.state.faults.lock().unwrap_or_else(|e| e.into_inner()) = faults;
    }

    fn keyring(&self) -> std::sync::MutexGuard<'_, Keyring> {
        self.state.keyring.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Issues a new key for `account`; the secret is returned here only.
    pub fn create_key(&self, account: &str) -> Result<keys::IssuedKey, keys::KeyError> {
        self.keyring().create(account, self.clock().now())
    }

    /// Revokes key `id` (from [`keys::IssuedKey::id`]) and issues its replacement atomically.
    pub fn rotate_key(&self, id: &str) -> Result<keys::IssuedKey, keys::KeyError> {
        self.keyring().rotate(id, self.clock().now())
    }

    /// Issues an OAuth access token for `account`, valid for `ttl` on the
    /// data routes (spec section 5); the token is returned here only.
    pub fn issue_token(
        &self,
        account: &str,
        ttl: chrono::Duration,
        shape: keys::TokenShape,
    ) -> Result<keys::IssuedToken, keys::KeyError> {
        self.keyring().issue_token(account, ttl, shape, self.clock().now())
    }

    /// Revokes key `id`; the data routes refuse it once the revoke delay has passed.
    pub fn revoke_key(&self, id: &str) -> Result<keys::KeyInfo, keys::KeyError> {
        self.keyring().revoke(id, self.clock().now())
    }

    pub fn stats(&self) -> Stats {
        self.state.stats.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn clock(&self) -> &Clock {
        &self.state.clock
    }

    /// The synthetic world, for tests that compare the warehouse with ground truth.
    pub fn world(&self) -> &World {
        &self.state.world
    }

    pub fn router(&self) -> Router {
        let public = Router::new()
            .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
            .route("/api/v1/landing/coverage", get(coverage))
            .route("/.well-known/oauth-protected-resource/api/mcp", get(oauth_metadata))
            .route("/api/mcp", axum::routing::any(mcp_unauthorized));
        let data = FAMILIES
            .iter()
            .fold(Router::new(), |router, family| (family.routes)(router))
            .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
            .layer(middleware::from_fn_with_state(self.state.clone(), quirks::quirks))
            .layer(middleware::from_fn_with_state(self.state.clone(), shapes::shapes))
            .layer(middleware::from_fn_with_state(self.state.clone(), inject_faults))
            .layer(middleware::from_fn_with_state(self.state.clone(), gate))
            .layer(middleware::from_fn_with_state(self.state.clone(), hostile::hostile));
        // Bodies are gzipped when the caller accepts it, as a CDN in front of
        // the service would; the SSE stream is left uncompressed so frames are not held back.
        // At level 2, as CDNs compress on the fly: at the default level gzip
        // was a quarter of the emulator's time serving a backfill, on the same
        // cores as the client it is measured against. Level 1 (zlib-rs's
        // quick deflate) left price histories only 2x smaller, level 2 about 2.8x.
        public
            .layer(middleware::from_fn_with_state(self.state.clone(), count))
            .merge(data)
            .layer(middleware::from_fn_with_state(
                self.state.clone(),
                shapes::record_served,
            ))
            .layer(
                tower_http::compression::CompressionLayer::new()
                    .gzip(true)
                    .quality(tower_http::CompressionLevel::Precise(2)),
            )
            .with_state(self.state.clone())
    }
}

/// A running emulator on loopback.
pub struct RunningEmulator {
    pub addr: SocketAddr,
    pub emulator: Emulator,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl RunningEmulator {
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// Binds `addr` (port 0 for any) and serves until the returned handle is dropped.
pub async fn spawn(config: EmulatorConfig, addr: SocketAddr) -> std::io::Result<RunningEmulator> {
    let emulator = Emulator::new(config);
    let (addr, shutdown) = serve(emulator.router(), addr).await?;
    Ok(RunningEmulator {
        addr,
        emulator,
        shutdown: Some(shutdown),
    })
}

/// Serves `app` on `addr` until the returned sender is dropped or fired.
pub async fn serve(app: Router, addr: SocketAddr) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async {
                let _ = rx.await;
            })
            .await;
    });
    Ok((addr, tx))
}
