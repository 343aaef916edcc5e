//! The news routes: the feed and each company's, items, sources, topics,
//! search, top stories, and the live stream.

use super::{Family, Named, bad_request, company_or_404, int_param};
use crate::*;

pub(crate) const FAMILY: Family = Family {
    routes,
    named: &[
        Named::list(
            "news",
            &[
                "/api/v1/news/feed",
                "/api/v1/news/search",
                "/api/v1/companies/{id}/news",
            ],
            "items",
        ),
        Named::list("sources", &["/api/v1/news/sources"], "sources"),
        Named::list("topics", &["/api/v1/news/topics"], "topics"),
        Named::other("stream", &["/api/v1/news/stream"]),
        Named::other("top", &["/api/v1/news/top"]),
        Named::other("item", &["/api/v1/news/items/{id}"]),
    ],
};

/// The news routes: the feed and each company's, search, the live stream,
/// top stories, items, topics and sources.
fn routes(router: DataRouter) -> DataRouter {
    router
        .route("/api/v1/companies/{id}/news", get(company_news))
        .route("/api/v1/news/feed", get(news_feed))
        .route("/api/v1/news/search", get(news_search))
        .route("/api/v1/news/stream", get(news_stream))
        .route("/api/v1/news/top", get(news_top))
        .route("/api/v1/news/items/{id}", get(news_item))
        .route("/api/v1/news/topics", get(news_topics))
        .route("/api/v1/news/sources", get(news_sources))
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
            // As served: an offset-less time (a quirk) is UTC.
            crate::wire::parse_time(v).ok_or_else(|| {
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
        if news::CADENCE.at(state.world.seed, n) > now - chrono::Duration::hours(24)
            && let Some(it) = news::item(&state.world, n, now)
        {
            *per_source.entry(it.source.id).or_default() += 1;
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
                let shapes = *state.shapes.lock().unwrap_or_else(|e| e.into_inner());
                let mut page = serde_json::to_value(&page).expect("a feed page serializes");
                let quirks = state.quirks.lock().unwrap_or_else(|e| e.into_inner()).clone();
                if quirks.after_newest_first
                    && let Some(items) = page.get_mut("items").and_then(serde_json::Value::as_array_mut)
                {
                    items.reverse();
                }
                if quirks.bodies_by_item || quirks.withheld_bodies {
                    crate::quirks::without_bodies(&mut page);
                }
                let body = super::shapes::render(&page, shapes);
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
