//! The attributed news tape: one lazy, time-ordered stream of items.
//!
//! Item `n` is first seen at `EPOCH + n * SPACING` plus a jitter smaller than the
//! spacing, so ids (`n_0000001234`) sort in arrival order and a time window maps
//! to a range of `n`: a million-item tape is never held in memory. Some
//! headlines are rewritten an hour or two after arrival; fields a source's
//! licence withholds are absent, never empty.

use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::events::{Filer, filer};
use super::world::{Cadence, CompanyProfile, World, named_count, unit};

const SPACING_SECS: i64 = 45;
/// Rewrites happen within this long after an item arrives.
pub const MAX_REWRITE_MINUTES: i64 = 120;

pub struct SourceDef {
    pub id: &'static str,
    pub name: &'static str,
    pub licence: &'static str,
    pub attribution: &'static str,
}

pub const SOURCES: &[SourceDef] = &[
    SourceDef {
        id: "sec_edgar",
        name: "SEC EDGAR",
        licence: "public",
        attribution: "Source: U.S. SEC EDGAR",
    },
    SourceDef {
        id: "issuer_pr",
        name: "Issuer press releases",
        licence: "full_text",
        attribution: "Issuer press release",
    },
    SourceDef {
        id: "wire_a",
        name: "Licensed wire A",
        licence: "headline_only",
        attribution: "(c) Wire A, headline only",
    },
    SourceDef {
        id: "wire_b",
        name: "Licensed wire B",
        licence: "snippet",
        attribution: "(c) Wire B",
    },
    SourceDef {
        id: "exchange",
        name: "Exchange notices",
        licence: "public",
        attribution: "Exchange notice",
    },
    SourceDef {
        id: "central_bank",
        name: "Central-bank releases",
        licence: "full_text",
        attribution: "Central bank release",
    },
];

pub const TOPICS: &[(&str, &str, Option<&str>)] = &[
    ("markets", "Markets", None),
    ("earnings", "Earnings", Some("markets")),
    ("deals", "Mergers and acquisitions", Some("markets")),
    ("macro", "Macro", None),
    ("rates", "Interest rates", Some("macro")),
    ("regulation", "Regulation", None),
    ("technology", "Technology", None),
];

/// Arrival times of news items.
pub const CADENCE: Cadence = Cadence {
    epoch: DateTime::from_timestamp(1_748_736_000, 0).expect("2025-06-01T00:00:00Z"),
    spacing_ms: SPACING_SECS * 1000,
    salt: 0x5EE,
};

pub fn id(n: u64) -> String {
    format!("n_{n:010}")
}

pub fn parse_id(id: &str) -> Option<u64> {
    let digits = id.strip_prefix("n_")?;
    (digits.len() == 10 && digits.bytes().all(|b| b.is_ascii_digit())).then(|| digits.parse().ok())?
}

/// When item `n`'s headline is rewritten, if it ever is.
pub fn rewritten_at(seed: u64, n: u64) -> Option<DateTime<Utc>> {
    (unit(seed, 0x4E4, n) < 0.1)
        .then(|| CADENCE.at(seed, n) + Duration::minutes(10 + (unit(seed, 0x4E5, n) * 110.0) as i64))
}

/// Item `n` as served at `now`.
pub struct Item {
    pub source: &'static SourceDef,
    pub body: ItemBody,
}

impl Item {
    /// The item as its JSON value, for callers that pick fields by name.
    pub fn json(&self) -> Value {
        serde_json::to_value(&self.body).expect("a news item serializes")
    }
}

/// A news item as the wire contract shapes it. Typed rather than built as a
/// `serde_json::Value`: a feed page is 200 of these, and building each as a
/// map of strings was most of the emulator's time on a backfill (its CPU is
/// taken from the client's on the benches' two cores).
#[derive(serde::Serialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct ItemBody {
    pub id: String,
    pub published_at: String,
    pub first_seen_at: String,
    pub updated_at: String,
    pub headline: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snippet: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub source: SourceBody,
    pub tickers: Vec<String>,
    pub ciks: Vec<String>,
    pub people: [&'static str; 0],
    pub indicators: [&'static str; 0],
    pub topics: [&'static str; 1],
    pub storyline_id: String,
    pub importance: u64,
    pub flash: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub form: Option<&'static str>,
    /// Only on items sent again because their headline was rewritten.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rewritten: bool,
}

#[derive(serde::Serialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct SourceBody {
    pub id: &'static str,
    pub name: &'static str,
    pub licence_class: &'static str,
    pub attribution: &'static str,
    pub display_policy: &'static str,
}

/// A feed body as the wire contract shapes it.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub items: Vec<ItemBody>,
    pub latest_id: Option<String>,
    pub next_cursor: Option<String>,
    pub has_more: bool,
    pub server_time: String,
}

/// The company item `n` is about, cheap to compute (no item is built).
fn subject(world: &World, n: u64) -> Filer {
    filer(world, n ^ 0x9E37)
}

pub fn item(world: &World, n: u64, now: DateTime<Utc>) -> Option<Item> {
    let seed = world.seed;
    let seen = CADENCE.at(seed, n);
    let source = &SOURCES[(unit(seed, 0x50, n) * SOURCES.len() as f64) as usize % SOURCES.len()];
    let company = match subject(world, n) {
        Filer::Named(i) => world.named_by_index(i)?,
        Filer::Generated(g) => world.generated_by_index(g)?,
    };
    // Some items about a company are tagged to a predecessor in its lineage.
    let cik = match company.predecessors.first() {
        Some(p) if unit(seed, 0x11, n) < 0.3 => p.clone(),
        _ => company.cik.clone(),
    };
    let topic = TOPICS[(unit(seed, 0x70, n) * TOPICS.len() as f64) as usize % TOPICS.len()].0;
    let importance = (unit(seed, 0x1A, n) * 100.0) as u64;
    let flash = importance >= 95;
    let rewrite = rewritten_at(seed, n).filter(|t| *t <= now);
    let mut headline = format!(
        "{} {}: {} update",
        company.name,
        ["reports", "announces", "says", "confirms"][n as usize % 4],
        topic
    );
    if rewrite.is_some() {
        headline.push_str(" (updated)");
    }
    let millis = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let body = ItemBody {
        id: id(n),
        published_at: (seen - Duration::seconds((unit(seed, 0x9B, n) * 600.0) as i64))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        first_seen_at: millis(seen),
        updated_at: millis(rewrite.unwrap_or(seen)),
        headline,
        snippet: (source.licence != "headline_only").then(|| format!("{} shared an update on {topic}.", company.name)),
        body: (source.licence == "full_text").then(|| {
            format!(
                "{} shared an update on {topic}. The full text is licensed for display.",
                company.name
            )
        }),
        url: matches!(source.licence, "public" | "full_text")
            .then(|| format!("https://example.invalid/news/{}", id(n))),
        source: SourceBody {
            id: source.id,
            name: source.name,
            licence_class: source.licence,
            attribution: source.attribution,
            display_policy: if source.licence == "headline_only" {
                "headline_link"
            } else {
                "full"
            },
        },
        tickers: vec![company.symbol],
        ciks: vec![cik],
        people: [],
        indicators: [],
        topics: [topic],
        storyline_id: format!("st_{:08}", n / 5),
        importance,
        flash,
        form: (source.id == "sec_edgar").then_some("8-K"),
        rewritten: false,
    };
    Some(Item { source, body })
}

/// The feed's filters, parsed from the query.
#[derive(Default)]
pub struct Filters {
    pub tickers: Option<Vec<String>>,
    pub ciks: Option<Vec<String>>,
    pub topics: Option<Vec<String>>,
    pub sources: Option<Vec<String>>,
    pub exclude_sources: Vec<String>,
    pub exclude_forms: Vec<String>,
    pub flash: bool,
    pub min_importance: u64,
    pub q: Option<String>,
}

impl Filters {
    /// The companies an item can be about and pass the `tickers` and `ciks`
    /// filters, when either is given (a company's feed always gives `ciks`);
    /// `None` when any company can. An item names one company: its symbol,
    /// and its CIK or its first predecessor's. Checked before an item is
    /// built: a company with little news otherwise cost building every item
    /// of the tape, 11-13 s a page, past the client's timeout.
    fn subjects(&self, world: &World) -> Option<Vec<Filer>> {
        if self.tickers.is_none() && self.ciks.is_none() {
            return None;
        }
        let could_be = |c: &CompanyProfile| {
            self.tickers.as_ref().is_none_or(|w| w.contains(&c.symbol))
                && self
                    .ciks
                    .as_ref()
                    .is_none_or(|w| w.contains(&c.cik) || c.predecessors.first().is_some_and(|p| w.contains(p)))
        };
        let named = (0..named_count()).filter_map(|i| Some((Filer::Named(i), world.named_by_index(i)?)));
        // Generated companies have no predecessors: one of the given CIKs is
        // theirs, or else one of the given tickers is their symbol.
        let generated = match (&self.ciks, &self.tickers) {
            (Some(ciks), _) => ciks
                .iter()
                .filter_map(|c| world.generated_number(c))
                .collect::<Vec<_>>(),
            (None, Some(tickers)) => tickers
                .iter()
                .filter_map(|t| t.strip_prefix('S')?.parse::<u64>().ok())
                .collect(),
            (None, None) => Vec::new(),
        };
        let generated = generated
            .into_iter()
            .filter_map(|g| Some((Filer::Generated(g), world.generated_by_index(g)?)));
        Some(
            named
                .chain(generated)
                .filter(|(_, c)| could_be(c))
                .map(|(f, _)| f)
                .collect(),
        )
    }

    pub fn matches(&self, it: &Item) -> bool {
        let any = |want: &Option<Vec<String>>, have: &[String]| {
            want.as_ref().is_none_or(|w| have.iter().any(|h| w.contains(h)))
        };
        let topics = it.body.topics.map(str::to_owned);
        any(&self.tickers, &it.body.tickers)
            && any(&self.ciks, &it.body.ciks)
            && any(&self.topics, &topics)
            && self
                .sources
                .as_ref()
                .is_none_or(|s| s.iter().any(|x| x == it.source.id))
            && !self.exclude_sources.iter().any(|x| x == it.source.id)
            && !self.exclude_forms.iter().any(|f| it.body.form == Some(f.as_str()))
            && (!self.flash || it.body.flash)
            && it.body.importance >= self.min_importance
            && self.q.as_ref().is_none_or(|q| {
                let text = format!("{} {}", it.body.headline, it.body.snippet.as_deref().unwrap_or(""));
                text.to_lowercase().contains(q)
            })
    }
}

/// One page of the feed as the wire contract defines the cursors.
pub fn page(
    world: &World,
    now: DateTime<Utc>,
    filters: &Filters,
    limit: usize,
    after: Option<u64>,
    before: Option<u64>,
    changed_since: Option<DateTime<Utc>>,
) -> Page {
    let count = CADENCE.count_at(world.seed, now);
    let subjects = filters.subjects(world);
    let matching = |n: u64| {
        if let Some(s) = &subjects
            && !s.contains(&subject(world, n))
        {
            return None;
        }
        item(world, n, now).filter(|it| filters.matches(it))
    };
    let server_time = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    if let Some(a) = after {
        let mut items = Vec::new();
        if let Some(since) = changed_since {
            // Items at or before A whose headline was rewritten after T, each once.
            let lo = CADENCE.first_at_or_after(since - Duration::minutes(MAX_REWRITE_MINUTES + 1));
            for n in lo..=a.min(count.saturating_sub(1)) {
                if rewritten_at(world.seed, n).is_some_and(|t| t > since && t <= now)
                    && let Some(it) = matching(n)
                {
                    items.push(ItemBody {
                        rewritten: true,
                        ..it.body
                    });
                }
            }
        }
        let mut newest = a;
        let mut more = false;
        let mut fresh = 0;
        for n in (a + 1)..count {
            if let Some(it) = matching(n) {
                if fresh == limit {
                    more = true;
                    break;
                }
                items.push(it.body);
                newest = n;
                fresh += 1;
            }
        }
        return Page {
            items,
            latest_id: Some(id(newest)),
            next_cursor: None,
            has_more: more,
            server_time,
        };
    }
    let top = before.unwrap_or(count).min(count);
    let mut items: Vec<ItemBody> = Vec::new();
    let mut oldest = None;
    let mut more = false;
    for n in (0..top).rev() {
        if let Some(it) = matching(n) {
            if items.len() == limit {
                more = true;
                break;
            }
            items.push(it.body);
            oldest = Some(n);
        }
    }
    Page {
        latest_id: items.first().map(|i| i.id.clone()),
        items,
        next_cursor: if more { oldest.map(id) } else { None },
        has_more: more,
        server_time,
    }
}
