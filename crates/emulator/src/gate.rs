//! What every request passes before its route: the request counter,
//! authentication, the per-minute and quota windows with their headers, and
//! injected faults.

use super::*;

pub(super) fn record_status(state: &AppState, status: StatusCode) {
    let mut stats = state.stats.lock().unwrap_or_else(|e| e.into_inner());
    stats.requests += 1;
    *stats.by_status.entry(status.as_u16()).or_default() += 1;
}

/// Public routes need no credential; they are counted per caller address at
/// the Free plan's limits.
pub(super) async fn count(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let caller = req
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip().to_string())
        .unwrap_or_else(|| "local".into());
    limited(&state, &format!("anon:{caller}"), &PlanLimits::free(), None, req, next).await
}

/// Authenticates the data routes (spec section 5), then applies the account's limits.
pub(super) async fn gate(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
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

pub(super) fn authenticate(state: &AppState, headers: &HeaderMap) -> Result<usize, ApiError> {
    let unauthenticated = |m: &str| ApiError::new(StatusCode::UNAUTHORIZED, m).code("unauthenticated");
    // X-API-KEY wins when both are sent; a bearer that is not a key is an
    // OAuth access token.
    let (key, header) = match headers.get("x-api-key") {
        Some(v) => (
            v.to_str()
                .map_err(|_| unauthenticated("X-API-KEY is not valid text"))?
                .trim()
                .to_owned(),
            "X-API-KEY",
        ),
        None => match headers.get("authorization") {
            Some(v) => {
                let v = v
                    .to_str()
                    .map_err(|_| unauthenticated("Authorization is not valid text"))?;
                let bearer = v
                    .strip_prefix("Bearer ")
                    .ok_or_else(|| unauthenticated("Authorization must be 'Bearer <API_KEY or access token>'"))?
                    .trim()
                    .to_owned();
                (bearer, "Authorization")
            }
            None => {
                return Err(unauthenticated(
                    "missing credential: send X-API-KEY or Authorization: Bearer",
                ));
            }
        },
    };
    let ring = state.keyring.lock().unwrap_or_else(|e| e.into_inner());
    if key.starts_with(KEY_PREFIX) {
        return ring
            .authenticate(&key, state.clock.now())
            .map_err(|_| unauthenticated("invalid or revoked API key"));
    }
    if header == "X-API-KEY" {
        return Err(unauthenticated("malformed API key: keys begin with pk_live_"));
    }
    ring.authenticate_token(&key, state.clock.now())
        .map_err(|refusal| match refusal {
            Refusal::Expired => unauthenticated("access token expired"),
            _ => unauthenticated("invalid access token"),
        })
}

pub(super) fn window_start(now: DateTime<Utc>, period: QuotaPeriod) -> DateTime<Utc> {
    match period {
        QuotaPeriod::Day => now.duration_trunc(chrono::Duration::days(1)).unwrap_or(now),
        QuotaPeriod::Month => Utc
            .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
            .single()
            .unwrap_or(now),
    }
}

pub(super) fn window_end(start: DateTime<Utc>, period: QuotaPeriod) -> DateTime<Utc> {
    match period {
        QuotaPeriod::Day => start + chrono::Duration::days(1),
        QuotaPeriod::Month => start.checked_add_months(chrono::Months::new(1)).unwrap_or(start),
    }
}

pub(super) fn ceil_secs(d: chrono::Duration) -> i64 {
    (d.num_milliseconds() + 999).div_euclid(1000).max(1)
}

/// Counts the request in its fixed windows (every request that reaches here
/// counts, refused ones included), refuses it when a limit is passed, and puts
/// the limit headers on whatever goes back. Past the quota, an account with
/// prepaid credits pays per request until the balance runs out.
pub(super) async fn limited(
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
        if state.quirks.lock().unwrap_or_else(|e| e.into_inner()).bare_quota_429 {
            (e.body.code, e.body.sales_email) = (None, None);
        }
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

/// Injects the configured faults into a counted data-route response.
pub(super) async fn inject_faults(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
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
        return rewrite_json(response, |value| {
            let list = value
                .as_object_mut()
                .and_then(|o| o.values_mut().find_map(|v| v.as_array_mut().filter(|a| !a.is_empty())));
            if let Some(list) = list {
                injected();
                list[0] = json!({"malformed": "an injected record of the wrong shape"});
            }
        })
        .await;
    }
    response
}

/// A JSON response with `edit` applied to its body; a body that is not JSON
/// goes back as it came.
pub(super) async fn rewrite_json(response: Response, edit: impl FnOnce(&mut serde_json::Value)) -> Response {
    rewrite_body(response, |mut value| {
        edit(&mut value);
        value.to_string()
    })
    .await
}

/// A JSON response whose body is `render`ed anew; a body that is not JSON
/// goes back as it came.
pub(super) async fn rewrite_body(response: Response, render: impl FnOnce(serde_json::Value) -> String) -> Response {
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(render(value)))
}
