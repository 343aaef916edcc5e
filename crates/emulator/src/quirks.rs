//! Other choices a real service may make where the specification leaves the
//! shape open, and the slips a likely one makes, each off by default:
//! `fdsync emulator --quirks SPEC` or `PUT /admin/quirks`. Where
//! [`super::WireShapes`] writes the same values another legal way, these
//! change what a page holds: a smaller page than asked, a list under another
//! name, a CIK without its padding, a forward page newest first. A client
//! must read each one completely or say loudly that it could not.

use std::collections::HashSet;

use chrono::{DateTime, SecondsFormat};
use serde_json::Value;

use super::*;

/// The route families with a record list, which [`Quirks::renamed`] and
/// [`Quirks::nulled`] name.
pub fn list_families() -> Vec<&'static str> {
    families::named().filter(|n| n.list.is_some()).map(|n| n.name).collect()
}

/// The route families whose records carry a list of their own, which
/// [`Quirks::renamed_inner`] serves under another name.
pub fn inner_families() -> Vec<&'static str> {
    families::named()
        .filter(|n| n.inner.is_some())
        .map(|n| n.name)
        .collect()
}

/// Every quirk's name as [`Quirks::parse`] takes it (before any `=`): what
/// `docs/open-choices.md` lists and some test drives.
pub const QUIRK_NAMES: &[&str] = &[
    "page_cap",
    "rename",
    "null",
    "unpadded_ciks",
    "after_newest_first",
    "empty_texts",
    "offsetless_timestamps",
    "bare_429",
    "withhold_page",
    "frozen_updated_at",
    "redated",
    "unserved",
    "refuse",
    "rename_inner",
    "ignore_sort",
    "no_total",
    "offset_cap",
    "repeated_filters",
    "json_texts",
    "no_server_time",
    "exclusive_dates",
    "retyped_dividend",
    "withdrawn_month",
    "split",
    "local_midnight_bars",
    "ignored_lookback",
    "withdrawn_country",
    "bodies_by_item",
    "withheld_bodies",
    "envelope_field",
];

/// The name a renamed list is served under.
pub const RENAMED_LIST: &str = "data";

/// What the data routes do differently, each on or off.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Quirks {
    /// The wire and latest serve at most this many events a page, and echo
    /// it as the page's `limit` (the specification shows no maximum).
    pub page_cap: Option<u64>,
    /// Route families ([`list_families`]) whose list is served as `data`.
    pub renamed: Vec<String>,
    /// Route families whose list is served as `null`.
    pub nulled: Vec<String>,
    /// Every `cik` (and `ciks`, `predecessors`) without its leading zeros.
    pub unpadded_ciks: bool,
    /// A news `after=` page holds the newest `limit` items after the cursor,
    /// newest first, and says no more remain: what skips the items between.
    /// A live-stream frame holds its items newest first.
    pub after_newest_first: bool,
    /// Each 8-K item text is served empty the first time it is asked for.
    pub empty_texts: bool,
    /// Timestamps without their offset (`2026-11-25T14:03:07`, meaning UTC).
    pub offsetless_timestamps: bool,
    /// A quota refusal (429) without its `code` and `sales_email`.
    pub bare_quota_429: bool,
    /// The first wire page asked at this offset or past it comes back empty,
    /// its `total` true: one page withheld.
    pub withhold_page: Option<u64>,
    /// A news item's `updatedAt` stays its `firstSeenAt`, even when its
    /// headline is rewritten.
    pub frozen_updated_at: bool,
    /// Every 8-K event's `filingDate` served a year earlier: a restated date,
    /// which moves a row to another lake partition.
    pub redated: bool,
    /// Route families that refuse one company, as a service answers for an
    /// issuer a route does not cover (404: a non-SEC issuer's 8-K index,
    /// regulation outside its pilot) or a plan that does not include it
    /// (402 `upgrade_required`): (families, the company's id, the status).
    pub unserved: Option<(Vec<String>, String, u16)>,
    /// Route families refused whole with a status (`refuse=stream:403`).
    pub refused: Vec<(String, u16)>,
    /// Route families ([`inner_families`]) whose records carry their inner
    /// list under another name.
    pub renamed_inner: Vec<String>,
    /// The wire ignores `sort`: newest first whatever is asked.
    pub ignore_sort: bool,
    /// The wire's pages carry no `total`.
    pub no_total: bool,
    /// The wire answers an empty page at this offset and past it, as a
    /// service that caps offset paging does.
    pub offset_cap: Option<u64>,
    /// The news routes read a filter's several values from repeated
    /// parameters (`tickers=A&tickers=B`); a comma list is one value.
    pub repeated_filters: bool,
    /// 8-K item texts served as JSON strings (`application/json`).
    pub json_texts: bool,
    /// News pages without `serverTime`.
    pub no_server_time: bool,
    /// The wire's `from` and `to` leave out the days they name.
    pub exclusive_dates: bool,
    /// Each company's oldest dividend event served as a `Special` one: a
    /// kind restated, which moves the event to another key.
    pub retyped_dividend: bool,
    /// Each company's oldest month of revenue left out: a filing withdrawn.
    pub withdrawn_month: bool,
    /// A 2:1 split on this day: every bar before it served adjusted (prices
    /// halved, volume doubled), as services restate a history.
    pub split: Option<chrono::NaiveDate>,
    /// Each bar's `t` at its exchange's local midnight (Tokyo's falls on the
    /// UTC day before), as many market data services stamp daily bars.
    pub local_midnight_bars: bool,
    /// The prices lookback parameter ignored: every answer is the default
    /// window (one year), its `displayFrom` saying so.
    pub ignored_lookback: bool,
    /// The first country count of a geo answer left out: a count withdrawn.
    pub withdrawn_country: bool,
    /// The news feeds, search, top stories and stream frames carry no
    /// `body`: a full-text item's body is served by `/news/items/{id}` only.
    pub bodies_by_item: bool,
    /// No `body` anywhere: the feeds carry none and `/news/items/{id}`
    /// answers the item and its storyline without one (a licence withheld).
    pub withheld_bodies: bool,
    /// Every JSON object a data route answers carries this field beside its
    /// own (a fact-source reference, say): a field at envelope level that no
    /// reader knows.
    pub envelope_field: Option<String>,
}

/// The news filters that take several values.
const MULTI_VALUE_FILTERS: &[&str] = &["tickers", "cik", "topics", "sources", "excludeSources", "excludeForms"];

/// The status a quirk refuses with, parsed from `400` to `499`.
fn refusal_status(v: &str) -> Option<u16> {
    v.parse::<u16>()
        .ok()
        .filter(|s| (400..500).contains(s) && *s != 401 && *s != 429)
}

/// The refusal a quirk answers with: the status, its code where the
/// specification gives one, and a message.
pub(super) fn refusal(status: u16, what: &str) -> ApiError {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN);
    let error = ApiError::new(
        status,
        format!("{what}: {}", status.canonical_reason().unwrap_or("refused")),
    );
    if status == StatusCode::PAYMENT_REQUIRED {
        error.code("upgrade_required")
    } else {
        error
    }
}

impl Quirks {
    /// `page_cap=37,rename=wire+geo,null=regulation,unpadded_ciks,after_newest_first,
    /// empty_texts,offsetless_timestamps,bare_429,withhold_page=40,frozen_updated_at,redated,
    /// unserved=events+regulation@JP:7203[:402],refuse=stream:403,rename_inner=regulation,
    /// ignore_sort,no_total,offset_cap=400`, any of them; `rename=all` names every family.
    pub fn parse(spec: &str) -> Result<Quirks, String> {
        let mut q = Quirks::default();
        let list_names = list_families();
        let inner_names = inner_families();
        let any_names: Vec<&str> = families::named().map(|n| n.name).collect();
        let among = |list: &str, known: &[&str]| -> Result<Vec<String>, String> {
            if list == "all" {
                return Ok(known.iter().map(|n| (*n).to_owned()).collect());
            }
            list.split('+')
                .map(|name| {
                    known
                        .iter()
                        .find(|k| **k == name)
                        .map(|k| (*k).to_owned())
                        .ok_or_else(|| format!("{name:?}: a route family is one of {}, or all", known.join(", ")))
                })
                .collect()
        };
        let families = |list: &str| among(list, &list_names);
        let count = |part: &str, v: &str| {
            v.parse::<u64>()
                .ok()
                .filter(|n| *n >= 1)
                .ok_or_else(|| format!("{part:?}: expected a whole number of at least 1"))
        };
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("page_cap", v)) => q.page_cap = Some(count(part, v)?),
                Some(("withhold_page", v)) => q.withhold_page = Some(count(part, v)?),
                Some(("split", v)) => {
                    q.split = Some(v.parse().map_err(|_| format!("{part:?}: expected split=YYYY-MM-DD"))?);
                }
                Some(("rename", v)) => q.renamed = families(v)?,
                Some(("null", v)) => q.nulled = families(v)?,
                Some(("unserved", v)) => {
                    let (list, company) = v
                        .split_once('@')
                        .ok_or_else(|| format!("{part:?}: expected unserved=FAMILIES@COMPANY[:STATUS]"))?;
                    let (company, status) = match company
                        .rsplit_once(':')
                        .and_then(|(c, s)| Some((c, refusal_status(s)?)))
                    {
                        Some((company, status)) => (company, status),
                        None => (company, 404),
                    };
                    q.unserved = Some((among(list, &any_names)?, company.to_owned(), status));
                }
                Some(("refuse", v)) => {
                    for one in v.split('+') {
                        let (family, status) = one
                            .rsplit_once(':')
                            .and_then(|(f, s)| Some((f, refusal_status(s)?)))
                            .ok_or_else(|| {
                                format!("{part:?}: expected refuse=FAMILY:STATUS, a status 4xx but 401 and 429")
                            })?;
                        q.refused.push((among(family, &any_names)?.remove(0), status));
                    }
                }
                Some(("rename_inner", v)) => q.renamed_inner = among(v, &inner_names)?,
                Some(("offset_cap", v)) => q.offset_cap = Some(count(part, v)?),
                Some(("envelope_field", v)) if !v.is_empty() => q.envelope_field = Some(v.to_owned()),
                None if part == "unpadded_ciks" => q.unpadded_ciks = true,
                None if part == "after_newest_first" => q.after_newest_first = true,
                None if part == "empty_texts" => q.empty_texts = true,
                None if part == "offsetless_timestamps" => q.offsetless_timestamps = true,
                None if part == "bare_429" => q.bare_quota_429 = true,
                None if part == "frozen_updated_at" => q.frozen_updated_at = true,
                None if part == "redated" => q.redated = true,
                None if part == "ignore_sort" => q.ignore_sort = true,
                None if part == "no_total" => q.no_total = true,
                None if part == "repeated_filters" => q.repeated_filters = true,
                None if part == "json_texts" => q.json_texts = true,
                None if part == "no_server_time" => q.no_server_time = true,
                None if part == "exclusive_dates" => q.exclusive_dates = true,
                None if part == "retyped_dividend" => q.retyped_dividend = true,
                None if part == "withdrawn_month" => q.withdrawn_month = true,
                None if part == "local_midnight_bars" => q.local_midnight_bars = true,
                None if part == "ignored_lookback" => q.ignored_lookback = true,
                None if part == "withdrawn_country" => q.withdrawn_country = true,
                None if part == "bodies_by_item" => q.bodies_by_item = true,
                None if part == "withheld_bodies" => q.withheld_bodies = true,
                _ => {
                    return Err(format!(
                        "{part:?}: use page_cap=N, rename=FAMILIES, null=FAMILIES, unpadded_ciks, after_newest_first, \
                         empty_texts, offsetless_timestamps, bare_429, withhold_page=OFFSET, frozen_updated_at, redated, \
                         unserved=FAMILIES@COMPANY[:STATUS], refuse=FAMILY:STATUS, rename_inner=FAMILIES, ignore_sort, \
                         no_total, offset_cap=OFFSET, repeated_filters, json_texts, no_server_time, exclusive_dates, \
                         retyped_dividend, withdrawn_month, split=YYYY-MM-DD, local_midnight_bars, ignored_lookback, withdrawn_country, \
                         bodies_by_item, withheld_bodies or envelope_field=NAME"
                    ));
                }
            }
        }
        Ok(q)
    }
}

/// What the quirks remember between requests.
#[derive(Debug, Default)]
pub(super) struct QuirkState {
    /// Item texts served empty once: `accession?item`.
    pub(super) emptied: HashSet<String>,
    /// Whether the withheld wire page has been withheld.
    pub(super) withheld: bool,
}

/// Applies the switched-on quirks around a data route (inside the shapes,
/// so a quirk and the other legal shapes combine).
pub(super) async fn quirks(State(state): State<Arc<AppState>>, mut req: Request, next: Next) -> Response {
    let q = state.quirks.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if q == Quirks::default() {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    let mut query: Vec<(String, String)> = req
        .uri()
        .query()
        .map(|q| url::form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let named = families::family_of(&path);
    let family = named.map(|n| n.name);
    if let Some(refused) = refused(&q, &state, &path, family) {
        return refused;
    }
    let asked = |query: &[(String, String)], name: &str| query.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let mut rewrite_query = false;
    if let Some(cap) = q.page_cap
        && matches!(family, Some("wire" | "latest"))
    {
        let default = if family == Some("wire") { 50 } else { 30 };
        let limit = asked(&query, "limit")
            .and_then(|l| l.parse::<u64>().ok())
            .unwrap_or(default);
        if limit > cap {
            query.retain(|(k, _)| k != "limit");
            query.push(("limit".into(), cap.to_string()));
            rewrite_query = true;
        }
    }
    // An after= page taken from the head instead: the newest items, newest first.
    let newest_after = match (q.after_newest_first, family, asked(&query, "after")) {
        (true, Some("news"), Some(after)) => {
            query.retain(|(k, _)| k != "after" && k != "changedSince");
            rewrite_query = true;
            Some(after)
        }
        _ => None,
    };
    if q.repeated_filters && matches!(family, Some("news" | "stream")) {
        // What the route handlers read as a comma list: the repeated values
        // joined, a comma list sent as one value kept as one.
        let mut read: Vec<(String, String)> = Vec::new();
        for (k, v) in std::mem::take(&mut query) {
            if !MULTI_VALUE_FILTERS.contains(&k.as_str()) {
                read.push((k, v));
                continue;
            }
            let one = v.replace(',', " ");
            match read.iter_mut().find(|(name, _)| *name == k) {
                Some((_, joined)) => {
                    joined.push(',');
                    joined.push_str(&one);
                }
                None => read.push((k, one)),
            }
        }
        query = read;
        rewrite_query = true;
    }
    if q.exclusive_dates && family == Some("wire") {
        // What the inclusive handler then serves: the days strictly between.
        for (name, shift) in [("from", 1), ("to", -1)] {
            if let Some((_, value)) = query.iter_mut().find(|(k, _)| k == name)
                && let Ok(day) = value.parse::<chrono::NaiveDate>()
                && let Some(moved) = day.checked_add_signed(chrono::Duration::days(shift))
            {
                *value = moved.to_string();
                rewrite_query = true;
            }
        }
    }
    if q.ignored_lookback && family == Some("prices") && asked(&query, "range").is_some() {
        query.retain(|(k, _)| k != "range");
        rewrite_query = true;
    }
    if q.ignore_sort && family == Some("wire") && asked(&query, "sort").is_some() {
        query.retain(|(k, _)| k != "sort");
        rewrite_query = true;
    }
    let capped = q.offset_cap.is_some_and(|cap| {
        family == Some("wire") && asked(&query, "offset").and_then(|o| o.parse::<u64>().ok()).unwrap_or(0) >= cap
    });
    let withhold = match (q.withhold_page, family) {
        (Some(from), Some("wire")) => {
            let offset = asked(&query, "offset").and_then(|o| o.parse::<u64>().ok()).unwrap_or(0);
            let mut s = state.quirk_state.lock().unwrap_or_else(|e| e.into_inner());
            let now = offset >= from && !s.withheld;
            s.withheld |= now;
            now
        }
        _ => false,
    };
    if rewrite_query {
        let rewritten: String = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(query.iter())
            .finish();
        if let Ok(uri) = format!("{path}?{rewritten}").parse() {
            *req.uri_mut() = uri;
        }
    }
    let text_key = (q.empty_texts && path.starts_with("/api/v1/companies/") && path.contains("/events/")).then(|| {
        format!(
            "{}?{}",
            path.rsplit('/').next().unwrap_or(""),
            asked(&query, "item").unwrap_or_default()
        )
    });
    let response = next.run(req).await;
    if !response.status().is_success() {
        return response;
    }
    if let Some(key) = text_key {
        let first = state
            .quirk_state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .emptied
            .insert(key);
        if first {
            let (parts, _) = response.into_parts();
            return Response::from_parts(parts, axum::body::Body::empty());
        }
        if !q.json_texts {
            return response;
        }
    }
    if q.json_texts && family == Some("item_text") {
        // The item's text as a JSON string, declared as JSON.
        let (mut parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        let quoted = Value::String(String::from_utf8_lossy(&bytes).into_owned()).to_string();
        parts.headers.remove(axum::http::header::CONTENT_LENGTH);
        parts.headers.insert(
            axum::http::header::CONTENT_TYPE,
            axum::http::HeaderValue::from_static("application/json"),
        );
        return Response::from_parts(parts, axum::body::Body::from(quoted));
    }
    let emptied = withhold || capped;
    let zone = if q.local_midnight_bars && family == Some("prices") {
        company_of(&path)
            .and_then(|id| state.world.resolve(&id))
            .and_then(|p| market_zone(&p.market))
    } else {
        None
    };
    gate::rewrite_json(response, |body| {
        if let Some(zone) = zone {
            local_midnights(body, zone);
        }
        rewrite_body(body, &q, named, newest_after.as_deref(), emptied)
    })
    .await
}

/// The answer of a route a quirk refuses: one company's (`unserved`) or the
/// whole family's to this key (`refuse`).
/// The company id a per-company path names, decoded.
fn company_of(path: &str) -> Option<String> {
    let id = path.strip_prefix("/api/v1/companies/")?.split('/').next()?;
    url::form_urlencoded::parse(format!("id={id}").as_bytes())
        .next()
        .map(|(_, id)| id.into_owned())
}

/// The exchange time zone of the world's markets.
fn market_zone(market: &str) -> Option<chrono_tz::Tz> {
    use chrono_tz::{America, Asia, Europe};
    Some(match market {
        "US" => America::New_York,
        "JP" => Asia::Tokyo,
        "TW" => Asia::Taipei,
        "GB" => Europe::London,
        "SA" => Asia::Riyadh,
        _ => return None,
    })
}

/// Each bar's `t`, a UTC midnight, moved to the local midnight of that day in `zone`.
fn local_midnights(body: &mut Value, zone: chrono_tz::Tz) {
    use chrono::TimeZone;
    let Some(bars) = body.get_mut("bars").and_then(Value::as_array_mut) else {
        return;
    };
    for bar in bars.iter_mut().filter_map(Value::as_object_mut) {
        let local = bar
            .get("t")
            .and_then(Value::as_i64)
            .and_then(DateTime::from_timestamp_millis)
            .and_then(|t| {
                zone.from_local_datetime(&t.date_naive().and_time(chrono::NaiveTime::MIN))
                    .earliest()
            });
        if let Some(local) = local {
            bar.insert("t".into(), json!(local.timestamp_millis()));
        }
    }
}

fn refused(q: &Quirks, state: &AppState, path: &str, family: Option<&str>) -> Option<Response> {
    if let (Some((families, company, status)), Some(f)) = (&q.unserved, family)
        && families.iter().any(|n| n == f)
        && let Some(id) = company_of(path)
        && let (Some(asked), Some(unserved)) = (state.world.resolve(&id), state.world.resolve(company))
        && asked.cik == unserved.cik
    {
        return Some(refusal(*status, &format!("{f} is not served for {}", asked.cik)).into_response());
    }
    if let Some(f) = family
        && let Some((_, status)) = q.refused.iter().find(|(n, _)| n == f)
    {
        return Some(refusal(*status, &format!("{f} is not served to this key")).into_response());
    }
    None
}

/// The quirks that reshape a JSON body the route served: a careless `after=`
/// page, a withheld or capped page (`emptied`), fields left out, lists renamed
/// or `null`, and the values `walk` rewrites.
fn rewrite_body(
    body: &mut Value,
    q: &Quirks,
    named: Option<&families::Named>,
    newest_after: Option<&str>,
    emptied: bool,
) {
    let family = named.map(|n| n.name);
    if let Some(after) = newest_after {
        newest_first_after(body, after);
    }
    if emptied && let Some(events) = body.get_mut("events") {
        *events = json!([]);
    }
    if q.retyped_dividend
        && family == Some("dividends")
        && let Some(oldest) = body
            .get_mut("events")
            .and_then(Value::as_array_mut)
            .and_then(|events| events.first_mut())
            .and_then(Value::as_object_mut)
    {
        oldest.insert("type".into(), json!("Special"));
    }
    if let Some(day) = q.split
        && family == Some("prices")
        && let Some(bars) = body.get_mut("bars").and_then(Value::as_array_mut)
    {
        let split_ms = day.and_time(chrono::NaiveTime::MIN).and_utc().timestamp_millis();
        for bar in bars.iter_mut().filter_map(Value::as_object_mut) {
            if bar.get("t").and_then(Value::as_i64).is_some_and(|t| t < split_ms) {
                for price in ["o", "h", "l", "c"] {
                    if let Some(p) = bar.get(price).and_then(Value::as_f64) {
                        bar.insert(price.into(), json!((p / 2.0 * 10_000.0).round() / 10_000.0));
                    }
                }
                if let Some(v) = bar.get("v").and_then(Value::as_i64) {
                    bar.insert("v".into(), json!(v * 2));
                }
            }
        }
    }
    if q.withdrawn_month
        && family == Some("monthly_revenue")
        && let Some(months) = body.get_mut("months").and_then(Value::as_array_mut)
        && !months.is_empty()
    {
        // Oldest first or newest first, the month with the least `month`.
        let oldest =
            (0..months.len()).min_by_key(|&i| months[i].get("month").and_then(Value::as_str).map(str::to_owned));
        if let Some(i) = oldest {
            months.remove(i);
        }
    }
    if (q.bodies_by_item || q.withheld_bodies) && matches!(family, Some("news" | "top")) {
        without_bodies(body);
    }
    if q.withheld_bodies
        && family == Some("item")
        && let Some(answer) = body.as_object_mut()
    {
        for (key, value) in answer.iter_mut() {
            let members: Vec<&mut Value> = match (key.as_str(), value) {
                ("item", item) => vec![item],
                ("storyline", Value::Array(list)) => list.iter_mut().collect(),
                _ => Vec::new(),
            };
            for member in members.into_iter().filter_map(Value::as_object_mut) {
                member.remove("body");
            }
        }
    }
    if q.withdrawn_country
        && family == Some("geo")
        && let Some(counts) = body.get_mut("countries").and_then(Value::as_array_mut)
        && !counts.is_empty()
    {
        counts.remove(0);
    }
    if q.no_server_time
        && family == Some("news")
        && let Some(object) = body.as_object_mut()
    {
        object.remove("serverTime");
    }
    if q.no_total
        && family == Some("wire")
        && let Some(object) = body.as_object_mut()
    {
        object.remove("total");
    }
    if let Some(named) = named
        && let (Some(outer), Some(inner)) = (named.list, named.inner)
        && q.renamed_inner.iter().any(|n| n == named.name)
        && let Some(records) = body.get_mut(outer).and_then(Value::as_array_mut)
    {
        for record in records.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(value) = record.remove(inner) {
                record.insert(RENAMED_LIST.to_owned(), value);
            }
        }
    }
    if let Some(named) = named
        && let Some(list) = named.list
        && let Some(object) = body.as_object_mut()
    {
        if q.nulled.iter().any(|n| n == named.name) && object.contains_key(list) {
            object.insert(list.to_owned(), Value::Null);
        } else if q.renamed.iter().any(|n| n == named.name)
            && let Some(value) = object.remove(list)
        {
            object.insert(RENAMED_LIST.to_owned(), value);
        }
    }
    if let Some(name) = &q.envelope_field
        && let Some(object) = body.as_object_mut()
    {
        object.insert(
            name.clone(),
            json!({"source": "EDGAR full-text index", "ref": format!("fs_{}", object.len())}),
        );
    }
    if q.unpadded_ciks || q.offsetless_timestamps || q.frozen_updated_at || q.redated {
        walk(body, None, q);
    }
}

/// A news page's items without their `body` (`bodies_by_item`).
pub(super) fn without_bodies(page: &mut Value) {
    for item in page
        .get_mut("items")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(item) = item.as_object_mut() {
            item.remove("body");
        }
    }
}

/// A head page turned into what a careless `after=` makes of it: only the
/// items newer than `after`, newest first, `latestId` the newest, no more.
fn newest_first_after(page: &mut Value, after: &str) {
    let Some(items) = page.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    items.retain(|item| item.get("id").and_then(Value::as_str).is_some_and(|id| id > after));
    let latest = items
        .first()
        .and_then(|item| item.get("id"))
        .cloned()
        .unwrap_or_else(|| json!(after));
    page["latestId"] = latest;
    page["nextCursor"] = Value::Null;
    page["hasMore"] = json!(false);
}

/// CIKs without padding, timestamps without offset, wherever they are.
fn walk(value: &mut Value, key: Option<&str>, q: &Quirks) {
    match value {
        Value::String(s) => {
            if q.unpadded_ciks && matches!(key, Some("cik" | "ciks" | "predecessors")) {
                let trimmed = s.trim_start_matches('0');
                if s.len() == 10 && s.bytes().all(|b| b.is_ascii_digit()) && !trimmed.is_empty() {
                    *s = trimmed.to_owned();
                }
            }
            if q.offsetless_timestamps
                && s.len() >= 20
                && s.as_bytes().get(10) == Some(&b'T')
                && let Ok(t) = DateTime::parse_from_rfc3339(s)
            {
                let naive = t.to_utc().to_rfc3339_opts(SecondsFormat::AutoSi, true);
                *s = naive.trim_end_matches('Z').to_owned();
            }
        }
        Value::Array(list) => {
            for v in list {
                walk(v, key, q);
            }
        }
        Value::Object(map) => {
            if q.frozen_updated_at
                && map.contains_key("updatedAt")
                && let Some(first) = map.get("firstSeenAt").cloned()
            {
                map.insert("updatedAt".into(), first);
            }
            if q.redated
                && map.contains_key("accession")
                && let Some(day) = map
                    .get("filingDate")
                    .and_then(Value::as_str)
                    .and_then(|d| d.parse::<chrono::NaiveDate>().ok())
                    .and_then(|d| d.checked_sub_months(chrono::Months::new(12)))
            {
                map.insert("filingDate".into(), json!(day.to_string()));
            }
            for (k, v) in map.iter_mut() {
                walk(v, Some(k.as_str()), q);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quirks_parse_as_documented_and_name_what_is_wrong() {
        let q = Quirks::parse("page_cap=37,rename=wire+geo,null=regulation,unpadded_ciks,bare_429").unwrap();
        assert_eq!(q.page_cap, Some(37));
        assert_eq!(q.renamed, ["wire", "geo"]);
        assert_eq!(q.nulled, ["regulation"]);
        assert!(q.unpadded_ciks && q.bare_quota_429 && !q.empty_texts);
        assert_eq!(
            Quirks::parse("rename=all").unwrap().renamed.len(),
            list_families().len()
        );
        assert!(Quirks::parse("rename=wires").unwrap_err().contains("wire"));
        assert!(Quirks::parse("page_cap=0").unwrap_err().contains("at least 1"));
        assert!(Quirks::parse("loud").unwrap_err().contains("page_cap"));
        let q = Quirks::parse("unserved=events+regulation@JP:7203").unwrap();
        assert_eq!(
            q.unserved,
            Some((vec!["events".into(), "regulation".into()], "JP:7203".into(), 404))
        );
        let q = Quirks::parse("unserved=prices@TW:2330:402,refuse=stream:403,rename_inner=regulation").unwrap();
        assert_eq!(q.unserved, Some((vec!["prices".into()], "TW:2330".into(), 402)));
        assert_eq!(q.refused, [("stream".to_owned(), 403)]);
        assert_eq!(q.renamed_inner, ["regulation"]);
        assert!(Quirks::parse("refuse=stream:401").unwrap_err().contains("401"));
        assert!(Quirks::parse("rename_inner=geo").unwrap_err().contains("regulation"));
        assert!(
            Quirks::parse("unserved=events")
                .unwrap_err()
                .contains("FAMILIES@COMPANY")
        );
    }

    #[test]
    fn ciks_lose_their_padding_and_timestamps_their_offset() {
        let q = Quirks {
            unpadded_ciks: true,
            offsetless_timestamps: true,
            ..Quirks::default()
        };
        let mut body = json!({"cik": "0000789019", "symbol": "0000000001",
            "events": [{"ciks": ["0000320193", "TW:2330"], "acceptedAt": "2026-10-30T16:05:09-05:00", "filingDate": "2026-10-30"}]});
        walk(&mut body, None, &q);
        assert_eq!(
            body,
            json!({"cik": "789019", "symbol": "0000000001",
                "events": [{"ciks": ["320193", "TW:2330"], "acceptedAt": "2026-10-30T21:05:09", "filingDate": "2026-10-30"}]})
        );
    }

    #[test]
    fn every_quirk_name_parses() {
        for name in QUIRK_NAMES {
            let spec = match *name {
                "page_cap" | "withhold_page" | "offset_cap" => format!("{name}=3"),
                "split" => format!("{name}=2026-09-01"),
                "envelope_field" => format!("{name}=factSource"),
                "rename" | "null" => format!("{name}=wire"),
                "rename_inner" => format!("{name}=regulation"),
                "unserved" => format!("{name}=prices@MSFT:402"),
                "refuse" => format!("{name}=stream:403"),
                _ => (*name).to_owned(),
            };
            assert_ne!(Quirks::parse(&spec).unwrap(), Quirks::default(), "{spec}");
        }
    }
}
