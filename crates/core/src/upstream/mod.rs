//! The upstream client: authentication, pacing within the rate limit, retries
//! with jittered backoff that honour `Retry-After`, and a request log.
//!
//! Every request goes through [`Client::get`], which returns only a response
//! whose body arrived whole and parsed: a truncated or malformed body is
//! retried like a 5xx, so nothing downstream ever commits half a page.

mod credential_file;
mod error;
mod http;
pub mod ratelimit;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;

use crate::clock::Clock;
use crate::config::{Credential, CredentialKind, UpstreamConfig};
use crate::wire::ErrorBody;
use error::is_quota_wall;
pub use error::{BodyError, Refusal, TOO_LARGE, UpstreamError, refusal_text};
use http::{ERROR_BODY_BYTES, read_body, same_origin_redirects, service_text, transient, without_url};
use ratelimit::{Pacer, QuotaWindow, RateWindow};

/// Pings come every 15 s; three missed mean the link is gone.
const STREAM_READ_TIMEOUT_SECS: u64 = 45;

/// How long a 401 waits for the key file to change (checked with backoff)
/// before the key counts as refused: the kubelet refreshes a mounted Secret
/// within about a minute of its change.
const CREDENTIAL_FILE_WAIT: Duration = Duration::from_secs(90);

/// Redirects followed within the configured origin, at most.
const MAX_REDIRECTS: usize = 5;

/// What the logs, `_sync_requests` and `_sync_runs` keep of a message the
/// service wrote, at most (characters).
const MAX_SERVICE_TEXT: usize = 300;

/// One upstream request attempt, for `_sync_requests`.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    pub at: DateTime<Utc>,
    pub route: String,
    /// 0 when no response arrived (timeout, reset).
    pub status: u16,
    pub latency_ms: i64,
    pub rate_remaining: Option<u32>,
    pub quota_remaining: Option<u64>,
    pub retry_after_s: Option<f64>,
    pub error: Option<String>,
}

/// What the last responses said about the quota.
#[derive(Debug, Clone, Default)]
pub struct QuotaSeen {
    pub quota: QuotaWindow,
    pub rate: RateWindow,
    /// Keyed requests sent whose answers have not arrived: the service counted
    /// them after the last `X-Quota-Remaining` we read, or will.
    pub in_flight: u64,
}

/// Whether a request carries the API key. Public routes are limited per caller,
/// not per key, so their headers describe another budget and get their own pacer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Key,
    Public,
}

/// A whole, parsed response.
#[derive(Debug)]
pub struct Fetched<T> {
    pub value: T,
    pub body: Bytes,
    /// Request path and query, never the key.
    pub route: String,
    pub fetched_at: DateTime<Utc>,
    /// The media type the service declared (`Content-Type`, parameters
    /// left out), when it declared one.
    pub media_type: Option<String>,
}

#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// What a log line or a panic message may show of a client: never the key.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let key = self.inner.key.read().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Client")
            .field("base", &self.inner.base)
            .field("key", &*key)
            .field("credential_file", &self.inner.credential_file)
            .field("max_attempts", &self.inner.max_attempts)
            .finish_non_exhaustive()
    }
}

struct Inner {
    http: reqwest::Client,
    /// For the news stream: no overall timeout (the server holds it ~280 s),
    /// but a read timeout well past the 15-s pings, so a dead link is noticed.
    stream_http: reqwest::Client,
    base: String,
    key: std::sync::RwLock<Option<Credential>>,
    /// Where the key came from, when a file: read again whenever it changes
    /// and on a 401, because a rotated Kubernetes Secret changes the file
    /// under a running process.
    credential_file: Option<std::path::PathBuf>,
    /// What the key file holds: an API key or an access token.
    credential_kind: CredentialKind,
    /// The file's modification time and length when it was last read.
    credential_file_read: Mutex<Option<(std::time::SystemTime, u64)>>,
    use_credits: bool,
    /// Requests this client may still send (`u64::MAX`: no cap).
    budget: std::sync::atomic::AtomicU64,
    budget_limit: std::sync::atomic::AtomicU64,
    /// Requests a backfill leaves unspent: the fresh polls still to come in this run.
    kept_for_fresh: std::sync::atomic::AtomicU64,
    /// The running pipeline's share of the quota left: how many pipelines
    /// share it, the least they need, and `sent` when the pipeline started.
    share: Mutex<Option<(u64, u64, u64)>>,
    clock: Clock,
    pacer: Pacer,
    public_pacer: Pacer,
    max_attempts: usize,
    /// The most a decoded body may hold (`upstream.max_body_mb`).
    max_body_bytes: u64,
    log: Mutex<Vec<RequestRecord>>,
    quota: Mutex<QuotaSeen>,
    sent: std::sync::atomic::AtomicU64,
    /// `sent` when the quota was last handed to the ledger.
    ledger_sent: std::sync::atomic::AtomicU64,
    /// Cancelled by [`Client::stop_sending`].
    stopped: tokio_util::sync::CancellationToken,
}

/// The HTTP client could not be built. Where it happens at all, the usual
/// cause is a machine (or image) with no CA certificates for TLS to trust.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot build the HTTP client: {detail}; if this machine has no CA certificates, install them \
     (Debian and Ubuntu: `apt-get install ca-certificates`) or point SSL_CERT_FILE at a PEM bundle"
)]
pub struct ClientBuildError {
    detail: String,
}

impl From<reqwest::Error> for ClientBuildError {
    fn from(e: reqwest::Error) -> ClientBuildError {
        // reqwest's own text is only "builder error": the cause is in the chain.
        let detail = std::iter::once(e.to_string())
            .chain(http::causes(&e).map(ToString::to_string))
            .collect::<Vec<_>>()
            .join(": ");
        ClientBuildError { detail }
    }
}

impl Client {
    /// # Errors
    /// When the HTTP client cannot be built (no TLS trust store, most often).
    pub fn new(config: &UpstreamConfig, key: Option<Credential>, clock: Clock) -> Result<Client, ClientBuildError> {
        let http = reqwest::Client::builder()
            .redirect(same_origin_redirects())
            .timeout(Duration::from_secs(config.timeout_secs))
            .connect_timeout(Duration::from_secs(config.timeout_secs.min(10)))
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(config.concurrency)
            .user_agent(concat!("fdsync/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let stream_http = reqwest::Client::builder()
            .redirect(same_origin_redirects())
            .connect_timeout(Duration::from_secs(config.timeout_secs.min(10)))
            .read_timeout(Duration::from_secs(STREAM_READ_TIMEOUT_SECS))
            .user_agent(concat!("fdsync/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let plan_limit = config.plan.and_then(|p| p.per_minute());
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                stream_http,
                base: config.base_url.trim_end_matches('/').to_owned(),
                key: std::sync::RwLock::new(key),
                credential_file: config.credential_file().map(std::path::Path::to_path_buf),
                credential_kind: config.credential,
                credential_file_read: Mutex::new(None),
                use_credits: config.use_credits,
                budget: std::sync::atomic::AtomicU64::new(u64::MAX),
                budget_limit: std::sync::atomic::AtomicU64::new(u64::MAX),
                kept_for_fresh: Default::default(),
                share: Mutex::new(None),
                pacer: Pacer::new(clock.clone(), plan_limit),
                public_pacer: Pacer::new(clock.clone(), None),
                clock,
                max_attempts: config.max_attempts,
                max_body_bytes: config.max_body_mb.saturating_mul(1 << 20),
                log: Mutex::new(Vec::new()),
                quota: Mutex::new(QuotaSeen::default()),
                sent: Default::default(),
                ledger_sent: Default::default(),
                stopped: tokio_util::sync::CancellationToken::new(),
            }),
        })
    }

    pub fn clock(&self) -> &Clock {
        &self.inner.clock
    }

    /// Requests sent so far (every attempt counts: that is what the quota counts).
    pub fn requests_sent(&self) -> u64 {
        self.inner.sent.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes the request log accumulated since the last call.
    pub fn drain_log(&self) -> Vec<RequestRecord> {
        std::mem::take(&mut *self.inner.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The quota as last seen, if a request was sent since the last call:
    /// without one nothing new can be known, and the ledger row is skipped.
    pub fn quota_for_ledger(&self) -> Option<QuotaSeen> {
        use std::sync::atomic::Ordering::Relaxed;
        let sent = self.inner.sent.load(Relaxed);
        (self.inner.ledger_sent.swap(sent, Relaxed) != sent).then(|| self.quota_seen())
    }

    pub fn quota_seen(&self) -> QuotaSeen {
        self.inner.quota.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Starts from a quota window remembered by an earlier process (the ledger),
    /// unless a response has already said something newer.
    pub fn seed_quota(&self, quota: QuotaWindow) {
        let mut seen = self.inner.quota.lock().unwrap_or_else(|e| e.into_inner());
        if seen.quota.remaining.is_none() {
            seen.quota = quota;
        }
    }

    /// The key's one-way fingerprint, for the quota ledger.
    pub fn key_id(&self) -> Option<String> {
        self.inner
            .key
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Credential::fingerprint)
    }

    /// Sends no request from now on, and abandons those in flight (each
    /// fails with [`UpstreamError::Stopped`]): what was received stays, and
    /// the run ends as if its budget were spent. For a clean stop on a signal.
    pub fn stop_sending(&self) {
        self.inner.stopped.cancel();
    }

    /// Whether [`Client::stop_sending`] was called.
    pub fn is_stopped(&self) -> bool {
        self.inner.stopped.is_cancelled()
    }

    /// Caps the requests this client sends from now on (`--max-requests`).
    pub fn limit_requests(&self, limit: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.inner.budget.store(limit, Relaxed);
        self.inner.budget_limit.store(limit, Relaxed);
    }

    /// Keeps `requests` of what is left (of the quota as last seen, and of
    /// the run's budget) from backfills: the fresh polls still due this run.
    pub fn keep_for_fresh(&self, requests: u64) {
        self.inner
            .kept_for_fresh
            .store(requests, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a backfill may send its next request: what is left, as far
    /// as this client knows, is more than the fresh polls still due need.
    /// Past the quota window's reset nothing is known to be short.
    pub fn may_backfill(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let kept = self.inner.kept_for_fresh.load(Relaxed);
        if kept == 0 {
            return true;
        }
        let budget = self.inner.budget.load(Relaxed);
        budget.min(self.quota_left().unwrap_or(u64::MAX)) > kept
    }

    /// From now on, until called again, the requests sent take an equal
    /// share of the quota left with the `pipelines - 1` that run after,
    /// once what is left (what the service's headers say, plus what was
    /// sent since) cannot cover `least`, the least they all need.
    /// `None`: no share, the whole quota.
    pub fn share_quota(&self, share: Option<(u64, u64)>) {
        let sent = self.requests_sent();
        *self.inner.share.lock().unwrap_or_else(|e| e.into_inner()) =
            share.map(|(pipelines, least)| (pipelines.max(1), least, sent));
    }

    /// The quota left as the service's headers last said, less the requests
    /// in flight; `None` when unknown or past the window's reset.
    fn quota_left(&self) -> Option<u64> {
        let seen = self.quota_seen();
        match (seen.quota.remaining, seen.quota.reset_at) {
            (Some(left), reset) if reset.is_none_or(|r| self.inner.clock.now() < r) => {
                Some(left.saturating_sub(seen.in_flight))
            }
            _ => None,
        }
    }

    /// Takes one request from the running pipeline's share, or says it is
    /// spent (its size). Without a quota figure from the service there is
    /// no share.
    fn take_share(&self) -> Result<(), u64> {
        let Some((pipelines, least, sent_at_start)) = *self.inner.share.lock().unwrap_or_else(|e| e.into_inner())
        else {
            return Ok(());
        };
        let Some(left) = self.quota_left() else {
            return Ok(());
        };
        let sent = self.requests_sent() - sent_at_start;
        if left + sent >= least {
            return Ok(());
        }
        let cap = (left + sent).div_ceil(pipelines).max(1);
        if sent >= cap {
            return Err(cap);
        }
        Ok(())
    }

    /// Takes one request from the budget, or says it is spent.
    fn spend(&self) -> Result<(), UpstreamError> {
        use std::sync::atomic::Ordering::Relaxed;
        let taken = self.inner.budget.fetch_update(Relaxed, Relaxed, |left| match left {
            u64::MAX => Some(u64::MAX),
            0 => None,
            n => Some(n - 1),
        });
        taken.map(|_| ()).map_err(|_| UpstreamError::BudgetSpent {
            limit: self.inner.budget_limit.load(Relaxed),
        })
    }

    /// Takes one request from the quota as last seen, counting requests still
    /// in flight, so that concurrent requests never overrun a nearly spent
    /// window. Past the window's reset the old figure no longer holds.
    fn reserve_quota(&self) -> Result<(), UpstreamError> {
        let inner = &self.inner;
        let mut seen = inner.quota.lock().unwrap_or_else(|e| e.into_inner());
        let now = inner.clock.now();
        if seen.quota.reset_at.is_some_and(|reset| now >= reset) {
            seen.quota.remaining = None;
        }
        match (seen.quota.remaining, seen.quota.reset_at) {
            // The next request would be refused and counted: do not send it.
            (Some(0), Some(reset_at)) if !inner.use_credits => {
                return Err(UpstreamError::QuotaExhausted {
                    window: seen.quota.window.clone().unwrap_or_else(|| "quota".into()),
                    reset_at,
                    sales_email: "the service's sales team".into(),
                });
            }
            (Some(n), _) => seen.quota.remaining = Some(n.saturating_sub(1)),
            (None, _) => {}
        }
        seen.in_flight += 1;
        Ok(())
    }

    /// Settles a reservation with what the response said (or nothing, when no
    /// response came: the reservation stays spent, which errs on the safe side).
    fn release_quota(&self, answer: Option<(QuotaWindow, RateWindow)>) {
        let mut seen = self.inner.quota.lock().unwrap_or_else(|e| e.into_inner());
        seen.in_flight = seen.in_flight.saturating_sub(1);
        let Some((quota, rate)) = answer else { return };
        if let Some(remaining) = quota.remaining {
            let in_flight = seen.in_flight;
            seen.quota = QuotaWindow {
                remaining: Some(remaining.saturating_sub(in_flight)),
                ..quota
            };
        }
        if rate.remaining.is_some() {
            seen.rate = rate;
        }
    }

    /// GETs `route` (a path under the base URL, query included) and parses the body
    /// with `parse`, retrying transient failures, including bodies that do not parse.
    ///
    /// # Errors
    /// See [`UpstreamError`]; only `Transient` failures are retried, and they are
    /// returned once `max_attempts` is spent.
    pub async fn get<T>(
        &self,
        route: &str,
        access: Access,
        parse: impl Fn(&Bytes) -> Result<T, BodyError>,
    ) -> Result<Fetched<T>, UpstreamError> {
        let fetched = async {
            loop {
                match self.get_with_retries(route, access, &parse).await {
                    Err(UpstreamError::Unauthenticated { .. })
                        if access == Access::Key && self.await_new_credential().await => {}
                    other => return other,
                }
            }
        };
        self.unless_stopped(fetched).await
    }

    /// `request`, unless the client is told to stop first (also while it
    /// waits for the pacer or a retry).
    async fn unless_stopped<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, UpstreamError>>,
    ) -> Result<T, UpstreamError> {
        if self.is_stopped() {
            return Err(UpstreamError::Stopped);
        }
        tokio::select! {
            result = request => result,
            () = self.inner.stopped.cancelled() => Err(UpstreamError::Stopped),
        }
    }

    async fn get_with_retries<T>(
        &self,
        route: &str,
        access: Access,
        parse: &impl Fn(&Bytes) -> Result<T, BodyError>,
    ) -> Result<Fetched<T>, UpstreamError> {
        let backoff = ExponentialBuilder::default()
            .with_min_delay(Duration::from_millis(500))
            .with_max_delay(Duration::from_secs(60))
            .with_max_times(self.inner.max_attempts.saturating_sub(1))
            .with_jitter();
        let clock = self.inner.clock.clone();
        (|| self.attempt(route, access, parse))
            .retry(backoff)
            .sleep(move |d| {
                let clock = clock.clone();
                async move { clock.sleep(d).await }
            })
            .when(UpstreamError::is_retriable)
            .adjust(|err, backoff| match err {
                // Never earlier than the server asked; never a hot loop when it did not say.
                UpstreamError::Transient {
                    retry_after: Some(ra), ..
                } => backoff.map(|b| b.max(*ra)),
                _ => backoff,
            })
            .notify(|err, wait| tracing::warn!(message = "Retrying request.", %err, wait_ms = wait.as_millis() as u64))
            .await
    }

    async fn attempt<T>(
        &self,
        route: &str,
        access: Access,
        parse: &impl Fn(&Bytes) -> Result<T, BodyError>,
    ) -> Result<Fetched<T>, UpstreamError> {
        let mut prepared = self.prepare(route, access, &self.inner.http).await?;
        let result = match self
            .answer(prepared.request, route, access, prepared.pacer, &mut prepared.record)
            .await
        {
            Ok((response, now)) => {
                let media_type = response
                    .headers()
                    .get(reqwest::header::CONTENT_TYPE)
                    .and_then(|t| t.to_str().ok())
                    .and_then(|t| t.split(';').next())
                    .map(|t| t.trim().to_ascii_lowercase());
                match read_body(response, route, self.inner.max_body_bytes).await {
                    Ok(body) => match parse(&body) {
                        Ok(value) => Ok(Fetched {
                            value,
                            body,
                            route: route.to_owned(),
                            fetched_at: now,
                            media_type,
                        }),
                        Err(BodyError::Malformed(e)) => Err(transient(
                            route,
                            format!("response body did not parse ({} bytes): {e}", body.len()),
                            None,
                        )),
                        Err(BodyError::Unreadable(message)) => Err(UpstreamError::Unreadable {
                            route: route.to_owned(),
                            message,
                            body,
                        }),
                    },
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        self.settle(prepared.record, prepared.started, result.as_ref().err());
        result
    }

    /// Opens a long-lived response (the news stream) with one request: paced,
    /// budgeted, keyed and logged like any other, but read as it arrives and
    /// never cut off by the request timeout. Reconnecting is the caller's job.
    ///
    /// # Errors
    /// As [`get`](Self::get), without retries.
    pub async fn open_stream(&self, route: &str) -> Result<reqwest::Response, UpstreamError> {
        let opened = async {
            loop {
                match self.open_stream_once(route).await {
                    Err(UpstreamError::Unauthenticated { .. }) if self.await_new_credential().await => {}
                    other => return other,
                }
            }
        };
        self.unless_stopped(opened).await
    }

    async fn open_stream_once(&self, route: &str) -> Result<reqwest::Response, UpstreamError> {
        let mut prepared = self.prepare(route, Access::Key, &self.inner.stream_http).await?;
        let result = self
            .answer(
                prepared.request,
                route,
                Access::Key,
                prepared.pacer,
                &mut prepared.record,
            )
            .await
            .map(|(response, _)| response);
        self.settle(prepared.record, prepared.started, result.as_ref().err());
        result
    }

    /// Waits for the pacer, takes the request from the budget and the quota,
    /// and builds the request with the key.
    async fn prepare<'a>(
        &'a self,
        route: &str,
        access: Access,
        http: &reqwest::Client,
    ) -> Result<Prepared<'a>, UpstreamError> {
        let inner = &self.inner;
        let pacer = match access {
            Access::Key => &inner.pacer,
            Access::Public => &inner.public_pacer,
        };
        if access == Access::Key {
            self.refresh_credential();
            if let Some(expired) = self.expired_token(route) {
                return Err(expired);
            }
        }
        pacer.acquire().await;
        // The run's budget first: a request it refuses must not hold a quota reservation.
        if let Err(spent) = self.spend() {
            pacer.observe(None);
            return Err(spent);
        }
        if access == Access::Key
            && let Err(cap) = self.take_share()
        {
            pacer.observe(None);
            return Err(UpstreamError::ShareSpent { cap });
        }
        if access == Access::Key
            && let Err(exhausted) = self.reserve_quota()
        {
            pacer.observe(None);
            return Err(exhausted);
        }
        let mut request = http.get(format!("{}{}", inner.base, route));
        if access == Access::Key
            && let Some(key) = inner.key.read().unwrap_or_else(|e| e.into_inner()).as_ref()
        {
            let (name, value) = key.header();
            // Marked sensitive: kept out of reqwest's own debug output.
            let mut value =
                reqwest::header::HeaderValue::from_str(&value).expect("a parsed credential is a valid header value");
            value.set_sensitive(true);
            request = request.header(name, value);
        }
        inner.sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Prepared {
            request,
            pacer,
            started: Instant::now(),
            record: RequestRecord {
                at: inner.clock.now(),
                route: route.to_owned(),
                status: 0,
                latency_ms: 0,
                rate_remaining: None,
                quota_remaining: None,
                retry_after_s: None,
                error: None,
            },
        })
    }

    /// Logs a finished request (the log table, metrics, debug line).
    fn settle(&self, mut record: RequestRecord, started: Instant, error: Option<&UpstreamError>) {
        record.latency_ms = started.elapsed().as_millis() as i64;
        if let Some(err) = error {
            record.error = Some(err.to_string());
        }
        tracing::debug!(
            message = "Request done.",
            route = record.route,
            status = record.status,
            latency_ms = record.latency_ms
        );
        crate::metrics::request(record.status, record.rate_remaining, record.quota_remaining);
        self.inner.log.lock().unwrap_or_else(|e| e.into_inner()).push(record);
    }

    /// Sends the request and reads what its headers say (rate and quota
    /// windows, Retry-After); a success comes back with its body unread, any
    /// other status as the error it means.
    async fn answer(
        &self,
        request: reqwest::RequestBuilder,
        route: &str,
        access: Access,
        pacer: &Pacer,
        record: &mut RequestRecord,
    ) -> Result<(reqwest::Response, DateTime<Utc>), UpstreamError> {
        let inner = &self.inner;
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                pacer.observe(None);
                if access == Access::Key {
                    self.release_quota(None);
                }
                // reqwest errors carry the URL, which never holds the key (it travels in a header).
                return Err(transient(route, format!("request failed: {}", without_url(&e)), None));
            }
        };
        let status = response.status();
        let headers = response.headers().clone();
        let rate = RateWindow::from_headers(&headers);
        let quota = QuotaWindow::from_headers(&headers).bounded(inner.clock.now());
        pacer.observe(Some(&rate));
        record.status = status.as_u16();
        record.rate_remaining = rate.remaining;
        record.quota_remaining = quota.remaining;
        if access == Access::Key {
            self.release_quota(Some((quota, rate)));
        }
        let now = inner.clock.now();
        let retry_after = ratelimit::retry_after(&headers, now);
        record.retry_after_s = retry_after.map(|d| d.as_secs_f64());
        if status == StatusCode::TOO_MANY_REQUESTS
            && let Some(wait) = retry_after.and_then(|d| chrono::Duration::from_std(d).ok())
        {
            pacer.hold_until(now + wait);
        }
        if status.is_success() {
            return Ok((response, now));
        }
        if status.is_redirection() {
            let location = headers
                .get(reqwest::header::LOCATION)
                .map_or_else(|| "(no Location)".to_owned(), |l| service_text(l.as_bytes()));
            return Err(UpstreamError::Redirected {
                route: route.to_owned(),
                status: status.as_u16(),
                location,
            });
        }
        // An error body is small; one that is not is cut, not read whole.
        let body = match read_body(response, route, ERROR_BODY_BYTES).await {
            Ok(body) => body,
            Err(UpstreamError::TooLarge { .. }) => Bytes::from_static(b"(an error body too large to read)"),
            Err(e) => return Err(e),
        };
        let mut error: ErrorBody = serde_json::from_slice(&body).unwrap_or_else(|_| ErrorBody {
            error: service_text(&body),
            ..Default::default()
        });
        error.error = service_text(error.error.as_bytes());
        let message = error.error.clone();
        match status {
            StatusCode::UNAUTHORIZED => Err(self.refused(route, message)),
            StatusCode::TOO_MANY_REQUESTS
                if is_quota_wall(error.code.as_deref(), record.quota_remaining, retry_after) =>
            {
                let reset_at = retry_after
                    .and_then(|d| chrono::Duration::from_std(d).ok())
                    .map(|d| now + d)
                    .or(inner.quota.lock().unwrap_or_else(|e| e.into_inner()).quota.reset_at)
                    .unwrap_or(now);
                Err(UpstreamError::QuotaExhausted {
                    window: inner
                        .quota
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .quota
                        .window
                        .clone()
                        .unwrap_or_else(|| "quota".into()),
                    reset_at,
                    sales_email: error.sales_email.unwrap_or_else(|| "the service's sales team".into()),
                })
            }
            StatusCode::TOO_MANY_REQUESTS => Err(transient(route, format!("429 rate_limited: {message}"), retry_after)),
            StatusCode::NOT_FOUND => Err(UpstreamError::NotFound {
                route: route.to_owned(),
                message,
            }),
            StatusCode::BAD_REQUEST => Err(UpstreamError::BadRequest {
                route: route.to_owned(),
                message,
                body: Box::new(error),
            }),
            s if s.is_server_error() => Err(transient(route, format!("HTTP {}: {message}", s.as_u16()), retry_after)),
            s => Err(UpstreamError::Status {
                route: route.to_owned(),
                status: s.as_u16(),
                code: error.code,
                message,
            }),
        }
    }
}

/// A request ready to send, with what its log row needs.
struct Prepared<'a> {
    request: reqwest::RequestBuilder,
    pacer: &'a Pacer,
    started: Instant,
    record: RequestRecord,
}

pub use crate::wire::encode;
