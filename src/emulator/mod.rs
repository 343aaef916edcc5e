//! `fdsync emulator`: the upstream service, served from a seeded synthetic world.
//!
//! As strict as the published spec and the wire contract: authentication as in
//! spec section 5, per-minute and per-day/month limits in fixed UTC windows, the
//! rate-limit and quota headers on every response, 429s with `Retry-After`, and
//! 400/404 bodies as the spec lists them. [`Emulator::router`] serves tests with
//! no socket; [`spawn`] binds loopback.

pub mod admin;
pub mod company_docs;
pub mod events;
pub mod geo;
pub mod keys;
pub mod macro_series;
pub mod news;
pub mod world;

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

use crate::clock::Clock;
use crate::config::KEY_PREFIX;
use crate::wire::ErrorBody;
use keys::Keyring;
pub use keys::{Account, Credits};
use world::World;

/// A plan's limits. Windows are fixed UTC windows.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanLimits {
    pub name: String,
    pub per_minute: u64,
    pub quota: Option<(QuotaPeriod, u64)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaPeriod {
    Day,
    Month,
}

impl PlanLimits {
    pub fn free() -> PlanLimits {
        PlanLimits {
            name: "free".into(),
            per_minute: 30,
            quota: Some((QuotaPeriod::Day, 250)),
        }
    }
    pub fn build() -> PlanLimits {
        PlanLimits {
            name: "build".into(),
            per_minute: 300,
            quota: Some((QuotaPeriod::Month, 100_000)),
        }
    }
    /// Scale plans are set per account.
    pub fn scale(per_minute: u64, quota: Option<(QuotaPeriod, u64)>) -> PlanLimits {
        PlanLimits {
            name: "scale".into(),
            per_minute,
            quota,
        }
    }

    /// `free`, `build`, or `scale:PER_MINUTE[:PER_MONTH]`.
    pub fn parse(s: &str) -> Option<PlanLimits> {
        let mut parts = s.split(':');
        match parts.next()? {
            "free" => Some(PlanLimits::free()),
            "build" => Some(PlanLimits::build()),
            "scale" => {
                let per_minute = parts.next()?.parse().ok()?;
                let quota = match parts.next() {
                    Some(m) => Some((QuotaPeriod::Month, m.parse().ok()?)),
                    None => None,
                };
                Some(PlanLimits::scale(per_minute, quota))
            }
            _ => None,
        }
    }
}

/// Which rate-limit header form responses carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderForm {
    Legacy,
    Ietf,
    Both,
}

#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    pub seed: u64,
    pub clock: Clock,
    pub accounts: Vec<Account>,
    pub header_form: HeaderForm,
    /// Generated companies beside the named ones.
    pub generated_companies: u64,
    pub sales_email: String,
    pub faults: Faults,
    pub stream: StreamTiming,
    /// How long a revoked key keeps working on the data routes (spec: about 60 s).
    pub revoke_delay: chrono::Duration,
}

/// Real-time intervals of the SSE stream (spec: ping every 15 s, close after about 280 s).
#[derive(Debug, Clone)]
pub struct StreamTiming {
    pub ping: std::time::Duration,
    pub close_after: std::time::Duration,
    /// How often the stream looks for new or rewritten items.
    pub poll: std::time::Duration,
}

impl Default for StreamTiming {
    fn default() -> Self {
        StreamTiming {
            ping: std::time::Duration::from_secs(15),
            close_after: std::time::Duration::from_secs(280),
            poll: std::time::Duration::from_millis(250),
        }
    }
}

/// Keys every emulator knows unless told otherwise, documented in the README.
pub const DEMO_FREE_KEY: &str = "pk_live_emulator_free_0001";
pub const DEMO_BUILD_KEY: &str = "pk_live_emulator_build_0001";

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            seed: 42,
            clock: Clock::System,
            accounts: vec![
                Account::new("free-demo", PlanLimits::free(), vec![DEMO_FREE_KEY.into()]),
                Account::new("build-demo", PlanLimits::build(), vec![DEMO_BUILD_KEY.into()]),
            ],
            header_form: HeaderForm::Legacy,
            generated_companies: 5000,
            sales_email: "sales@example.invalid".into(),
            faults: Faults::default(),
            stream: StreamTiming::default(),
            revoke_delay: chrono::Duration::seconds(60),
        }
    }
}

/// Faults injected into data-route responses, each at a rate from 0 to 1.
/// Decisions are a function of the seed and the request's sequence number, so
/// a run with the same faults and requests fails the same way.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Faults {
    /// 503 with an error body.
    pub server_error: f64,
    /// Headers sent, then the connection drops mid-body.
    pub reset: f64,
    /// A 200 whose JSON body stops halfway.
    pub truncate: f64,
    /// Responses delayed by `slow_ms` (real time).
    pub slow: f64,
    pub slow_ms: u64,
    /// A 200 whose first record list has its first record replaced by one of
    /// the wrong shape (the rest of the page intact): a record to quarantine.
    pub bad_record: f64,
    /// A 429 `rate_limited` with `Retry-After: 1`, as seconds or as an
    /// HTTP date (alternately): a storm of them at high rates.
    pub throttle: f64,
}

impl Faults {
    /// `5xx=0.1,reset=0.05,truncate=0.05,slow=0.1,slow_ms=200,bad_record=0.1,throttle=0.1`.
    pub fn parse(s: &str) -> Result<Faults, String> {
        let mut f = Faults {
            slow_ms: 200,
            ..Faults::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?}: expected NAME=RATE"))?;
            let rate: f64 = v.parse().map_err(|_| format!("{part:?}: {v:?} is not a number"))?;
            let slot = match k {
                "5xx" => &mut f.server_error,
                "reset" => &mut f.reset,
                "truncate" => &mut f.truncate,
                "slow" => &mut f.slow,
                "bad_record" => &mut f.bad_record,
                "throttle" => &mut f.throttle,
                "slow_ms" => {
                    f.slow_ms = rate as u64;
                    continue;
                }
                _ => {
                    return Err(format!(
                        "{k:?}: expected 5xx, reset, truncate, slow, slow_ms, bad_record or throttle"
                    ));
                }
            };
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{part:?}: a rate is between 0 and 1"));
            }
            *slot = rate;
        }
        Ok(f)
    }
}

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

impl Emulator {
    pub fn new(config: EmulatorConfig) -> Emulator {
        let keyring = Keyring::new(config.seed, config.accounts, config.revoke_delay, config.clock.now());
        Emulator {
            state: Arc::new(AppState {
                world: World::new(config.seed, config.generated_companies),
                clock: config.clock,
                header_form: config.header_form,
                sales_email: config.sales_email,
                keyring: Mutex::new(keyring),
                usage: Mutex::new(HashMap::new()),
                stats: Mutex::new(Stats::default()),
                faults: Mutex::new(config.faults),
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
        let data = Router::new()
            .route("/api/v1/companies/{id}", get(company))
            .route("/api/v1/companies/{id}/prices", get(prices))
            .route("/api/v1/companies/{id}/dividends", get(dividends))
            .route("/api/v1/companies/{id}/regulation", get(regulation))
            .route("/api/v1/companies/{id}/monthly-revenue", get(monthly_revenue))
            .route("/api/v1/companies/{id}/filing-notes", get(filing_notes))
            .route(
                "/api/v1/companies/{id}/filing-notes/{accession}/{section}",
                get(filing_section),
            )
            .route("/api/v1/companies/{id}/events", get(company_events))
            .route("/api/v1/companies/{id}/events/{accession}", get(event_item_text))
            .route("/api/v1/events/wire", get(events_wire))
            .route("/api/v1/events/latest", get(events_latest))
            .route("/api/v1/companies/{id}/news", get(company_news))
            .route("/api/v1/news/feed", get(news_feed))
            .route("/api/v1/news/search", get(news_search))
            .route("/api/v1/news/stream", get(news_stream))
            .route("/api/v1/news/top", get(news_top))
            .route("/api/v1/news/items/{id}", get(news_item))
            .route("/api/v1/news/topics", get(news_topics))
            .route("/api/v1/news/sources", get(news_sources))
            .route("/api/v1/indices", get(indices))
            .route("/api/v1/countries/{iso}", get(country))
            .route("/api/v1/countries/{iso}/series", get(country_series))
            .route("/api/v1/geo/layers", get(geo_layers))
            .route("/api/v1/geo/countries", get(geo_countries))
            .route("/api/v1/keys", get(account_surface))
            .route("/api/v1/billing", get(account_surface))
            .route("/api/v1/watchlists", get(account_surface))
            .route("/api/v1/workspace", get(account_surface))
            .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such route") })
            .layer(middleware::from_fn_with_state(self.state.clone(), inject_faults))
            .layer(middleware::from_fn_with_state(self.state.clone(), gate));
        // Bodies are gzipped when the caller accepts it, as a CDN in front of
        // the service would; the SSE stream is left uncompressed so frames are not held back.
        // At level 2, as CDNs compress on the fly: at the default level gzip
        // was a quarter of the emulator's time serving a backfill, on the same
        // cores as the client it is measured against. Level 1 (zlib-rs's
        // quick deflate) left price histories only 2x smaller, level 2 about 2.8x.
        public
            .layer(middleware::from_fn_with_state(self.state.clone(), count))
            .merge(data)
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

fn record_status(state: &AppState, status: StatusCode) {
    let mut stats = state.stats.lock().unwrap_or_else(|e| e.into_inner());
    stats.requests += 1;
    *stats.by_status.entry(status.as_u16()).or_default() += 1;
}

/// Public routes need no credential; they are counted per caller address at
/// the Free plan's limits.
async fn count(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let caller = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "local".into());
    limited(&state, &format!("anon:{caller}"), &PlanLimits::free(), None, req, next).await
}

/// Authenticates the data routes (spec section 5), then applies the account's limits.
async fn gate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let account = match authenticate(&state, req.headers()) {
        Ok(i) => i,
        Err(e) => {
            let response = e.into_response();
            record_status(&state, response.status());
            return response;
        }
    };
    let (plan, name) = {
        let ring = state.keyring.lock().unwrap_or_else(|e| e.into_inner());
        let a = ring.account(account);
        (a.plan.clone(), a.name.clone())
    };
    limited(&state, &format!("acct:{name}"), &plan, Some(account), req, next).await
}

fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<usize, ApiError> {
    let unauthenticated = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m).code("unauthenticated");
    // X-API-KEY wins when both are sent.
    let key = match headers.get("x-api-key") {
        Some(v) => v
            .to_str()
            .map_err(|_| unauthenticated("X-API-KEY is not valid text"))?
            .trim()
            .to_owned(),
        None => match headers.get("authorization") {
            Some(v) => {
                let v = v
                    .to_str()
                    .map_err(|_| unauthenticated("Authorization is not valid text"))?;
                v.strip_prefix("Bearer ")
                    .ok_or_else(|| unauthenticated("Authorization must be 'Bearer <API_KEY>'"))?
                    .trim()
                    .to_owned()
            }
            None => {
                return Err(unauthenticated(
                    "missing credential: send X-API-KEY or Authorization: Bearer",
                ));
            }
        },
    };
    if !key.starts_with(KEY_PREFIX) {
        return Err(unauthenticated("malformed API key: keys begin with pk_live_"));
    }
    state
        .keyring
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .authenticate(&key, state.clock.now())
        .map_err(|_| unauthenticated("invalid or revoked API key"))
}

fn window_start(now: DateTime<Utc>, period: QuotaPeriod) -> DateTime<Utc> {
    match period {
        QuotaPeriod::Day => now.duration_trunc(chrono::Duration::days(1)).unwrap_or(now),
        QuotaPeriod::Month => Utc
            .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
            .single()
            .unwrap_or(now),
    }
}

fn window_end(start: DateTime<Utc>, period: QuotaPeriod) -> DateTime<Utc> {
    match period {
        QuotaPeriod::Day => start + chrono::Duration::days(1),
        QuotaPeriod::Month => start.checked_add_months(chrono::Months::new(1)).unwrap_or(start),
    }
}

fn ceil_secs(d: chrono::Duration) -> i64 {
    (d.num_milliseconds() + 999).div_euclid(1000).max(1)
}

/// Counts the request in its fixed windows (every request that reaches here
/// counts, refused ones included), refuses it when a limit is passed, and puts
/// the limit headers on whatever goes back. Past the quota, an account with
/// prepaid credits pays per request until the balance runs out.
async fn limited(
    state: &AppState,
    bucket: &str,
    plan: &PlanLimits,
    account: Option<usize>,
    req: Request,
    next: Next,
) -> Response {
    let now = state.clock.now();
    let minute_start = now.duration_trunc(chrono::Duration::minutes(1)).unwrap_or(now);
    let minute_end = minute_start + chrono::Duration::minutes(1);
    let (minute_used, quota_used) = {
        let mut usage = state.usage.lock().unwrap_or_else(|e| e.into_inner());
        let u = usage.entry(bucket.to_owned()).or_default();
        let minute = match u.minute {
            Some((start, n)) if start == minute_start => n + 1,
            _ => 1,
        };
        u.minute = Some((minute_start, minute));
        let quota = plan.quota.map(|(period, _)| {
            let start = window_start(now, period);
            let n = match u.quota {
                Some((s, n)) if s == start => n + 1,
                _ => 1,
            };
            u.quota = Some((start, n));
            n
        });
        (minute, quota)
    };
    let over_quota = matches!((plan.quota, quota_used), (Some((_, limit)), Some(used)) if used > limit);
    let minute_ok = minute_used <= plan.per_minute;
    let credits = |charge: bool| {
        let i = account?;
        let mut ring = state.keyring.lock().unwrap_or_else(|e| e.into_inner());
        let credits = ring.account_mut(i).credits.as_mut()?;
        let balance = credits.balance_micros.checked_sub(credits.price_micros_per_request)?;
        if charge {
            credits.balance_micros = balance;
        }
        Some(credits.balance_usd())
    };
    // Credits pay only for a request that is served, not for one the minute limit refuses.
    let paid_by_credits = if over_quota && minute_ok { credits(true) } else { None };
    let mut response = if let Some((period, limit)) = plan.quota
        && over_quota
        && paid_by_credits.is_none()
        && (minute_ok || credits(false).is_none())
    {
        let end = window_end(window_start(now, period), period);
        let mut e = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "{} quota of {limit} requests exhausted",
                if period == QuotaPeriod::Day { "daily" } else { "monthly" }
            ),
        )
        .code("quota_exceeded");
        e.body.sales_email = Some(state.sales_email.clone());
        let mut r = e.into_response();
        r.headers_mut()
            .insert("retry-after", HeaderValue::from(ceil_secs(end - now)));
        state.stats.lock().unwrap_or_else(|e| e.into_inner()).quota_exceeded += 1;
        r
    } else if !minute_ok {
        let mut r = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!("rate limit of {} requests per minute exceeded", plan.per_minute),
        )
        .code("rate_limited")
        .into_response();
        r.headers_mut()
            .insert("retry-after", HeaderValue::from(ceil_secs(minute_end - now)));
        state.stats.lock().unwrap_or_else(|e| e.into_inner()).rate_limited += 1;
        r
    } else {
        next.run(req).await
    };
    record_status(state, response.status());
    let headers = response.headers_mut();
    let remaining = plan.per_minute.saturating_sub(minute_used);
    let reset = ceil_secs(minute_end - now);
    let mut put = |name: &'static str, value: String| {
        if let Ok(v) = HeaderValue::from_str(&value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    };
    if matches!(state.header_form, HeaderForm::Legacy | HeaderForm::Both) {
        put("ratelimit-limit", plan.per_minute.to_string());
        put("ratelimit-remaining", remaining.to_string());
        put("ratelimit-reset", reset.to_string());
    }
    if matches!(state.header_form, HeaderForm::Ietf | HeaderForm::Both) {
        put("ratelimit-policy", format!("\"minute\";q={};w=60", plan.per_minute));
        put("ratelimit", format!("\"minute\";r={remaining};t={reset}"));
    }
    if let (Some((period, limit)), Some(used)) = (plan.quota, quota_used) {
        let end = window_end(window_start(now, period), period);
        put("x-quota-limit", limit.to_string());
        put("x-quota-remaining", limit.saturating_sub(used).to_string());
        put(
            "x-quota-window",
            if period == QuotaPeriod::Day { "day" } else { "month" }.into(),
        );
        put("x-quota-reset", end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    if let Some(balance) = paid_by_credits {
        put("x-billing-source", "credits".into());
        put("x-credits-remaining-usd", balance);
    }
    response
}

fn company_or_404(state: &AppState, id: &str) -> Result<world::CompanyProfile, ApiError> {
    state
        .world
        .resolve(id)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown company '{id}'")))
}

async fn account_surface() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "account surfaces do not accept data credentials",
    )
    .code("unauthenticated")
}

fn base_url(headers: &HeaderMap) -> String {
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// RFC 9728 protected-resource metadata for the MCP endpoint (spec section 5).
async fn oauth_metadata(headers: HeaderMap) -> Json<serde_json::Value> {
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
async fn mcp_unauthorized(headers: HeaderMap) -> Response {
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

async fn coverage(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let (generated_at, markets) = state.world.coverage(state.clock.now());
    Json(json!({"generatedAt": generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), "markets": markets}))
}

async fn company(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    Ok(Json(company_or_404(&state, &id)?.payload()).into_response())
}

/// Start of a lookback range ending at `today`, or `None` for ALL.
fn range_start(range: &str, today: NaiveDate) -> Result<Option<NaiveDate>, ()> {
    let months = |m: u32| today.checked_sub_months(chrono::Months::new(m)).ok_or(());
    Ok(match range {
        "1M" => Some(months(1)?),
        "3M" => Some(months(3)?),
        "6M" => Some(months(6)?),
        "YTD" => NaiveDate::from_ymd_opt(today.year(), 1, 1),
        "1Y" => Some(months(12)?),
        "2Y" => Some(months(24)?),
        "5Y" => Some(months(60)?),
        "ALL" => None,
        _ => return Err(()),
    })
}

async fn prices(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let range = query.get("range").map(String::as_str).unwrap_or("1Y");
    let now = state.clock.now();
    let start = range_start(range, now.date_naive()).map_err(|()| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid range '{range}': use one of 1M, 3M, 6M, YTD, 1Y, 2Y, 5Y, ALL"),
        )
    })?;
    let c = company_or_404(&state, &id)?;
    let bars = state.world.daily_bars(&c, now);
    let from = start.unwrap_or(c.listed);
    let display_from = from
        .and_hms_opt(0, 0, 0)
        .expect("midnight")
        .and_utc()
        .timestamp_millis();
    let bars: Vec<_> = bars.into_iter().filter(|(d, _)| *d >= from).map(|(_, b)| b).collect();
    Ok(Json(PricesBody {
        symbol: &c.symbol,
        bars,
        display_from,
    })
    .into_response())
}

/// The body of `GET /companies/{id}/prices`, serialized directly. Built as a
/// `serde_json::Value`, a map for each bar, a whole history took more of the
/// emulator's time than gzipping it, on the cores the client shares
/// (BENCHMARKS.md, Ingest).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct PricesBody<'a> {
    symbol: &'a str,
    bars: Vec<crate::wire::Bar>,
    display_from: i64,
}

async fn dividends(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    let now = state.clock.now();
    let bars = state.world.daily_bars(&c, now);
    let (events, summary, series) = state.world.dividends(&c, &bars, now.date_naive());
    Ok(Json(json!({
        "cik": c.cik, "symbol": c.symbol, "currency": c.currency,
        "events": events, "summary": summary, "yieldSeries": series,
    }))
    .into_response())
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

async fn geo_layers(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let day = state.clock.now().date_naive();
    let layers: Vec<serde_json::Value> = geo::LAYERS
        .iter()
        .map(|l| json!({"code": l.code, "name": l.name, "reviewedAssets": geo::reviewed_assets(state.world.seed, l.code, day)}))
        .collect();
    Json(json!({"layers": layers}))
}

async fn geo_countries(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    let raw = query.get("layers").map(String::as_str).unwrap_or_default();
    let codes: Vec<&str> = raw.split(',').map(str::trim).filter(|s| !s.is_empty()).collect();
    if codes.is_empty() {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "missing parameter 'layers': comma-separated codes from /geo/layers",
        ));
    }
    if let Some(bad) = codes.iter().find(|c| geo::layer(c).is_none()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("unknown layer '{bad}': see /api/v1/geo/layers"),
        ));
    }
    let counts = geo::country_counts(state.world.seed, &codes, state.clock.now().date_naive());
    Ok(Json(json!({"layers": codes, "countries": counts})).into_response())
}

async fn regulation(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::regulation(state.world.seed, &c, state.clock.now())).into_response())
}

async fn monthly_revenue(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    company_docs::monthly_revenue(state.world.seed, &c, state.clock.now())
        .map(|v| Json(v).into_response())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("{} has no monthly revenue mandate", c.cik),
            )
        })
}

async fn filing_notes(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::filing_notes(state.world.seed, &c, state.clock.now())).into_response())
}

async fn filing_section(
    State(state): State<Arc<AppState>>,
    Path((id, accession, section)): Path<(String, String, String)>,
) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    if !company_docs::is_accession(&accession) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("malformed accession '{accession}': expected NNNNNNNNNN-NN-NNNNNN"),
        ));
    }
    company_docs::section_text(state.world.seed, &c, &accession, &section, state.clock.now())
        .map(|v| Json(v).into_response())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no section '{section}' in filing {accession}"),
            )
        })
}

fn bad_request(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// An integer query parameter within `lo..=hi`, or `default` when absent.
fn int_param(
    query: &HashMap<String, String>,
    name: &str,
    lo: u64,
    hi: u64,
    default: Option<u64>,
) -> Result<Option<u64>, ApiError> {
    match query.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<u64>() {
            Ok(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(bad_request(format!(
                "invalid {name} '{v}': an integer from {lo} to {hi}"
            ))),
        },
    }
}

fn families_param(query: &HashMap<String, String>) -> Result<Option<Vec<String>>, ApiError> {
    let Some(raw) = query.get("family") else {
        return Ok(None);
    };
    let families: Vec<String> = raw
        .split(',')
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    if let Some(bad) = families.iter().find(|f| !events::FAMILIES.contains(&f.as_str())) {
        return Err(bad_request(format!("unknown family '{bad}'")));
    }
    Ok(Some(families))
}

async fn company_events(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let limit = int_param(&query, "limit", 1, 500, None)?;
    let c = company_or_404(&state, &id)?;
    let now = state.clock.now();
    let world = &state.world;
    let me = events::filer_of(world, &c);
    let count = events::CADENCE.count_at(world.seed, now);
    let list: Vec<serde_json::Value> = events::numbers(0, count, true)
        .filter(|n| me == Some(events::filer(world, *n)))
        .take(limit.map_or(usize::MAX, |l| l as usize))
        .filter_map(|n| events::event(world, n))
        .map(|e| e.entry(now))
        .collect();
    Ok(Json(json!({"cik": c.cik, "symbol": c.symbol, "events": list})).into_response())
}

async fn event_item_text(
    State(state): State<Arc<AppState>>,
    Path((id, accession)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    if !company_docs::is_accession(&accession) {
        return Err(bad_request(format!(
            "malformed accession '{accession}': expected NNNNNNNNNN-NN-NNNNNN"
        )));
    }
    let event = events::by_accession(&state.world, &accession, state.clock.now())
        .filter(|e| e.company.cik == c.cik)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("no filing {accession} for {}", c.cik)))?;
    let item = match query.get("item") {
        Some(item) if event.items.contains(&item.as_str()) => item.clone(),
        Some(item) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                format!("filing {accession} has no item {item}"),
            ));
        }
        None if event.items.is_empty() => String::new(),
        None => {
            let mut e = bad_request(format!("filing {accession} has coded items: pass item= one of them"));
            e.body.items = Some(event.items.iter().map(|s| (*s).to_owned()).collect());
            return Err(e);
        }
    };
    Ok((
        [(axum::http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        event.item_text(&item),
    )
        .into_response())
}

async fn events_wire(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    let limit = int_param(&query, "limit", 1, 200, Some(50))?.unwrap_or(50) as usize;
    let offset = int_param(&query, "offset", 0, u64::MAX, Some(0))?.unwrap_or(0) as usize;
    let newest = match query.get("sort").map(String::as_str) {
        None | Some("newest") => true,
        Some("oldest") => false,
        Some(other) => return Err(bad_request(format!("invalid sort '{other}': newest or oldest"))),
    };
    let date = |name: &str| -> Result<Option<NaiveDate>, ApiError> {
        query
            .get(name)
            .map(|v| {
                v.parse::<NaiveDate>()
                    .map_err(|_| bad_request(format!("invalid {name} '{v}': a date YYYY-MM-DD")))
            })
            .transpose()
    };
    let (from, to) = (date("from")?, date("to")?);
    let families = families_param(&query)?;
    let q = query.get("q").map(|s| s.to_lowercase());
    let with_counts = query.get("counts").map(String::as_str) == Some("1");
    let now = state.clock.now();
    let world = &state.world;
    let count = events::CADENCE.count_at(world.seed, now);
    let lo = from.map_or(0, events::first_on_or_after).min(count);
    let hi = to
        .and_then(|d| d.succ_opt())
        .map_or(count, |d| (events::first_on_or_after(d) + 1).min(count));
    let mut total = 0usize;
    let mut page = Vec::new();
    let mut counts: HashMap<&'static str, u64> = HashMap::new();
    for n in events::numbers(lo, hi.max(lo), newest) {
        let Some(e) = events::event(world, n) else { continue };
        let day = e.filing_date();
        if from.is_some_and(|f| day < f) || to.is_some_and(|t| day > t) {
            continue;
        }
        if families.as_ref().is_some_and(|f| !f.iter().any(|x| x == e.family)) {
            continue;
        }
        if let Some(q) = &q {
            if now < e.headline_at || !e.headline.to_lowercase().contains(q.as_str()) {
                continue;
            }
        }
        if total >= offset && page.len() < limit {
            page.push(e.wire_entry(now));
        }
        total += 1;
        *counts.entry(e.family).or_default() += 1;
    }
    let mut body = json!({"total": total, "offset": offset, "limit": limit, "events": page});
    if with_counts {
        body["counts"] = json!(counts);
    }
    Ok(Json(body).into_response())
}

async fn events_latest(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    let limit = int_param(&query, "limit", 1, 100, Some(30))?.unwrap_or(30) as usize;
    let families = families_param(&query)?;
    let now = state.clock.now();
    let world = &state.world;
    let list: Vec<serde_json::Value> = events::numbers(0, events::CADENCE.count_at(world.seed, now), true)
        .filter_map(|n| events::event(world, n))
        .filter(|e| families.as_ref().is_none_or(|f| f.iter().any(|x| x == e.family)))
        .take(limit)
        .map(|e| e.wire_entry(now))
        .collect();
    Ok(Json(json!({"events": list})).into_response())
}

fn list_param(query: &HashMap<String, String>, name: &str) -> Option<Vec<String>> {
    query.get(name).map(|v| {
        v.split(',')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect()
    })
}

fn cursor_param(query: &HashMap<String, String>, name: &str) -> Result<Option<u64>, ApiError> {
    query
        .get(name)
        .map(|v| {
            news::parse_id(v)
                .ok_or_else(|| bad_request(format!("invalid {name} '{v}': an item id such as n_0000001234")))
        })
        .transpose()
}

/// Serves a feed page for `/news/feed`, `/news/search` and `/companies/{id}/news`.
fn feed(state: &AppState, query: &HashMap<String, String>, ciks: Option<Vec<String>>) -> ApiResult {
    Ok(Json(feed_page(state, query, ciks)?).into_response())
}

/// A feed body as the wire contract defines it, for the feed routes and the stream.
fn feed_page(
    state: &AppState,
    query: &HashMap<String, String>,
    ciks: Option<Vec<String>>,
) -> Result<news::Page, ApiError> {
    let limit = int_param(query, "limit", 1, 200, Some(100))?.unwrap_or(100) as usize;
    let min_importance = int_param(query, "minImportance", 0, 100, Some(0))?.unwrap_or(0);
    let (after, before) = (cursor_param(query, "after")?, cursor_param(query, "before")?);
    if after.is_some() && before.is_some() {
        return Err(bad_request("after and before cannot be combined".into()));
    }
    let changed_since = query
        .get("changedSince")
        .map(|v| {
            DateTime::parse_from_rfc3339(v).map(|d| d.to_utc()).map_err(|_| {
                bad_request(format!(
                    "invalid changedSince '{v}': an RFC 3339 time (the serverTime of the last call)"
                ))
            })
        })
        .transpose()?;
    if changed_since.is_some() && after.is_none() {
        return Err(bad_request("changedSince is used with after".into()));
    }
    let flash = match query.get("flash").map(String::as_str) {
        None | Some("0") => false,
        Some("1") => true,
        Some(other) => {
            return Err(bad_request(format!(
                "invalid flash '{other}': 1 for flash headlines only"
            )));
        }
    };
    let filters = news::Filters {
        tickers: list_param(query, "tickers"),
        ciks: match (ciks, list_param(query, "cik")) {
            (Some(lineage), _) => Some(lineage),
            (None, given) => given.map(|v| {
                v.iter()
                    .map(|c| c.parse::<u64>().map_or(c.clone(), |n| format!("{n:010}")))
                    .collect()
            }),
        },
        topics: list_param(query, "topics"),
        sources: list_param(query, "sources"),
        exclude_sources: list_param(query, "excludeSources").unwrap_or_default(),
        exclude_forms: list_param(query, "excludeForms").unwrap_or_default(),
        flash,
        min_importance,
        q: query.get("q").map(|q| q.to_lowercase()),
    };
    let body = news::page(
        &state.world,
        state.clock.now(),
        &filters,
        limit,
        after,
        before,
        changed_since,
    );
    Ok(body)
}

async fn news_feed(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    feed(&state, &query, None)
}

async fn company_news(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    let mut lineage = vec![c.cik.clone()];
    lineage.extend(c.predecessors.iter().cloned());
    feed(&state, &query, Some(lineage))
}

async fn news_item(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let not_found = || ApiError::new(StatusCode::NOT_FOUND, format!("no news item '{id}'"));
    let n = news::parse_id(&id).ok_or_else(not_found)?;
    let now = state.clock.now();
    let count = news::CADENCE.count_at(state.world.seed, now);
    if n >= count {
        return Err(not_found());
    }
    let it = news::item(&state.world, n, now).ok_or_else(not_found)?;
    let storyline: Vec<news::ItemBody> = (n / 5 * 5..(n / 5 * 5 + 5).min(count))
        .filter(|m| *m != n)
        .filter_map(|m| news::item(&state.world, m, now))
        .map(|i| i.body)
        .collect();
    Ok(Json(json!({"item": it.body, "storyline": storyline})).into_response())
}

async fn news_topics() -> Json<serde_json::Value> {
    let topics: Vec<serde_json::Value> = news::TOPICS
        .iter()
        .map(|(key, name, parent)| json!({"key": key, "name": name, "parent": parent}))
        .collect();
    Json(json!({"topics": topics}))
}

async fn news_sources(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let now = state.clock.now();
    let count = news::CADENCE.count_at(state.world.seed, now);
    let from = news::CADENCE
        .first_at_or_after(now - chrono::Duration::hours(24))
        .min(count);
    let mut per_source: HashMap<&str, u64> = HashMap::new();
    for n in from..count {
        if news::CADENCE.at(state.world.seed, n) > now - chrono::Duration::hours(24) {
            if let Some(it) = news::item(&state.world, n, now) {
                *per_source.entry(it.source.id).or_default() += 1;
            }
        }
    }
    let sources: Vec<serde_json::Value> = news::SOURCES
        .iter()
        .map(|s| {
            json!({"id": s.id, "name": s.name, "licenceClass": s.licence, "attribution": s.attribution,
                        "count24h": per_source.get(s.id).copied().unwrap_or(0)})
        })
        .collect();
    Json(json!({"sources": sources}))
}

/// Injects the configured faults into a counted data-route response.
async fn inject_faults(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let faults = state.faults.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if faults == Faults::default() {
        return next.run(req).await;
    }
    let k = state.fault_seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let roll = |salt: u64| world::unit(state.world.seed, 0xFA17 ^ salt, k);
    let injected = || state.stats.lock().unwrap_or_else(|e| e.into_inner()).faults_injected += 1;
    if roll(1) < faults.slow {
        tokio::time::sleep(std::time::Duration::from_millis(faults.slow_ms)).await;
    }
    if roll(2) < faults.server_error {
        injected();
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "temporarily unavailable").into_response();
    }
    if roll(6) < faults.throttle {
        injected();
        let mut r = ApiError::new(StatusCode::TOO_MANY_REQUESTS, "rate limit exceeded (injected)")
            .code("rate_limited")
            .into_response();
        // Both forms RFC 9110 allows; a client must read either.
        let retry_after = if k % 2 == 0 {
            HeaderValue::from(1u64)
        } else {
            let at = std::time::SystemTime::from(state.clock.now() + chrono::Duration::seconds(1));
            HeaderValue::from_str(&httpdate::fmt_http_date(at)).unwrap_or(HeaderValue::from(1u64))
        };
        r.headers_mut().insert("retry-after", retry_after);
        return r;
    }
    let response = next.run(req).await;
    if roll(3) < faults.reset {
        injected();
        let (parts, _) = response.into_parts();
        let failing = futures::stream::once(async {
            Err::<bytes::Bytes, std::io::Error>(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected reset",
            ))
        });
        return Response::from_parts(parts, axum::body::Body::from_stream(failing));
    }
    if roll(4) < faults.truncate && response.status().is_success() {
        injected();
        let (mut parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        let half = bytes.slice(..bytes.len() / 2);
        let plain_text = parts
            .headers
            .get(axum::http::header::CONTENT_TYPE)
            .is_some_and(|t| t.as_bytes().starts_with(b"text/plain"));
        if plain_text {
            // Half a text is still a text: no client could tell. The cut a
            // client can see is the one in transit, short of the length the
            // headers announced, as a dropped connection leaves it.
            parts
                .headers
                .insert(axum::http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
            let cut = futures::stream::iter([
                Ok::<_, std::io::Error>(half),
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "injected truncation",
                )),
            ]);
            return Response::from_parts(parts, axum::body::Body::from_stream(cut));
        }
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, axum::body::Body::from(half));
    }
    if roll(5) < faults.bad_record && response.status().is_success() {
        let (mut parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
            Ok(v) => v,
            Err(_) => return Response::from_parts(parts, axum::body::Body::from(bytes)),
        };
        let list = value
            .as_object_mut()
            .and_then(|o| o.values_mut().find_map(|v| v.as_array_mut().filter(|a| !a.is_empty())));
        if let Some(list) = list {
            injected();
            list[0] = json!({"malformed": "an injected record of the wrong shape"});
        }
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        return Response::from_parts(parts, axum::body::Body::from(value.to_string()));
    }
    response
}

async fn news_search(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    if query.get("q").is_none_or(|q| q.trim().is_empty()) {
        return Err(bad_request(
            "missing parameter 'q': the text to search headlines and snippets for".into(),
        ));
    }
    feed(&state, &query, None)
}

/// Each storyline in the window collapsed to its strongest item, by importance.
async fn news_top(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    let window = query.get("window").map(String::as_str).unwrap_or("24h");
    let hours = match window {
        "6h" => 6,
        "24h" => 24,
        "7d" => 168,
        other => return Err(bad_request(format!("invalid window '{other}': 6h, 24h or 7d"))),
    };
    let limit = int_param(&query, "limit", 1, 100, Some(30))?.unwrap_or(30) as usize;
    let now = state.clock.now();
    let count = news::CADENCE.count_at(state.world.seed, now);
    let since = now - chrono::Duration::hours(hours);
    let mut strongest: HashMap<String, (u64, u64, news::ItemBody)> = HashMap::new();
    for n in news::CADENCE.first_at_or_after(since).min(count)..count {
        if news::CADENCE.at(state.world.seed, n) < since {
            continue;
        }
        let Some(it) = news::item(&state.world, n, now) else {
            continue;
        };
        let story = it.body.storyline_id.clone();
        match strongest.get(&story) {
            Some((importance, _, _)) if *importance >= it.body.importance => {}
            _ => {
                strongest.insert(story, (it.body.importance, n, it.body));
            }
        }
    }
    let mut ranked: Vec<(u64, u64, news::ItemBody)> = strongest.into_values().collect();
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
    let items: Vec<news::ItemBody> = ranked.into_iter().take(limit).map(|(_, _, v)| v).collect();
    Ok(Json(json!({"window": window, "items": items})).into_response())
}

/// Why a stream was cut (the admin asked for it).
#[derive(Debug)]
struct StreamCut;

impl std::fmt::Display for StreamCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stream cut by the emulator's admin")
    }
}

impl std::error::Error for StreamCut {}

/// `GET /news/stream`: `event: items` frames carrying a feed body whenever new
/// or rewritten items appear, a `: ping` comment at the ping interval, and a
/// close after `close_after`; the client reconnects with `after`.
async fn news_stream(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
    use axum::response::sse::{Event, KeepAlive, Sse};
    // Validate the filters and cursor the way the feed does.
    let mut probe = query.clone();
    probe.insert("limit".into(), "1".into());
    if !probe.contains_key("after") {
        probe.remove("changedSince");
    }
    feed_page(&state, &probe, None)?;
    let now = state.clock.now();
    let start = match cursor_param(&query, "after")? {
        Some(a) => a,
        None => news::CADENCE.count_at(state.world.seed, now).saturating_sub(1),
    };
    // A reconnecting client's changedSince: rewrites made while it was away come first.
    let since = query
        .get("changedSince")
        .filter(|_| query.contains_key("after"))
        .cloned()
        .unwrap_or_else(|| now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    let timing = state.stream.clone();
    let deadline = tokio::time::Instant::now() + timing.close_after;
    let mut cuts = state.stream_cuts.subscribe();
    cuts.mark_unchanged();
    let initial = (state.clone(), news::id(start), since, query, cuts);
    let frames = futures::stream::unfold(initial, move |(state, latest, since, query, mut cuts)| async move {
        loop {
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            if cuts.has_changed().unwrap_or(false) {
                // An error item aborts the response body: the client sees the
                // connection cut mid-stream, not a clean end.
                return Some((Err(StreamCut), (state, latest, since, query, cuts)));
            }
            let mut q = query.clone();
            q.insert("after".into(), latest.clone());
            q.insert("changedSince".into(), since.clone());
            q.insert("limit".into(), "200".into());
            let Ok(page) = feed_page(&state, &q, None) else {
                return None;
            };
            let next_latest = page.latest_id.clone().unwrap_or_else(|| latest.clone());
            let next_since = page.server_time.clone();
            if !page.items.is_empty() {
                let body = serde_json::to_string(&page).expect("a feed page serializes");
                let event = Event::default().event("items").data(body);
                return Some((Ok(event), (state, next_latest, next_since, query, cuts)));
            }
            let wait = timing
                .poll
                .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = cuts.changed() => return Some((Err(StreamCut), (state, latest, since, query, cuts))),
            }
        }
    });
    let keep_alive = KeepAlive::new().interval(state.stream.ping).text("ping");
    Ok(Sse::new(frames).keep_alive(keep_alive).into_response())
}
