//! The attributed news tape (`/news/feed`, and its live stream), each
//! company's own news (`/companies/{id}/news`, lineage included), the
//! sources (`/news/sources`) and the topic taxonomy (`/news/topics`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::{
    Arrival, BodyError, Details, Feed, Fetch, Params, Tape, TapeHead, nothing_more, page_limit, parse_body,
    parse_envelope, route_param,
};
use crate::batch::table;
use crate::records::Rows;
use crate::tables::Compression::{Dictionary, Fsst, Zstd};
use crate::tables::{LakePartition, LoadRule};

/// A news feed page (`/news/feed`, `/companies/{id}/news`, `/news/search`, stream frames).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsPage<'a> {
    #[serde(borrow)]
    pub items: Vec<&'a RawValue>,
    pub latest_id: Option<String>,
    pub next_cursor: Option<String>,
    #[serde(default)]
    pub has_more: bool,
    pub server_time: Option<String>,
}

/// A news item. Fields a licence withholds are absent.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsItem {
    pub id: String,
    /// Set on an item sent again because its headline was rewritten (`changedSince`).
    #[serde(default)]
    pub rewritten: bool,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_timestamp")]
    pub published_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_timestamp")]
    pub first_seen_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_timestamp")]
    pub updated_at: Option<DateTime<Utc>>,
    pub headline: Option<String>,
    pub snippet: Option<String>,
    pub body: Option<String>,
    pub url: Option<String>,
    pub source: Option<NewsSource>,
    #[serde(default)]
    pub tickers: Vec<String>,
    #[serde(default)]
    pub ciks: Vec<String>,
    #[serde(default)]
    pub people: Vec<String>,
    #[serde(default)]
    pub indicators: Vec<String>,
    #[serde(default)]
    pub topics: Vec<String>,
    pub storyline_id: Option<String>,
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub importance: Option<i64>,
    pub flash: Option<bool>,
    pub form: Option<String>,
}

/// A news item's `firstSeenAt` alone: what decides whether a backfill goes
/// on, read before the item is mapped.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsItemSeen {
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_timestamp")]
    pub first_seen_at: Option<DateTime<Utc>>,
}

/// A news item's id, and whether it came again for a rewritten headline:
/// what shows that a forward page follows on from the last.
#[derive(Debug, Deserialize)]
struct NewsItemId {
    id: Option<String>,
    #[serde(default)]
    rewritten: bool,
}

/// A news source, as an item carries it or as `/news/sources` lists it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewsSource {
    pub id: String,
    pub name: Option<String>,
    pub licence_class: Option<String>,
    pub attribution: Option<String>,
    pub display_policy: Option<String>,
    #[serde(rename = "count24h")]
    #[serde(default, deserialize_with = "crate::wire::tolerant::option_integer")]
    pub count_24h: Option<i64>,
}

/// An item's source as its `news_sources` row keeps it: the keys in the
/// order a `serde_json` map sorts them, as rows stored before were written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SourceRecord<'a> {
    attribution: &'a Option<String>,
    display_policy: &'a Option<String>,
    id: &'a str,
    licence_class: &'a Option<String>,
    name: &'a Option<String>,
}

impl<'a> SourceRecord<'a> {
    fn of(s: &'a NewsSource) -> SourceRecord<'a> {
        SourceRecord {
            attribution: &s.attribution,
            display_policy: &s.display_policy,
            id: &s.id,
            licence_class: &s.licence_class,
            name: &s.name,
        }
    }
}

/// `GET /news/sources`.
#[derive(Debug, Deserialize)]
pub struct NewsSourcesPage<'a> {
    #[serde(borrow)]
    pub sources: Vec<&'a RawValue>,
}

/// `GET /news/topics`.
#[derive(Debug, Deserialize)]
pub struct NewsTopicsPage<'a> {
    #[serde(borrow)]
    pub topics: Vec<&'a RawValue>,
}

#[derive(Debug, Deserialize)]
pub struct NewsTopic {
    pub key: String,
    pub name: Option<String>,
    pub parent: Option<String>,
}

table! {
    /// The news tape, each item in its newest version. Fields a licence withholds
    /// are NULL, and an absent field never erases one stored from another route.
    pub const NEWS_ITEMS: NewsItemRow = "news_items" {
        /// The service's item id (also the tape's cursor).
        id: Text,
        /// When the source published it (UTC).
        published_at: Timestamp,
        /// When the service first saw the item (UTC).
        first_seen_at: Timestamp,
        /// When the service last revised the item (UTC).
        updated_at: Timestamp,
        /// Headline text; NULL while the service gates it.
        headline: Text,
        /// Short excerpt of the item; NULL where the licence withholds it.
        snippet: Text,
        /// Full text of the item; only for full-text-licensed sources, else NULL (withheld, not
        /// missing).
        body: Text,
        /// Link to the item at its source.
        url: Text,
        /// The news source (news_sources.source_id).
        source_id: Text,
        /// Name of the original source.
        source_name: Text,
        /// The source's licence class, which decides what of an item may be shown.
        licence_class: Text,
        /// The attribution text the source requires wherever its items are shown.
        attribution: Text,
        /// How the source's items may be displayed (its licence terms).
        display_policy: Text,
        /// Tickers the item is tagged with.
        tickers: TextList,
        /// Companies the item is tagged with, by CIK or platform key.
        ciks: TextList,
        /// People the item is tagged with.
        people: TextList,
        /// Macro indicators the item is tagged with.
        indicators: TextList,
        /// Topics the item is tagged with (news_topics.topic_key).
        topics: TextList,
        /// The storyline the item belongs to.
        storyline_id: Text,
        /// The service's importance score, 0-100.
        importance: Int,
        /// Whether the service marks the item as a flash (breaking) item.
        flash: Bool,
        /// SEC form type, such as 10-K, 10-Q, 20-F, DEF 14A or S-1.
        form: Text,
    }
    key: &["id"],
    load: LoadRule::Upsert,
    versions: true,
    keep_stored: &["snippet", "body", "url", "form"],
    newer_by: Some("updated_at"),
    lake_partition: Some(LakePartition::Month("published_at")),
    compression: &[
        ("raw", Zstd),
        ("id", Fsst),
        ("headline", Fsst),
        ("snippet", Fsst),
        ("url", Fsst),
        ("source_id", Dictionary),
        ("source_name", Dictionary),
        ("licence_class", Dictionary),
        ("attribution", Dictionary),
        ("display_policy", Dictionary),
    ],
}

table! {
    /// Every headline version ever seen, by the item's `updatedAt`; a
    /// headline rewritten without `updatedAt` moving is a version too, at
    /// the time fdsync first saw it (`raw` keeps the `updatedAt` served).
    pub const NEWS_HEADLINE_REVISIONS: HeadlineRevisionRow = "news_headline_revisions" {
        /// The service's item id (also the tape's cursor).
        id: Text,
        /// When the service revised the headline to this (UTC).
        updated_at: Timestamp,
        /// Headline text; NULL while the service gates it.
        headline: Text,
    }
    key: &["id", "updated_at"],
    load: LoadRule::Append,
    versioned_by: Some("headline"),
    lake_partition: Some(LakePartition::Month("updated_at")),
    compression: &[("raw", Zstd), ("id", Fsst), ("headline", Fsst)],
}

table! {
    /// Sources from the sources route (with 24-hour counts) and from the source
    /// object every item carries (with its display policy).
    pub const NEWS_SOURCES: NewsSourceRow = "news_sources" {
        /// The news source (news_sources.source_id).
        source_id: Text,
        /// Name as served.
        name: Text,
        /// The source's licence class, which decides what of an item may be shown.
        licence_class: Text,
        /// The attribution text the source requires wherever its items are shown.
        attribution: Text,
        /// How the source's items may be displayed (its licence terms).
        display_policy: Text,
        /// Items from the source in the last 24 hours.
        count_24h: Int,
    }
    key: &["source_id"],
    load: LoadRule::Upsert,
    versions: true,
    keep_stored: &["name", "licence_class", "attribution", "display_policy", "count_24h"],
}

table! {
    /// The news topic tree.
    pub const NEWS_TOPICS: NewsTopicRow = "news_topics" {
        /// The topic's key.
        topic_key: Text,
        /// Name as served.
        name: Text,
        /// The parent topic's key; NULL for a top-level topic.
        parent_key: Text,
    }
    key: &["topic_key"],
    load: LoadRule::Upsert,
    versions: true,
}

table! {
    /// Which news items a company's own feed served: items tagged to the company
    /// or to a predecessor in its corporate lineage (beyond the contract).
    pub const NEWS_COMPANY_ITEMS: CompanyItemRow = "news_company_items" {
        /// The company: its canonical `cik` from the company payload (10-digit SEC CIK or a
        /// platform key such as TW:2330), whatever spelling the configuration used.
        company_key: Text,
        /// The news item's id (news_items.id).
        news_id: Text,
        /// When fdsync (or the service, for news) first saw this value (UTC).
        first_seen_at: Timestamp,
    }
    key: &["company_key", "news_id"],
    load: LoadRule::InsertOnce,
    lineage: false,
}

table! {
    /// Storyline members as `/news/items/{id}` names them: the item asked
    /// and the rest of its storyline, each also stored in `news_items`, so a
    /// storyline the configured news filters cut can be rebuilt (beyond the contract).
    pub const NEWS_STORYLINES: StorylineRow = "news_storylines" {
        /// The storyline the item belongs to.
        storyline_id: Text,
        /// The news item's id (news_items.id).
        news_id: Text,
        /// When fdsync (or the service, for news) first saw this value (UTC).
        first_seen_at: Timestamp,
    }
    key: &["storyline_id", "news_id"],
    load: LoadRule::InsertOnce,
    lineage: false,
}

table! {
    /// Snapshots of the service's top stories (`/news/top`): each storyline
    /// collapsed to its strongest item in the window, ranked by importance,
    /// as read at `observed_at`; the items are in news_items (beyond the contract).
    pub const NEWS_TOP: NewsTopRow = "news_top" {
        /// When fdsync read the ranking (UTC).
        observed_at: Timestamp,
        /// The window ranked: 6h, 24h or 7d.
        top_window: Text,
        /// The item's place in the ranking, 1 the strongest.
        ranking: Int,
        /// The news item's id (news_items.id).
        news_id: Text,
        /// The storyline the item belongs to.
        storyline_id: Text,
        /// The service's importance score, 0-100.
        importance: Int,
    }
    key: &["observed_at", "top_window", "ranking"],
    load: LoadRule::Append,
    lineage: false,
}

table! {
    /// Which items each saved search (`[news] searches`) found at
    /// `/news/search`; the items are in news_items (beyond the contract).
    pub const NEWS_SEARCH_HITS: SearchHitRow = "news_search_hits" {
        /// The saved search's text, as configured and sent as `q`.
        search: Text,
        /// The news item's id (news_items.id).
        news_id: Text,
        /// When fdsync (or the service, for news) first saw this value (UTC).
        first_seen_at: Timestamp,
        /// When the search first served the item to fdsync (UTC).
        found_at: Timestamp,
    }
    key: &["search", "news_id"],
    load: LoadRule::InsertOnce,
    lineage: false,
}

/// `GET /news/top`.
#[derive(Debug, Deserialize)]
struct NewsTopPage<'a> {
    window: Option<String>,
    #[serde(borrow)]
    items: Vec<&'a RawValue>,
}

/// `GET /news/items/{id}`: one story with the rest of its storyline.
#[derive(Debug, Deserialize)]
struct NewsItemPage<'a> {
    #[serde(borrow)]
    item: &'a RawValue,
    #[serde(borrow, default)]
    storyline: Vec<&'a RawValue>,
}

/// The tape: new items and rewritten headlines forward, a backfill back to
/// the horizon, and the live stream.
pub static FEED: Feed = Feed {
    name: "news",
    route: "/api/v1/news/feed",
    auth: true,
    tables: &[&NEWS_ITEMS, &NEWS_HEADLINE_REVISIONS, &NEWS_SOURCES],
    fetch: Fetch::Cursor(TAPE),
    params: &["stream_route", "backfill_days", "since", "page_limit"],
    check: tape,
};

/// Each company's own news, with the same cursors.
pub static COMPANY: Feed = Feed {
    name: "company_news",
    route: "/api/v1/companies/{company}/news",
    auth: true,
    tables: &[
        &NEWS_ITEMS,
        &NEWS_HEADLINE_REVISIONS,
        &NEWS_SOURCES,
        &NEWS_COMPANY_ITEMS,
    ],
    fetch: Fetch::CompanyCursor(TAPE),
    params: &["backfill_days", "since", "page_limit"],
    check: tape,
};

/// Each saved search's own tape at the search route, with the same cursors.
pub static SEARCHES: Feed = Feed {
    name: "news_searches",
    route: "/api/v1/news/search",
    auth: true,
    tables: &[&NEWS_SEARCH_HITS, &NEWS_ITEMS, &NEWS_HEADLINE_REVISIONS, &NEWS_SOURCES],
    fetch: Fetch::SearchCursor(Tape {
        read: read_hits,
        ..TAPE
    }),
    params: &["backfill_days", "since", "page_limit"],
    check: tape,
};

/// The bodies of full-text items the tapes stored without one, from the
/// item route, most important first within `daily_requests`; the rest of
/// each storyline comes with them. Nothing is asked when the tapes carry bodies.
pub static BODIES: Feed = Feed {
    name: "news_bodies",
    route: "/api/v1/news/items/{id}",
    auth: true,
    tables: &[&NEWS_ITEMS, &NEWS_HEADLINE_REVISIONS, &NEWS_SOURCES, &NEWS_STORYLINES],
    fetch: Fetch::Details(Details {
        table: &NEWS_ITEMS,
        lacking: "licence_class = 'full_text' AND body IS NULL",
        first: "importance DESC NULLS LAST, id DESC",
        arrived: "first_seen_at",
        read: read_item_page,
    }),
    params: &["daily_requests"],
    check: nothing_more,
};

/// The item and its storyline as `news_items` rows, and each as a member
/// of its storyline: whether the item came with its body.
fn read_item_page(rows: &mut Rows, body: &[u8], id: &str) -> Result<bool, BodyError> {
    let page: NewsItemPage = parse_envelope(rows, body)?;
    let served = serde_json::from_str::<NewsItem>(page.item.get()).ok();
    if served.as_ref().is_some_and(|item| item.id != id) {
        return Err(BodyError::Malformed(format!(
            "the item route for {id} served item {}",
            served.map(|i| i.id).unwrap_or_default()
        )));
    }
    let with_body = served.as_ref().is_some_and(|item| item.body.is_some());
    let storyline = served.and_then(|item| item.storyline_id);
    for raw in std::iter::once(page.item).chain(page.storyline) {
        let Some(seen) = read_item(rows, raw, None) else {
            continue;
        };
        if let Some(storyline_id) = seen.storyline_id.as_ref().or(storyline.as_ref()) {
            rows.push_bare(StorylineRow {
                storyline_id: Some(storyline_id),
                news_id: Some(&seen.id),
                first_seen_at: Some(rows.fetched_at),
            });
        }
    }
    Ok(with_body)
}

/// The service's top stories, a snapshot a run: the ranking in
/// `news_top`, each item in `news_items`.
pub static TOP: Feed = Feed {
    name: "news_top",
    route: "/api/v1/news/top?window=24h&limit=30",
    auth: true,
    tables: &[&NEWS_TOP, &NEWS_ITEMS, &NEWS_HEADLINE_REVISIONS, &NEWS_SOURCES],
    fetch: Fetch::Single(read_top),
    params: &[],
    check: nothing_more,
};

/// A ranking as `news_top` rows at the time it was read, and its items.
fn read_top(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: NewsTopPage = parse_envelope(rows, body)?;
    let window = page
        .window
        .filter(|w| !w.trim().is_empty())
        .ok_or_else(|| BodyError::Malformed("the top stories name no window".into()))?;
    let observed_at = rows.fetched_at;
    for (place, raw) in page.items.iter().enumerate() {
        let Some(seen) = read_item(rows, raw, None) else {
            continue;
        };
        rows.push_bare(NewsTopRow {
            observed_at: Some(observed_at),
            top_window: Some(&window),
            ranking: i64::try_from(place + 1).ok(),
            news_id: Some(&seen.id),
            storyline_id: seen.storyline_id.as_deref(),
            importance: seen.importance,
        });
    }
    Ok(format!("{window} {}", page.items.len()))
}

pub static SOURCES: Feed = Feed {
    name: "news_sources",
    route: "/api/v1/news/sources",
    auth: true,
    tables: &[&NEWS_SOURCES],
    fetch: Fetch::Single(read_sources),
    params: &[],
    check: nothing_more,
};

pub static TOPICS: Feed = Feed {
    name: "news_topics",
    route: "/api/v1/news/topics",
    auth: true,
    tables: &[&NEWS_TOPICS],
    fetch: Fetch::Single(read_topics),
    params: &[],
    check: nothing_more,
};

/// The tape's pages, the company feeds' and the live stream's frames alike.
const TAPE: Tape = Tape {
    head: read_head,
    read: read_page,
    filters: |config| config.news.query(),
};

/// A page's cursors, read without mapping its items. A page is in arrival
/// order (the wire contract: ids sort in arrival order, a page back newest
/// first), so its oldest item is at one end; both ends are read, whichever
/// order a server chose. An end item whose `firstSeenAt` does not parse
/// (quarantined by the mapping) gives way to its neighbour.
fn read_head(body: &[u8], with_ids: bool) -> Result<TapeHead, BodyError> {
    let page: NewsPage = parse_body(body)?;
    let seen = |raw: &&RawValue| {
        serde_json::from_str::<NewsItemSeen>(raw.get())
            .ok()
            .and_then(|seen| seen.first_seen_at)
    };
    let ends: Vec<DateTime<Utc>> = page
        .items
        .iter()
        .find_map(seen)
        .into_iter()
        .chain(page.items.iter().rev().find_map(seen))
        .collect();
    let oldest = ends.iter().min().copied();
    let new_ids = if with_ids {
        page.items
            .iter()
            .filter_map(|raw| serde_json::from_str::<NewsItemId>(raw.get()).ok())
            .filter(|item| !item.rewritten)
            .filter_map(|item| item.id)
            .collect()
    } else {
        Vec::new()
    };
    // An empty cursor is no cursor: sent back, `before=` would read the
    // head again and page the tape in a circle.
    let given = |cursor: Option<String>| cursor.filter(|c| !c.trim().is_empty());
    Ok(TapeHead {
        latest_id: given(page.latest_id),
        next_cursor: given(page.next_cursor),
        has_more: page.has_more,
        server_time: given(page.server_time).or_else(|| {
            ends.iter()
                .max()
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        }),
        items: page.items.len(),
        oldest,
        new_ids,
    })
}

/// Every item of a page ([`read_item`]).
fn read_page(rows: &mut Rows, body: &[u8], company_key: Option<&str>) -> Result<Vec<Arrival>, BodyError> {
    read_items(rows, body, company_key, None)
}

/// A search's page: every item ([`read_item`]), each a hit of `search`.
fn read_hits(rows: &mut Rows, body: &[u8], search: Option<&str>) -> Result<Vec<Arrival>, BodyError> {
    read_items(rows, body, None, search)
}

/// A page's items as rows; with `search`, each also a hit of it.
fn read_items(
    rows: &mut Rows,
    body: &[u8],
    company_key: Option<&str>,
    search: Option<&str>,
) -> Result<Vec<Arrival>, BodyError> {
    let page: NewsPage = parse_envelope(rows, body)?;
    let mut arrivals = Vec::with_capacity(page.items.len());
    for raw in &page.items {
        let Some(seen) = read_item(rows, raw, company_key) else {
            continue;
        };
        if let Some(search) = search {
            rows.push_bare(SearchHitRow {
                search: Some(search),
                news_id: Some(&seen.id),
                first_seen_at: seen.first_seen_at,
                found_at: Some(rows.fetched_at),
            });
        }
        arrivals.push(Arrival {
            first_seen_at: seen.first_seen_at,
            rewritten: seen.rewritten,
        });
    }
    Ok(arrivals)
}

fn tape(_route: &str, params: &Params) -> Result<(), String> {
    if params.stream_route.is_some() {
        route_param(params.stream_route.as_deref(), "stream_route", &[])?;
    }
    page_limit(params)
}

/// What the sync needs to know about a news item it loaded.
#[derive(Debug, Clone)]
pub struct NewsSeen {
    pub id: String,
    pub first_seen_at: Option<DateTime<Utc>>,
    /// Sent again for a rewritten headline, not as a new arrival.
    pub rewritten: bool,
    pub storyline_id: Option<String>,
    pub importance: Option<i64>,
}

/// `news_items`, `news_headline_revisions` and the item's `news_sources`
/// row; with `company_key` (a company's own feed), the `news_company_items`
/// row that says the company's feed served it.
pub fn read_item(rows: &mut Rows, raw: &RawValue, company_key: Option<&str>) -> Option<NewsSeen> {
    let mut item: NewsItem = rows.parse(raw, "news item")?;
    // Tags join with `company_key` only in its one spelling.
    for cik in &mut item.ciks {
        if cik.len() < 10 {
            *cik = crate::wire::company_key(cik);
        }
    }
    let Some(version) = item.updated_at.or(item.first_seen_at) else {
        rows.quarantine(raw.get(), "news item: neither updatedAt nor firstSeenAt".into());
        return None;
    };
    if item.id.is_empty() {
        rows.quarantine(raw.get(), "news item: empty id".into());
        return None;
    }
    let source = item.source.as_ref();
    let row = NewsItemRow {
        id: Some(&item.id),
        published_at: item.published_at,
        first_seen_at: item.first_seen_at,
        updated_at: Some(version),
        headline: item.headline.as_deref(),
        snippet: item.snippet.as_deref(),
        body: item.body.as_deref(),
        url: item.url.as_deref(),
        source_id: source.map(|s| s.id.as_str()),
        source_name: source.and_then(|s| s.name.as_deref()),
        licence_class: source.and_then(|s| s.licence_class.as_deref()),
        attribution: source.and_then(|s| s.attribution.as_deref()),
        display_policy: source.and_then(|s| s.display_policy.as_deref()),
        tickers: &item.tickers,
        ciks: &item.ciks,
        people: &item.people,
        indicators: &item.indicators,
        topics: &item.topics,
        storyline_id: item.storyline_id.as_deref(),
        importance: item.importance,
        flash: item.flash,
        form: item.form.as_deref(),
    };
    rows.push(row, raw.get());
    if let Some(headline) = item.headline.as_deref() {
        let row = HeadlineRevisionRow {
            id: Some(&item.id),
            updated_at: Some(version),
            headline: Some(headline),
        };
        rows.push(row, raw.get());
    }
    if let Some(s) = source {
        let source_raw = serde_json::to_string(&SourceRecord::of(s)).unwrap_or_default();
        if rows.is_new(&source_raw) {
            push_source(rows, s, &source_raw);
        }
    }
    if let Some(company) = company_key {
        rows.push_bare(CompanyItemRow {
            company_key: Some(company),
            news_id: Some(&item.id),
            first_seen_at: item.first_seen_at,
        });
    }
    Some(NewsSeen {
        id: item.id,
        first_seen_at: item.first_seen_at,
        rewritten: item.rewritten,
        storyline_id: item.storyline_id,
        importance: item.importance,
    })
}

/// `news_sources` from the sources route.
fn read_sources(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: NewsSourcesPage = parse_envelope(rows, body)?;
    for raw in &page.sources {
        let Some(s) = rows.parse::<NewsSource>(raw, "news source") else {
            continue;
        };
        push_source(rows, &s, raw.get());
    }
    Ok(rows.fetched_at.to_rfc3339())
}

/// One `news_sources` row, from an item's source object or the sources route.
fn push_source(rows: &mut Rows, s: &NewsSource, raw: &str) {
    let row = NewsSourceRow {
        source_id: Some(&s.id),
        name: s.name.as_deref(),
        licence_class: s.licence_class.as_deref(),
        attribution: s.attribution.as_deref(),
        display_policy: s.display_policy.as_deref(),
        count_24h: s.count_24h,
    };
    rows.push(row, raw);
}

/// `news_topics` from the topic taxonomy.
fn read_topics(rows: &mut Rows, body: &[u8]) -> Result<String, BodyError> {
    let page: NewsTopicsPage = parse_envelope(rows, body)?;
    for raw in &page.topics {
        let Some(t) = rows.parse::<NewsTopic>(raw, "news topic") else {
            continue;
        };
        let row = NewsTopicRow {
            topic_key: Some(&t.key),
            name: t.name.as_deref(),
            parent_key: t.parent.as_deref(),
        };
        rows.push(row, raw.get());
    }
    Ok(rows.fetched_at.to_rfc3339())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_is_kept_as_the_text_rows_stored_before_hold() {
        for body in [
            r#"{"id":"sec_edgar","name":"SEC EDGAR","licenceClass":"public","attribution":"Source: \"SEC\"","displayPolicy":"full"}"#,
            r#"{"id":"wire"}"#,
        ] {
            let s: NewsSource = serde_json::from_str(body).unwrap();
            let before = serde_json::json!({"id": s.id, "name": s.name, "licenceClass": s.licence_class,
                "attribution": s.attribution, "displayPolicy": s.display_policy});
            assert_eq!(
                serde_json::to_string(&SourceRecord::of(&s)).unwrap(),
                before.to_string()
            );
        }
    }
}
