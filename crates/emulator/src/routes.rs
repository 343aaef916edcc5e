//! The data routes: companies, prices, dividends, indices, coverage, macro,
//! regulation, monthly revenue, filings and 8-K events, and the account
//! and MCP surfaces.

use super::*;

/// Each company's data: its profile, prices, dividends, regulation links,
/// monthly revenue and filings with their sections.
pub(super) fn companies(router: DataRouter) -> DataRouter {
    router
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
}

/// 8-K events: each company's, their item texts, the wire and the latest.
pub(super) fn events(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/companies/{id}/events", get(company_events))
        .route("/api/v1/companies/{id}/events/{accession}", get(event_item_text))
        .route("/api/v1/events/wire", get(events_wire))
        .route("/api/v1/events/latest", get(events_latest))
}

/// Market indices and macro series by country.
pub(super) fn market(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/indices", get(indices))
        .route("/api/v1/countries/{iso}", get(country))
        .route("/api/v1/countries/{iso}/series", get(country_series))
}

/// The account surfaces, which refuse data credentials.
pub(super) fn account(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/keys", get(account_surface))
        .route("/api/v1/billing", get(account_surface))
        .route("/api/v1/watchlists", get(account_surface))
        .route("/api/v1/workspace", get(account_surface))
}

pub(super) fn base_url(headers: &HeaderMap) -> String {
    let host = headers.get("host").and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    format!("http://{host}")
}

pub(super) fn company_or_404(state: &AppState, id: &str) -> Result<world::CompanyProfile, ApiError> {
    state
        .world
        .resolve(id)
        .ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown company '{id}'")))
}

pub(super) async fn account_surface() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "account surfaces do not accept data credentials",
    )
    .code("unauthenticated")
}

/// RFC 9728 protected-resource metadata for the MCP endpoint (spec section 5).
pub(super) async fn oauth_metadata(headers: HeaderMap) -> Json<serde_json::Value> {
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
pub(super) async fn mcp_unauthorized(headers: HeaderMap) -> Response {
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

pub(super) async fn coverage(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let (generated_at, markets) = state.world.coverage(state.clock.now());
    Json(json!({"generatedAt": generated_at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true), "markets": markets}))
}

pub(super) async fn company(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let today = state.clock.now().date_naive();
    Ok(Json(company_or_404(&state, &id)?.payload(today)).into_response())
}

/// Start of a lookback range ending at `today`, or `None` for ALL.
pub(super) fn range_start(range: &str, today: NaiveDate) -> Result<Option<NaiveDate>, ()> {
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

pub(super) async fn prices(
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

/// The body of `GET /companies/{id}/prices`, serialized directly: a
/// `serde_json::Value` with a map for each bar costs more than gzipping the
/// history, on the cores the client shares.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PricesBody<'a> {
    symbol: &'a str,
    bars: Vec<crate::wire::Bar>,
    display_from: i64,
}

pub(super) async fn dividends(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
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

pub(super) async fn indices(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    Json(json!({"indices": state.world.indices(state.clock.now())}))
}

pub(super) fn country_or_error(iso: &str) -> Result<&'static macro_series::CountryDef, ApiError> {
    if iso.len() != 2 || !iso.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!("invalid country '{iso}': use an ISO 3166-1 alpha-2 code such as US"),
        ));
    }
    macro_series::country(iso).ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, format!("unknown country '{iso}'")))
}

pub(super) async fn country(Path(iso): Path<String>) -> ApiResult {
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

pub(super) async fn country_series(
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

pub(super) async fn regulation(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::regulation(state.world.seed, &c, state.clock.now())).into_response())
}

pub(super) async fn monthly_revenue(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
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

pub(super) async fn filing_notes(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> ApiResult {
    let c = company_or_404(&state, &id)?;
    Ok(Json(company_docs::filing_notes(state.world.seed, &c, state.clock.now())).into_response())
}

pub(super) async fn filing_section(
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

pub(super) fn bad_request(message: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, message)
}

/// An integer query parameter within `lo..=hi`, or `default` when absent.
pub(super) fn int_param(
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

pub(super) fn families_param(query: &HashMap<String, String>) -> Result<Option<Vec<String>>, ApiError> {
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

pub(super) async fn company_events(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let limit = int_param(&query, "limit", 1, 500, None)?;
    let c = company_or_404(&state, &id)?;
    let now = state.clock.now();
    let world = &state.world;
    let me = events::filer_of(world, &c);
    let count = events::cadence(world).count_at(world.seed, now);
    let list: Vec<serde_json::Value> = events::numbers(0, count, true)
        .filter(|n| me == Some(events::filer(world, *n)))
        .take(limit.map_or(usize::MAX, |l| l as usize))
        .filter_map(|n| events::event(world, n))
        .map(|e| e.entry(now))
        .collect();
    Ok(Json(json!({"cik": c.cik, "symbol": c.symbol, "events": list})).into_response())
}

pub(super) async fn event_item_text(
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

pub(super) async fn events_wire(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
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
    let count = events::cadence(world).count_at(world.seed, now);
    let lo = from.map_or(0, |d| events::first_on_or_after(world, d)).min(count);
    let hi = to
        .and_then(|d| d.succ_opt())
        .map_or(count, |d| (events::first_on_or_after(world, d) + 1).min(count));
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
        if let Some(q) = &q
            && (now < e.headline_at || !e.headline.to_lowercase().contains(q.as_str()))
        {
            continue;
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

pub(super) async fn events_latest(
    State(state): State<Arc<AppState>>,
    Query(query): Query<HashMap<String, String>>,
) -> ApiResult {
    let limit = int_param(&query, "limit", 1, 100, Some(30))?.unwrap_or(30) as usize;
    let families = families_param(&query)?;
    let now = state.clock.now();
    let world = &state.world;
    let list: Vec<serde_json::Value> = events::numbers(0, events::cadence(world).count_at(world.seed, now), true)
        .filter_map(|n| events::event(world, n))
        .filter(|e| families.as_ref().is_none_or(|f| f.iter().any(|x| x == e.family)))
        .take(limit)
        .map(|e| e.wire_entry(now))
        .collect();
    Ok(Json(json!({"events": list})).into_response())
}
