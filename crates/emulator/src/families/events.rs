//! 8-K events: each company's, their item texts, the wire and the latest.

use super::{Family, Named, bad_request, company_or_404, int_param};
use crate::*;

pub(crate) const FAMILY: Family = Family {
    routes,
    named: &[
        Named::list("wire", &["/api/v1/events/wire"], "events").inner("items"),
        Named::list("latest", &["/api/v1/events/latest"], "events").inner("items"),
        Named::list("events", &["/api/v1/companies/{id}/events"], "events").inner("items"),
        Named::other("item_text", &["/api/v1/companies/{id}/events/{accession}"]),
    ],
};

/// 8-K events: each company's, their item texts, the wire and the latest.
fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/companies/{id}/events", get(company_events))
        .route("/api/v1/companies/{id}/events/{accession}", get(event_item_text))
        .route("/api/v1/events/wire", get(events_wire))
        .route("/api/v1/events/latest", get(events_latest))
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
    let count = events::cadence(world).count_at(world.seed, now);
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

async fn events_latest(State(state): State<Arc<AppState>>, Query(query): Query<HashMap<String, String>>) -> ApiResult {
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
